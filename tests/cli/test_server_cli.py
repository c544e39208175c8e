"""`odradek server` refuses bad configuration with one line and a non-zero exit."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest


def run_server(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "server", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--override", "no.such.key=1"], "unknown config key 'no.such.key'"),
        (["--override", "num.partitions=many"], "num.partitions: expected int"),
        (["--override", "listeners=SSL://127.0.0.1:1"], "an SSL listener needs ssl.keystore"),
        (
            ["--override", "listeners=PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2"],
            "sasl.enabled.mechanisms for listener SASL_PLAINTEXT: GSSAPI not supported",
        ),
        (
            [
                "--override",
                "listeners=SASL_PLAINTEXT://127.0.0.1:1",
                "--override",
                "sasl.enabled.mechanisms=PLAIN",
            ],
            "listener.name.sasl_plaintext.plain.sasl.jaas.config is not set",
        ),
        (
            ["--override", "listeners=PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"],
            "each listener must have a different name",
        ),
        (
            [
                "--override",
                "listeners=PLAINTEXT://127.0.0.1:1,B://127.0.0.1:1",
                "--override",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,B:PLAINTEXT",
            ],
            "each listener must have a different port",
        ),
        (["--override", "listeners=B://127.0.0.1:1"], "protocol defined for listener B"),
        (
            [
                "--override",
                "listeners=PLAINTEXT://127.0.0.1:1",
                "--override",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,B:PLAINTEXT",
                "--override",
                "advertised.listeners=B://h:1",
            ],
            "listener B is not in listeners",
        ),
        (
            [
                "--override",
                "socket.request.max.bytes=1000",
                "--override",
                "queued.max.request.bytes=10",
            ],
            "queued.max.request.bytes (10) must be larger or equal to socket.request.max.bytes",
        ),
        (["--override", "max.connections.per.ip=0"], "can be set to zero only if"),
        (
            [
                "--override",
                "inter.broker.listener.name=PLAINTEXT",
                "--override",
                "security.inter.broker.protocol=PLAINTEXT",
            ],
            "Only one of inter.broker.listener.name and security.inter.broker.protocol",
        ),
        (
            [
                "--override",
                "listeners=PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2",
                "--override",
                "sasl.enabled.mechanisms=SCRAM-SHA-512",
                "--override",
                "security.inter.broker.protocol=SASL_PLAINTEXT",
            ],
            "sasl.mechanism.inter.broker.protocol=GSSAPI is not supported",
        ),
        (["--override", "max.connections.per.ip.overrides=h"], "expected host:count pairs"),
        (["--override", "justakey"], "--override expects key=value"),
        (["missing.properties"], "cannot read config file"),
    ],
)
def test_bad_config_is_one_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    result = run_server(*args, cwd=tmp_path)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in result.stderr


def test_non_utf8_properties_file_is_one_line(tmp_path: Path) -> None:
    """The broker reads its file with the shared parser (odradek.properties): bytes that
    are not UTF-8 are one error line, not a UnicodeDecodeError traceback."""
    (tmp_path / "latin1.properties").write_bytes(b"log.dirs=/tmp/caf\xe9\n")
    result = run_server("latin1.properties", cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: latin1.properties: not a text properties file (byte 17 is not UTF-8)"
    ]


def test_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_server(
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dir={tmp_path / 'data'}",
            cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")


def test_data_dir_of_a_running_broker_is_refused_in_one_line(tmp_path: Path) -> None:
    from odradek.storage.dir_lock import DirLock

    data = tmp_path / "data"
    with DirLock.acquire(data):  # what a running broker holds
        result = run_server(
            "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", f"log.dir={data}",
            cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"error: Failed to acquire lock on file .lock in {data}. "
        "A Kafka instance in another process or thread is using this directory."
    )


def test_broker_id_other_than_stored_is_refused_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("#\n#date\nversion=0\nbroker.id=0\n")
    result = run_server(
        "--override", "listeners=PLAINTEXT://127.0.0.1:0",
        "--override", f"log.dir={data}",
        "--override", "broker.id=5",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: Configured broker.id 5 doesn't match stored broker.id 0")
    assert str(data) in lines[0]
    # Nothing of the refused broker was written into the other broker's directory.
    assert sorted(p.name for p in data.iterdir()) == [".lock", "meta.properties"]
