"""Disk blocks reserved ahead of the active segment (storage.preallocation): the file's
size never changes because of them, what is read back and recovered is what was
appended, small appends reserve nothing, and the reserve is given back when the segment
rolls, is truncated or closes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.records.batch import decode_batches
from odradek.storage import preallocation
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from tests.storage.conftest import make_batch

MiB = 1024 * 1024
BIG = LogConfig(segment_bytes=64 * MiB, max_message_bytes=2 * MiB, retention_ms=-1)


def big_batch(seq: int) -> bytearray:
    return bytearray(make_batch([bytes([seq % 251]) * (MiB - 200)]))


def first_bytes(log: Log) -> list[bytes]:
    """The first byte of each record's value, read back through the log."""
    data = log.read(0, 8 * MiB).read_bytes()
    return [r.value[:1] for b in decode_batches(data) for r in b.records]


def on_disk(path: Path) -> int:
    """Bytes of disk blocks the file holds (its reserve included)."""
    return os.stat(path).st_blocks * 512


def sizes(log: Log) -> list[tuple[Path, int, int]]:
    return [(p, os.stat(p).st_size, on_disk(p)) for p in sorted(log.directory.glob("*.log"))]


@pytest.fixture(autouse=True)
def _needs_fallocate(tmp_path: Path) -> None:
    with open(tmp_path / "probe", "wb") as probe:
        if not preallocation.preallocate(probe.fileno(), 0, MiB):
            pytest.skip("this file system reserves no blocks with fallocate(KEEP_SIZE)")


def test_large_appends_reserve_blocks_beyond_an_unchanged_size(open_log: Callable) -> None:
    log = open_log(BIG)
    for seq in range(3):
        log.append_as_leader(big_batch(seq))
    [(_path, size, disk)] = sizes(log)
    assert size == log.active_segment.size  # the file's size is the bytes appended
    assert disk >= size + 4 * MiB  # and blocks wait beyond it for the next appends
    # Bounded: never more ahead than the segment holds plus eight appends.
    assert disk <= size + max(size, 8 * MiB) + MiB
    assert first_bytes(log) == [b"\x00", b"\x01", b"\x02"]


def test_small_appends_reserve_nothing(open_log: Callable) -> None:
    log = open_log(BIG)
    for seq in range(50):
        log.append_as_leader(bytearray(make_batch([b"x" * 1000, bytes([seq])])))
    [(_path, size, disk)] = sizes(log)
    assert disk < size + 64 * 1024


def test_a_roll_gives_the_reserve_back(open_log: Callable) -> None:
    log = open_log(BIG)
    log.append_as_leader(big_batch(0))
    log.roll()
    log.append_as_leader(big_batch(1))
    (_old, old_size, old_disk), (_new, new_size, new_disk) = sizes(log)
    assert old_disk < old_size + 64 * 1024  # the rolled segment: its bytes only
    assert new_disk > new_size  # the active one reserves again


def test_truncation_and_close_give_the_reserve_back(open_log: Callable) -> None:
    log = open_log(BIG)
    for seq in range(4):
        log.append_as_leader(big_batch(seq))
    log.truncate_to(2)
    [(_path, size, disk)] = sizes(log)
    assert log.log_end_offset == 2
    assert disk < size + 64 * 1024
    log.append_as_leader(big_batch(9))
    log.close()
    [(_path, size, disk)] = sizes(log)
    assert disk < size + 64 * 1024


def test_a_crash_recovers_exactly_what_was_appended(log_dir: Path, clock) -> None:
    """The reserve lies beyond the file's size: recovery after a crash (the first log is
    never closed) finds the appended batches and nothing after them."""
    crashed = Log.open(log_dir, BIG, clock=clock)
    for seq in range(3):
        crashed.append_as_leader(big_batch(seq))
    crashed.flush()
    reopened = Log.open(log_dir, BIG, clock=clock)
    try:
        assert reopened.log_end_offset == 3
        assert first_bytes(reopened) == [b"\x00", b"\x01", b"\x02"]
        reopened.append_as_leader(big_batch(3))
        assert reopened.log_end_offset == 4
    finally:
        reopened.close()


def test_without_fallocate_appends_work_as_before(
    open_log: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preallocation, "_fallocate", None)
    log = open_log(BIG)
    for seq in range(3):
        log.append_as_leader(big_batch(seq))
    [(_path, size, disk)] = sizes(log)
    assert disk < size + 64 * 1024
    assert log.log_end_offset == 3
