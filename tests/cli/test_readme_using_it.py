"""README's "Using it" commands, run exactly as written, in order, against a fresh broker.

The section's first block starts ``odradek server`` in the foreground (a terminal of its
own); here it runs in the background and every other line runs after it, each in a shell
that has sourced ``.venv/bin/activate`` as the block's first line does. The second block
starts the broker from ``config/server.properties`` instead and must find the same data.
The directory is a copy of what a fresh clone holds (``config/``), with ``.venv`` pointing
at the virtualenv running the tests.

The commands use Kafka's default port 9092 as written, which other tests and programs on
the machine may use too, so the scenario runs in a network namespace of its own
(``unshare -rn``) when the system allows one; otherwise it waits for 9092 to be free.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

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
        if done.returncode != 0:
            raise RuntimeError(f"{line!r} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def start(self, line: str, log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            server = subprocess.Popen(self.script(line), cwd=self.cwd, env=self.env, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        if not wait_for(lambda: port_in_use() or server.poll() is not None, 30):
            stop(server)
        if server.poll() is not None:
            raise RuntimeError(f"{line!r} did not start: {log.read_text()}")
        return server


def stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)  # bash and the broker it started
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)


def scenario(clone: Path) -> dict[str, Any]:
    """Run both blocks in ``clone``; return every command's output (or the first error)."""
    main, alternative = using_it_blocks()
    activate, server_line, *commands = main
    shell = Shell(clone, activate)
    result: dict[str, Any] = {"activate": activate, "server": server_line, "outputs": {}}
    servers: list[subprocess.Popen[bytes]] = []
    try:
        servers.append(shell.start(server_line, clone / "server.log"))
        for line in commands:
            result["outputs"][line.split("#")[0].strip()] = shell.run(line)
        stop(servers.pop())
        if not wait_for(lambda: not port_in_use(), 30):
            raise RuntimeError(f"port {PORT} still in use after the broker stopped")
        (line,) = alternative
        servers.append(shell.start(line, clone / "server2.log"))
        result["listed"] = shell.run("odradek topics list")
        stop(servers.pop())
        result["log2"] = (clone / "server2.log").read_text()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        result["error"] = str(exc)
    finally:
        for server in servers:
            stop(server)
    return result


def _isolation_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"],
                           capture_output=True, timeout=30, check=False)  # fmt: skip
    return probe.returncode == 0


def run_scenario(clone: Path) -> dict[str, Any]:
    if _isolation_works():
        # A private loopback: this 9092 is nobody else's.
        subprocess.run(
            ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$1" "$2"',
             sys.executable, __file__, str(clone)],
            cwd=ROOT, timeout=200, check=True,
        )  # fmt: skip
        return json.loads((clone / "result.json").read_text())
    if not wait_for(lambda: not port_in_use(), 60):
        pytest.skip(f"port {PORT} stays in use by another process")
    return scenario(clone)


@pytest.mark.timeout(240)
def test_using_it_runs_as_written(tmp_path: Path) -> None:
    if sys.prefix == sys.base_prefix or not (Path(sys.prefix) / "bin" / "activate").exists():
        pytest.skip("the tests do not run in a virtualenv that .venv could point at")
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (scripts/install.sh --test installs it)")
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copytree(ROOT / "config", clone / "config")
    (clone / ".venv").symlink_to(sys.prefix)

    result = run_scenario(clone)
    assert "error" not in result, result["error"]
    assert result["activate"] == ". .venv/bin/activate"
    assert result["server"].startswith("odradek server ")
    outputs: dict[str, str] = result["outputs"]

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
    assert "events" in result["listed"].split()
    assert "Traceback" not in result["log2"]
    assert "were supplied but are not used" not in result["log2"]  # no dead keys shipped


if __name__ == "__main__":  # the scenario inside `unshare -rn` (see run_scenario)
    target = Path(sys.argv[1])
    (target / "result.json").write_text(json.dumps(scenario(target)))
