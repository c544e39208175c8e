from __future__ import annotations

from pathlib import Path

import pytest

from odradek.records.header import parse_header, set_base_offset
from odradek.storage.config import LogConfig
from odradek.storage.segment import LogSegment, file_name, parse_base_offset
from tests.storage.conftest import make_batch

NOW = 1_700_000_000_000


def fill(
    segment: LogSegment,
    count: int,
    *,
    first_offset: int,
    values: int = 1,
    ts_step: int = 0,
    ts0: int = NOW,
) -> list[tuple[int, int, int]]:
    """Append ``count`` batches one by one; returns (position, base offset, size)."""
    placed = []
    offset = first_offset
    for i in range(count):
        batch = make_batch([b"x" * 40] * values, timestamp=ts0 + i * ts_step)
        set_base_offset(batch, 0, offset)
        header = parse_header(batch)
        position = segment.size
        segment.append(batch, [(0, header.size, offset, header.last_offset, header.max_timestamp)])
        placed.append((position, offset, header.size))
        offset = header.next_offset
    return placed


@pytest.fixture
def segment(tmp_path: Path) -> LogSegment:
    config = LogConfig(index_interval_bytes=200, segment_bytes=10_000)
    return LogSegment.create(tmp_path, 100, config, now_ms=NOW)


def test_file_names() -> None:
    assert file_name(42, ".log") == "00000000000000000042.log"
    assert parse_base_offset("00000000000000000042.log.deleted") == 42
    assert parse_base_offset("leader-epoch-checkpoint") is None
    assert parse_base_offset("0042.log") is None


def test_append_indexes_every_interval(segment: LogSegment) -> None:
    placed = fill(segment, 20, first_offset=100, values=2)
    size = placed[0][2]
    assert segment.size == 20 * size
    # An entry once more than 200 bytes were written since the last one.
    per_entry = 200 // size + 1
    assert segment.offset_index.entries == (20 - 1) // per_entry
    for position, offset, _ in placed:
        assert segment.translate_offset(offset)[0] == position
        assert segment.translate_offset(offset + 1)[0] == position  # inside the batch
    assert segment.translate_offset(10**6) is None
    assert segment.read_next_offset() == 140


def test_batch_end_at_or_before(segment: LogSegment) -> None:
    placed = fill(segment, 10, first_offset=100)
    size = placed[0][2]
    assert segment.batch_end_at_or_before(size * 3, 0) == size * 3
    assert segment.batch_end_at_or_before(size * 3 - 1, 0) == size * 2
    assert segment.batch_end_at_or_before(size * 3 + 5, size) == size * 3
    assert segment.batch_end_at_or_before(size - 1, 0) == 0
    assert segment.batch_end_at_or_before(10**9, 0) == segment.size


def test_roll_conditions(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000, segment_ms=60_000, segment_index_bytes=40,
                       index_interval_bytes=0)  # fmt: skip
    segment = LogSegment.create(tmp_path, 0, config, now_ms=NOW)
    assert not segment.should_roll(10**6, NOW, 0, 0, NOW)  # empty: takes anything
    assert segment.should_roll(10, NOW, 2**31, 2**31, NOW)  # relative offset overflow
    fill(segment, 1, first_offset=0)
    size = segment.size
    assert not segment.should_roll(1000 - size, NOW, 1, 1, NOW)
    assert segment.should_roll(1000 - size + 1, NOW, 1, 1, NOW)  # segment.bytes
    # segment.ms is measured in message time from the first batch's timestamp...
    assert not segment.should_roll(10, NOW + 60_000, 1, 1, NOW)
    assert segment.should_roll(10, NOW + 60_001, 1, 1, NOW)
    # ...and the offset index filling up rolls too (40 bytes: 5 entries).
    fill(segment, 4, first_offset=1)
    assert segment.offset_index.entries == 4
    assert not segment.should_roll(10, NOW, 5, 5, NOW)
    fill(segment, 1, first_offset=5)
    assert segment.should_roll(10, NOW, 6, 6, NOW)


def test_full_time_index_rolls(tmp_path: Path) -> None:
    config = LogConfig(segment_index_bytes=36, index_interval_bytes=0)  # 3 time entries
    segment = LogSegment.create(tmp_path, 0, config, now_ms=NOW)
    fill(segment, 2, first_offset=0, ts_step=1)
    assert segment.time_index.entries == 1
    assert not segment.should_roll(10, NOW + 5, 2, 2, NOW)
    fill(segment, 1, first_offset=2, ts0=NOW + 2)  # a growing timestamp adds an entry
    assert segment.time_index.entries == 2  # the last slot is kept for the final entry
    assert segment.should_roll(10, NOW + 5, 3, 3, NOW)


def test_roll_by_creation_time_without_timestamps(tmp_path: Path) -> None:
    segment = LogSegment.create(tmp_path, 0, LogConfig(segment_ms=1000), now_ms=NOW)
    batch = make_batch([b"a"], timestamp=-1)
    header = parse_header(batch)
    segment.append(batch, [(0, header.size, 0, 0, -1)])
    assert not segment.should_roll(10, -1, 1, 1, NOW + 1000)
    assert segment.should_roll(10, -1, 1, 1, NOW + 1001)


