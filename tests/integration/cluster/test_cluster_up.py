"""``odradek cluster up``: a real ZooKeeper and broker subprocesses, stopped by Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zookeeper_server import zookeeper_available

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]


def _children(pid: int) -> set[int]:
    """Every descendant process of ``pid`` (from /proc)."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = {int(k) for k in (task / "children").read_text().split()}
            except OSError:
                continue
            frontier += sorted(kids - found)
            found |= kids
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper not installed")
def test_cluster_up_starts_brokers_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", "cluster", "up", "--brokers", "3",
         "--data-dir", str(tmp_path / "c")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        while not any(line.startswith("bootstrap.servers=") for line in lines):
            line = proc.stdout.readline()
            assert line, f"exited early: {proc.wait()} {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line.strip())
        connect = next(line for line in lines if line.startswith("zookeeper.connect="))
        bootstrap = next(line for line in lines if line.startswith("bootstrap.servers="))
        assert len(bootstrap.split("=", 1)[1].split(",")) == 3
        zk = ZkClient.connect(connect.split("=", 1)[1], session_timeout_ms=6000)
        try:
            deadline = time.monotonic() + 30
            while zk.get_broker_ids() != [1, 2, 3] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert zk.get_broker_ids() == [1, 2, 3]
            assert zk.get_cluster_id() is not None
        finally:
            zk.close()
        children = _children(proc.pid)
        assert len(children) >= 4  # ZooKeeper and three brokers
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert out.strip().splitlines()[-1] == "stopped 3 brokers and ZooKeeper"
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if _alive(pid)]
