"""ReplicaManager with an offline log directory: KAFKA_STORAGE_ERROR, nothing half-written.

The write failure is injected into the segment's os.write (one layer down); a real full
disk is exercised end to end in tests/integration/test_full_disk.py.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from odradek.broker.replica_manager import KAFKA_STORAGE_ERROR, ReplicaManager
from odradek.storage import segment as segment_module
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.storage.conftest import make_batch


@pytest.fixture
def replicas(tmp_path: Path) -> ReplicaManager:
    manager = LogManager(tmp_path, LogConfig())
    manager.startup()
    rm = ReplicaManager(0, manager)
    rm.become_leader("t", 0, LogConfig())
    rm.become_leader("u", 0, LogConfig())
    return rm


def append(rm: ReplicaManager, topic: str, value: bytes) -> tuple[int, int]:
    result = rm.append(topic, 0, make_batch([value]), required_acks=-1)
    return result.error_code, result.base_offset


def test_write_failure_takes_the_dir_offline_until_probed(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert append(replicas, "t", b"a") == (0, 0)
    calls = []

    def full(*_args: object) -> int:
        calls.append(1)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segment_module.os, "write", full)
    assert append(replicas, "t", b"b")[0] == KAFKA_STORAGE_ERROR
    failure = replicas.log_manager.dir_failure
    assert failure.offline and "No space left on device" in (failure.cause or "")
    # Every partition of the directory is offline now, without touching the disk again.
    assert append(replicas, "u", b"c")[0] == KAFKA_STORAGE_ERROR
    assert len(calls) == 1
    assert replicas.read("t", 0, 0, 1 << 20).error_code == KAFKA_STORAGE_ERROR
    assert replicas.bytes_available("t", 0, 0, 0, limit=100) is None
    monkeypatch.undo()
    assert append(replicas, "t", b"d")[0] == KAFKA_STORAGE_ERROR  # not probed yet
    assert failure.probe()
    assert append(replicas, "t", b"e") == (0, 1)  # the failed append left nothing
    read = replicas.read("t", 0, 0, 1 << 20)
    assert read.error_code == 0 and read.high_watermark == 2
