from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.errors import CorruptIndexError
from odradek.storage.time_index import TimeIndex

BASE = 500


def make_index(tmp_path: Path, max_size: int = 4096) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000000500.timeindex", BASE, max_size)


def test_empty(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    assert index.last_entry == (-1, BASE)
    assert index.lookup(0) == (-1, BASE)


def test_appends_only_growing_timestamps(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    index.maybe_append(100, BASE + 3)
    index.maybe_append(100, BASE + 5)  # not larger: ignored
    index.maybe_append(90, BASE + 6)  # smaller: ignored
    index.maybe_append(150, BASE + 8)
    assert index.entries == 2
    assert index.path.read_bytes() == struct.pack(">qiqi", 100, 3, 150, 8)
    with pytest.raises(ValueError):
        index.maybe_append(200, BASE + 7)  # offsets may not go back


def test_lookup_boundaries(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    for ts, offset in ((100, BASE + 3), (150, BASE + 8), (400, BASE + 20)):
        index.maybe_append(ts, offset)
    assert index.lookup(99) == (-1, BASE)
    assert index.lookup(100) == (100, BASE + 3)
    assert index.lookup(149) == (100, BASE + 3)
    assert index.lookup(150) == (150, BASE + 8)
    assert index.lookup(10**15) == (400, BASE + 20)
    assert index.last_entry == (400, BASE + 20)


def test_full_keeps_a_slot_for_the_final_entry(tmp_path: Path) -> None:
    index = make_index(tmp_path, max_size=36)  # 3 entries of 12 bytes
    index.maybe_append(1, BASE + 1)
    index.maybe_append(2, BASE + 2)
    assert index.is_full  # one slot left, reserved
    with pytest.raises(ValueError):
        index.maybe_append(3, BASE + 3)
    index.maybe_append(3, BASE + 3, skip_full_check=True)
    assert index.entries == 3
    index.maybe_append(4, BASE + 4, skip_full_check=True)  # no room at all: dropped
    assert index.entries == 3 and index.path.stat().st_size == 36


def test_truncate_and_reopen(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    for ts, offset in ((100, BASE + 3), (150, BASE + 8), (400, BASE + 20)):
        index.maybe_append(ts, offset)
    index.truncate_to(BASE + 8)
    assert index.last_entry == (100, BASE + 3)
    index.close()
    again = make_index(tmp_path)
    assert again.entries == 1
    assert again.lookup(1000) == (100, BASE + 3)


def test_torn_file(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    index.path.write_bytes(b"\x00" * 13)
    with pytest.raises(CorruptIndexError):
        index.sanity_check()


@settings(max_examples=50, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 20)), max_size=30),
    target=st.integers(-10, 30000),
)
def test_lookup_matches_model(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, int]], target: int
) -> None:
    index = make_index(tmp_path_factory.mktemp("ti"))
    ts, offset = 0, BASE
    entries: list[tuple[int, int]] = []
    for d_ts, d_offset in steps:
        ts += d_ts
        offset += d_offset
        index.maybe_append(ts, offset)
        if not entries or ts > entries[-1][0]:
            entries.append((ts, offset))
    expected = (-1, BASE)
    for entry in entries:
        if entry[0] <= target:
            expected = entry
    assert index.lookup(target) == expected
