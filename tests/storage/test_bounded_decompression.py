"""Stored batches that inflate past the bound: the cleaner and timestamp lookups.

Produce refuses such batches now, but a log may hold one written before (or under a
larger max.message.bytes, or appended as a follower). Reading it must neither inflate
it in memory nor lose acknowledged data.
"""

from __future__ import annotations

import logging
import tracemalloc
from pathlib import Path

import pytest

from odradek.records.batch import Record, build_batch
from odradek.records.compression import Compression
from odradek.records.header import iter_headers
from odradek.storage.cleaner import clean_log
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from tests.helpers.bombs import bomb_batch

T0_MS = 1_700_000_000_000
BOMB_SIZE = 256 << 20  # four times the 64 MiB bound of the default max.message.bytes
MEMORY_BOUND = 200 << 20


class Clock:
    def __init__(self) -> None:
        self.now_ms = T0_MS

    def __call__(self) -> float:
        return self.now_ms / 1000


def _log(tmp_path: Path, **overrides: object) -> Log:
    settings: dict[str, object] = {
        "segment_bytes": 1 << 20,
        "cleanup_policy": "compact",
        "min_cleanable_dirty_ratio": 0.0,
    }
    settings.update(overrides)
    config = LogConfig(**settings)  # type: ignore[arg-type]
    return Log.open(tmp_path / "t-0", config, clock=Clock())


def _put(log: Log, key: bytes, value: bytes) -> None:
    log.append_as_leader(build_batch([Record(value=value, key=key, timestamp_ms=T0_MS)]))


def _headers(log: Log) -> list[tuple[int, int]]:
    data = log.read(log.log_start_offset, 1 << 30).read_bytes()
    return [(header.base_offset, header.size) for _, header in iter_headers(data)]


@pytest.fixture(scope="module")
def bomb() -> bytearray:
    return bomb_batch(Compression.ZSTD, BOMB_SIZE, timestamp_ms=T0_MS)


def test_produce_refuses_the_bomb(tmp_path: Path, bomb: bytearray) -> None:
    from odradek.storage.errors import RecordTooLargeError

    log = _log(tmp_path)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(bytearray(bomb))
    assert log.log_end_offset == 0
    log.close()


def test_cleaner_keeps_a_bomb_as_it_is_and_cleans_the_rest(
    tmp_path: Path, bomb: bytearray, caplog: pytest.LogCaptureFixture
) -> None:
    log = _log(tmp_path)
    _put(log, b"a", b"old")  # offset 0: superseded by offset 3
    log.append_as_leader(bytearray(bomb), validate=False)  # offset 1, as if stored long ago
    _put(log, b"b", b"kept")  # offset 2
    _put(log, b"a", b"new")  # offset 3
    log.roll()
    _put(log, b"c", b"active")
    bomb_size = len(bomb)
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING, logger="odradek.storage.cleaner"):
            clean_log(log, now_ms=T0_MS, cleaner_offset=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, f"cleaning held {peak >> 20} MiB"
    batches = _headers(log)
    assert (1, bomb_size) in batches  # the bomb, byte for byte the size it was
    assert [offset for offset, _ in batches] == [1, 2, 3, 4]  # offset 0 was cleaned
    assert "kept uncleaned" in caplog.text
    log.close()


def test_timestamp_lookup_on_a_bomb_answers_with_its_batch(tmp_path: Path) -> None:
    log = _log(tmp_path, cleanup_policy="delete")
    _put(log, b"a", b"before")  # offset 0 at T0
    later = bomb_batch(Compression.ZSTD, BOMB_SIZE, timestamp_ms=T0_MS + 10)
    log.append_as_leader(later, validate=False)  # offset 1 at T0 + 10
    tracemalloc.start()
    try:
        found = log.offset_for_timestamp(T0_MS + 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND
    assert found == (1, T0_MS + 10)
    from odradek.records.validation import uncompressed_limit

    assert uncompressed_limit(log.config.max_message_bytes) < BOMB_SIZE
    log.close()


def test_max_timestamp_lookup_on_a_bomb_answers_with_its_batch(tmp_path: Path) -> None:
    log = _log(tmp_path, cleanup_policy="delete")
    _put(log, b"a", b"before")  # offset 0 at T0
    later = bomb_batch(Compression.ZSTD, BOMB_SIZE, timestamp_ms=T0_MS + 10)
    log.append_as_leader(later, validate=False)  # offset 1 at T0 + 10, the largest
    tracemalloc.start()
    try:
        found = log.offset_for_timestamp(-3)  # MAX_TIMESTAMP
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND
    assert found == (1, T0_MS + 10)
    log.close()
