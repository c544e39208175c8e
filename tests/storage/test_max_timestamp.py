"""ListOffsets MAX_TIMESTAMP (-3, KIP-734) answers the record with the largest timestamp.

Since KAFKA-16310 Kafka answers the offset of that record itself (the first one when
several share it), not the last offset of the batch holding it. A LogAppendTime batch
gives every record its append time, so the answer is its first record.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.records.batch import Record, build_batch
from odradek.records.compression import Compression
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.log_read import MAX_TIMESTAMP
from tests.storage.conftest import FakeClock, make_batch

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100, retention_ms=-1)
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
          Compression.ZSTD]  # fmt: skip


def batch(offsets_ts: list[int], compression: Compression) -> bytearray:
    records = [Record(b"v-%d" % i, timestamp_ms=NOW + ts) for i, ts in enumerate(offsets_ts)]
    return build_batch(records, compression=compression)


def fill(log: Log, compression: Compression) -> int:
    """Batches around one whose largest timestamp is on its 3rd of 6 records (and again
    on its 5th); returns the offset of that 3rd record."""
    for i in range(12):
        log.append_as_leader(batch([i, i + 1, i + 2], compression))
    info = log.append_as_leader(batch([500, 700, 900, 100, 900, 200], compression))
    for i in range(12):
        log.append_as_leader(batch([300 + i, 400 + i], compression))
    return info.first_offset + 2


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name.lower())
def test_max_timestamp_is_the_record_not_the_batch_end(
    tmp_path: Path, compression: Compression
) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG, clock=FakeClock())
    expected = fill(log, compression)
    assert len(log.segments) > 2  # the answer's segment is neither the first nor the last
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (expected, NOW + 900)
    leo = log.log_end_offset

    # A crash (no close): the recovery rebuilds the indexes the answer is found with.
    crashed = Log.open(directory, CONFIG, recovery_point=0, clock=FakeClock())
    assert crashed.log_end_offset == leo
    assert crashed.offset_for_timestamp(MAX_TIMESTAMP) == (expected, NOW + 900)
    crashed.close()

    # A clean shutdown: nothing is read at open, the answer comes from the time index.
    sizes = crashed.segment_sizes()
    clean = Log.open(directory, CONFIG, recovery_point=leo, clean_shutdown=True,
                     segment_sizes=sizes, clock=FakeClock())  # fmt: skip
    assert clean.offset_for_timestamp(MAX_TIMESTAMP) == (expected, NOW + 900)
    # A later, larger timestamp in the active segment takes over.
    info = clean.append_as_leader(batch([950, 1000, 990], compression))
    assert clean.offset_for_timestamp(MAX_TIMESTAMP) == (info.first_offset + 1, NOW + 1000)
    clean.close()


def test_max_timestamp_below_the_log_start_answers_the_log_start(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock=FakeClock())
    expected = fill(log, Compression.NONE)
    log.maybe_increment_log_start_offset(expected + 1)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (expected + 1, NOW + 900)
    log.close()


def test_log_append_time_answers_the_first_record_of_the_latest_batch(
    tmp_path: Path,
) -> None:
    clock = FakeClock(NOW)
    config = LogConfig(message_timestamp_type="LogAppendTime", retention_ms=-1)
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    log.append_as_leader(make_batch([b"a", b"b", b"c"], timestamp=NOW + 10**6))
    clock.advance(50)
    latest = log.append_as_leader(make_batch([b"d", b"e", b"f"], timestamp=NOW))
    log.append_as_leader(make_batch([b"g", b"h"], timestamp=NOW))  # same append time
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (latest.first_offset, NOW + 50)
    log.close()


def test_empty_log_has_no_max_timestamp(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, clock=FakeClock())
    assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
    log.close()