def test_recover_rebuilds_identical_indexes(segment: LogSegment, tmp_path: Path) -> None:
    fill(segment, 30, first_offset=100, ts_step=7)
    segment.on_become_inactive()
    index_bytes = segment.offset_index.path.read_bytes()
    time_bytes = segment.time_index.path.read_bytes()
    segment.close()
    reopened = LogSegment.open(tmp_path, 100, segment.config, now_ms=NOW)
    assert reopened.recover() == 0
    reopened.on_become_inactive()
    assert reopened.offset_index.path.read_bytes() == index_bytes
    assert reopened.time_index.path.read_bytes() == time_bytes
    assert reopened.max_timestamp == NOW + 29 * 7


def test_truncate_to_removes_whole_batches(segment: LogSegment) -> None:
    placed = fill(segment, 10, first_offset=100, values=3)  # offsets 100..129
    assert segment.truncate_to(115, NOW) == 115  # batch 115..117 goes whole
    assert segment.size == placed[5][0]
    assert segment.read_next_offset() == 115
    assert segment.truncate_to(113, NOW) == 112  # inside batch 112..114
    assert segment.read_next_offset() == 112
    assert segment.truncate_to(500, NOW) is None
    assert segment.offset_index.last_offset < 112
    assert segment.truncate_to(100, NOW) == 100
    assert segment.size == 0
    assert segment.first_batch_timestamp() is None


def test_find_offset_by_timestamp_is_record_exact(segment: LogSegment) -> None:
    for i in range(10):
        batch = make_batch([b"a", b"b", b"c"], timestamps=[NOW + i * 30 + d for d in (0, 10, 20)])
        set_base_offset(batch, 0, 100 + 3 * i)
        h = parse_header(batch)
        segment.append(batch, [(0, h.size, h.base_offset, h.last_offset, h.max_timestamp)])
    assert segment.find_offset_by_timestamp(NOW, 100) == (100, NOW)
    assert segment.find_offset_by_timestamp(NOW + 11, 100) == (102, NOW + 20)
    assert segment.find_offset_by_timestamp(NOW + 95, 100) == (110, NOW + 100)
    assert segment.find_offset_by_timestamp(NOW + 95, 111) == (111, NOW + 110)
    assert segment.find_offset_by_timestamp(NOW + 10**6, 100) is None


def test_region_survives_close_and_unlink(segment: LogSegment) -> None:
    fill(segment, 3, first_offset=100)
    region = segment.region(0, segment.size)
    expected = region.read()
    segment.close()
    segment.delete_files()
    assert not segment.log_path.exists()
    assert region.read() == expected  # the descriptor lives as long as the region


def test_change_file_suffix(segment: LogSegment, tmp_path: Path) -> None:
    fill(segment, 30, first_offset=100)
    segment.change_file_suffix(".deleted")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "00000000000000000100.index.deleted",
        "00000000000000000100.log.deleted",
        "00000000000000000100.timeindex.deleted",
    ]
    assert segment.translate_offset(105) is not None  # still readable after the rename


def test_translate_offset_starts_at_recent_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No index entry at all: only the remembered recent batches shorten the scan.
    config = LogConfig(index_interval_bytes=10**6, segment_bytes=10**6)
    segment = LogSegment.create(tmp_path, 0, config, now_ms=NOW)
    placed = fill(segment, 100, first_offset=0, values=2)
    assert segment.offset_index.entries == 0
    starts: list[int] = []
    scan = LogSegment.iter_batches

    def recording(self: LogSegment, start: int = 0, end: int | None = None):  # type: ignore[no-untyped-def]
        starts.append(start)
        return scan(self, start, end)

    monkeypatch.setattr(LogSegment, "iter_batches", recording)
    for position, offset, _ in placed:
        assert segment.translate_offset(offset)[0] == position
        assert segment.translate_offset(offset + 1)[0] == position
    # The last batches are found from where they start; older ones from the file start.
    assert starts[-2:] == [placed[-1][0]] * 2
    assert starts[:2] == [0, 0]
    assert segment.translate_offset(placed[-1][1] + 2) is None
    # A truncation forgets them: what is found is what the file holds now.
    assert segment.truncate_to(placed[95][1], NOW) == placed[95][1]
    starts.clear()
    assert segment.translate_offset(placed[97][1]) is None
    assert segment.translate_offset(placed[94][1])[0] == placed[94][0]
    assert starts[-1] == 0
    # Appends after it are remembered again, at their new positions.
    again = fill(segment, 3, first_offset=placed[95][1], values=2)
    starts.clear()
    assert segment.translate_offset(again[1][1])[0] == again[1][0] == placed[96][0]
    assert starts == [again[1][0]]
    # Once the segment is no longer the active one, the index alone guides the scan.
    segment.on_become_inactive()
    starts.clear()
    assert segment.translate_offset(again[2][1])[0] == again[2][0]
    assert starts == [0]
