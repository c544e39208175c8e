"""README's "Using it" commands, run exactly as written, in order, against a fresh broker.

The section's first block starts ``odradek server`` in the foreground (a terminal of its
own); here it runs in the background and every other line runs after it, each in a shell
that has sourced ``.venv/bin/activate`` as the block's first line does. The second block
starts the broker from ``config/server.properties`` instead and must find the same data.
The directory is a copy of what a fresh clone holds (``config/``), with ``.venv`` pointing
at the virtualenv running the tests. The commands use Kafka's default port 9092 as written,
so the test waits for it to be free (and skips if it never is).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
PORT = 9092


def using_it_blocks() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Using it\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def port_in_use() -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", PORT)) == 0


def wait_for(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    if sys.prefix == sys.base_prefix or not (Path(sys.prefix) / "bin" / "activate").exists():
        pytest.skip("the tests do not run in a virtualenv that .venv could point at")
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (scripts/install.sh --test installs it)")
    if not wait_for(lambda: not port_in_use(), 60):
        pytest.skip(f"port {PORT} stays in use by another process")
    shutil.copytree(ROOT / "config", tmp_path / "config")
    (tmp_path / ".venv").symlink_to(sys.prefix)
    return tmp_path


class Shell:
    def __init__(self, cwd: Path, activate: str) -> None:
        self.cwd = cwd
        self.activate = activate
        self.env = {k: v for k, v in os.environ.items() if k != "ODRADEK_BOOTSTRAP_SERVER"}

    def script(self, line: str) -> list[str]:
        return ["bash", "-c", f"{self.activate}\n{line}"]

    def run(self, line: str) -> str:
        done = subprocess.run(self.script(line), cwd=self.cwd, env=self.env, capture_output=True,
                              text=True, timeout=90, check=False)  # fmt: skip
        assert done.returncode == 0, f"{line!r} exited {done.returncode}: {done.stderr}"
        return done.stdout

    def start(self, line: str, log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            server = subprocess.Popen(self.script(line), cwd=self.cwd, env=self.env, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        if not wait_for(lambda: port_in_use() or server.poll() is not None, 30):
            stop(server)
            pytest.fail(f"{line!r} did not listen on {PORT}: {log.read_text()}")
        assert server.poll() is None, f"{line!r} exited: {log.read_text()}"
        return server


def stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)  # bash and the broker it started
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for server in started:
        stop(server)


def test_using_it_runs_as_written(clone: Path, servers: list[subprocess.Popen[bytes]]) -> None:
    main, alternative = using_it_blocks()
    activate, server_line, *commands = main
    assert activate == ". .venv/bin/activate"
    assert server_line.startswith("odradek server ")
    shell = Shell(clone, activate)

    servers.append(shell.start(server_line, clone / "server.log"))
    outputs = {}
    for line in commands:
        outputs[line.split("#")[0].strip()] = shell.run(line)

    lines = (clone / "lines.txt").read_text().splitlines()
    values = sorted(line.split(":", 1)[1] for line in lines)
    consumed = next(out for cmd, out in outputs.items() if cmd.startswith("odradek consume"))
    assert sorted(consumed.splitlines()) == values
    described = next(out for cmd, out in outputs.items() if "groups describe" in cmd)
    rows = [row.split() for row in described.splitlines() if row.startswith("my-app ")]
    assert len(rows) == 6  # every partition of events
    assert sum(int(row[3]) for row in rows) == len(lines)  # CURRENT-OFFSET: all consumed
    reset = next(out for cmd, out in outputs.items() if "reset-offsets" in cmd)
    assert {row.split()[-1] for row in reset.splitlines() if row.startswith("my-app ")} == {"0"}
    listing = next(out for cmd, out in outputs.items() if cmd.startswith("kcat"))
    assert 'topic "events" with 6 partitions' in listing
    assert (clone / "odradek-data").is_dir()

    # The second block: the same broker from config/server.properties, on the same data.
    stop(servers.pop())
    assert wait_for(lambda: not port_in_use(), 30)
    (line,) = alternative
    servers.append(shell.start(line, clone / "server2.log"))
    listed = shell.run("odradek topics list")
    assert "events" in listed.split()
    stop(servers.pop())
    log = (clone / "server2.log").read_text()
    assert "Traceback" not in log
    assert "were supplied but are not used" not in log  # the shipped file has no dead keys
