from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.records.header import iter_headers
from odradek.storage.config import LogConfig
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import Log
from tests.storage.conftest import FakeClock, make_batch

NOW = 1_700_000_000_000
HOUR = 3_600_000
OpenLog = Callable[..., Log]


def fill_hours(log: Log, clock: FakeClock, hours: int, per_hour: int = 6) -> None:
    """Batches stamped at the clock's time, the clock moving an hour at a time."""
    for _ in range(hours):
        for _ in range(per_hour):
            log.append_as_leader(make_batch([b"x" * 40] * 2, timestamp=clock.now_ms))
        clock.advance(HOUR)


def names(directory: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


def test_retention_ms_with_an_injected_clock(open_log: OpenLog, clock: FakeClock) -> None:
    config = LogConfig(segment_bytes=700, retention_ms=3 * HOUR, file_delete_delay_ms=60_000)
    log = open_log(config)
    fill_hours(log, clock, 10)
    segments = log.segments
    assert len(segments) >= 10
    now = clock.now_ms
    expired = [s for s in segments[:-1] if now - s.largest_timestamp() > 3 * HOUR]
    deleted = log.delete_retained_segments()
    assert deleted == len(expired) > 0
    assert log.segments == segments[deleted:]
    assert log.log_start_offset == log.segments[0].base_offset
    for segment in log.segments:
        assert now - segment.largest_timestamp() <= 3 * HOUR or segment is log.segments[-1]
    # Renamed at once, removed only after file.delete.delay.ms.
    assert len(names(log.directory, ".log.deleted")) == deleted
    log.update_config(dataclasses.replace(config, retention_ms=-1))  # no further expiry
    clock.advance(59_999)
    log.delete_retained_segments()
    assert len(names(log.directory, ".log.deleted")) == deleted
    clock.advance(1)
    log.delete_retained_segments()
    assert names(log.directory, ".deleted") == []
    # Reads below the new start are out of range, the rest is intact.
    data = log.read(log.log_start_offset, 10**7).read_bytes()
    assert next(h.base_offset for _, h in iter_headers(data)) == log.log_start_offset


def test_a_quiet_log_past_retention_ms_loses_its_active_segment(
    open_log: OpenLog, clock: FakeClock
) -> None:
    """Kafka rolls a breached, non-empty active segment so that it can be deleted: the
    log start offset reaches the log end offset, and the log carries on from there."""
    log = open_log(LogConfig(retention_ms=3 * HOUR, file_delete_delay_ms=0))
    fill_hours(log, clock, 2)
    assert len(log.segments) == 1
    clock.advance(2 * HOUR)  # newest record 3 hours old: not yet beyond retention.ms
    assert log.delete_retained_segments() == 0
    log.high_watermark = 23  # the active segment reaches above the high watermark
    clock.advance(HOUR)
    assert log.delete_retained_segments() == 0
    log.high_watermark = 24
    old = log.segments[0]
    assert log.delete_retained_segments() == 1
    assert not old.log_path.exists()
    [active] = log.segments
    assert (active.base_offset, active.size) == (24, 0)
    assert (log.log_start_offset, log.log_end_offset) == (24, 24)
    assert log.offset_for_timestamp(-2) == (24, -1)
    assert log.read(24, 10**6).size == 0  # a consumer at the end keeps fetching
    with pytest.raises(OffsetOutOfRangeError):
        log.read(23, 10**6)
    # An empty active segment is never deleted; new records go on from the end.
    clock.advance(10 * HOUR)
    assert log.delete_retained_segments() == 0
    log.high_watermark = None
    info = log.append_as_leader(make_batch([b"later"], timestamp=clock.now_ms))
    assert info.first_offset == 24
    assert [h.base_offset for _, h in iter_headers(log.read(24, 10**6).read_bytes())] == [24]


def test_retention_bytes_zero_deletes_the_active_segment_too(
    open_log: OpenLog, clock: FakeClock
) -> None:
    # Kafka: a segment goes while the excess over retention.bytes covers it; only 0
    # lets the excess cover the active segment as well.
    log = open_log(LogConfig(segment_bytes=700, retention_ms=-1, retention_bytes=1))
    fill_hours(log, clock, 3)
    count = len(log.segments)
    assert log.delete_retained_segments() == count - 1
    log.update_config(LogConfig(segment_bytes=700, retention_ms=-1, retention_bytes=0))
    assert log.delete_retained_segments() == 1
    assert log.log_start_offset == log.log_end_offset == 36
    assert [s.size for s in log.segments] == [0]


def test_retention_bytes(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(segment_bytes=700, retention_ms=-1, retention_bytes=2000))
    fill_hours(log, clock, 10)
    total = log.size_in_bytes
    sizes = [s.size for s in log.segments]
    # Kafka's rule: drop the oldest while what remains still exceeds retention.bytes.
    excess, expected = total - 2000, 0
    while expected < len(sizes) - 1 and excess - sizes[expected] >= 0:
        excess -= sizes[expected]
        expected += 1
    assert log.delete_retained_segments() == expected > 0
    assert log.size_in_bytes == total - sum(sizes[:expected])
    assert log.size_in_bytes >= 2000 - sizes[0]
    assert log.delete_retained_segments() == 0


def test_retention_minus_one_and_compact_keep_everything(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(LogConfig(segment_bytes=700, retention_ms=-1))
    fill_hours(log, clock, 5)
    clock.advance(1000 * HOUR)
    assert log.delete_retained_segments() == 0
    log.update_config(LogConfig(segment_bytes=700, retention_ms=1, cleanup_policy="compact"))
    assert log.delete_retained_segments() == 0
    log.update_config(LogConfig(segment_bytes=700, retention_ms=1, cleanup_policy="compact,delete"))
    before = len(log.segments)
    assert log.delete_retained_segments() == before  # the active one too (rolled first)
    assert len(log.segments) == 1 and log.log_start_offset == log.log_end_offset


def test_high_watermark_bounds_retention(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(segment_bytes=700, retention_ms=1))
    fill_hours(log, clock, 6)
    segments = log.segments
    log.high_watermark = segments[3].base_offset
    assert log.delete_retained_segments() == 3  # segments 0-2 end at or below the HW
    log.high_watermark = log.log_end_offset - 1
    assert log.delete_retained_segments() == len(segments) - 4  # all but the active one
    log.high_watermark = None
    assert log.delete_retained_segments() == 1


def test_log_start_offset_retention(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(segment_bytes=700, retention_ms=-1))
    fill_hours(log, clock, 6)
    segments = log.segments
    log.maybe_increment_log_start_offset(segments[2].base_offset + 1)
    assert log.delete_retained_segments() == 2  # segment 2 still holds the new start
    assert log.segments[0] is segments[2]
    assert log.log_start_offset == segments[2].base_offset + 1


def test_retention_survives_reopen(log_dir: Path, clock: FakeClock) -> None:
    config = LogConfig(segment_bytes=700, retention_ms=3 * HOUR, file_delete_delay_ms=10**9)
    log = Log.open(log_dir, config, clock=clock)
    fill_hours(log, clock, 8)
    log.delete_retained_segments()
    start = log.log_start_offset
    leo = log.log_end_offset
    log.flush()
    assert names(log_dir, ".deleted")  # still pending
    # A crash now: the pending .deleted files are removed on open.
    reopened = Log.open(log_dir, config, clock=clock, recovery_point=leo, log_start_offset=start)
    assert names(log_dir, ".deleted") == []
    assert (reopened.log_start_offset, reopened.log_end_offset) == (start, leo)
    reopened.close()
