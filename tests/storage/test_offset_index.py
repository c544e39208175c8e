from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.errors import CorruptIndexError
from odradek.storage.offset_index import OffsetIndex

BASE = 1000


def make_index(tmp_path: Path, entries: list[tuple[int, int]], max_size: int = 4096) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE, max_size)
    for offset, position in entries:
        index.append(offset, position)
    return index


def test_empty_index_points_at_segment_start(tmp_path: Path) -> None:
    index = make_index(tmp_path, [])
    assert index.entries == 0
    assert index.lookup(BASE) == (BASE, 0)
    assert index.lookup(BASE + 10**6) == (BASE, 0)
    assert index.lookup_by_position(10**6) == (BASE, 0)
    assert index.last_entry == (BASE, 0)
    assert index.last_offset == BASE


def test_lookup_at_every_boundary(tmp_path: Path) -> None:
    entries = [(BASE + 5, 100), (BASE + 9, 250), (BASE + 20, 900)]
    index = make_index(tmp_path, entries)
    assert index.lookup(BASE) == (BASE, 0)  # below the first entry
    assert index.lookup(BASE + 4) == (BASE, 0)
    assert index.lookup(BASE + 5) == (BASE + 5, 100)  # exactly an entry
    assert index.lookup(BASE + 8) == (BASE + 5, 100)  # between entries
    assert index.lookup(BASE + 9) == (BASE + 9, 250)
    assert index.lookup(BASE + 19) == (BASE + 9, 250)
    assert index.lookup(BASE + 20) == (BASE + 20, 900)  # last entry
    assert index.lookup(BASE + 10**6) == (BASE + 20, 900)  # beyond it
    assert index.lookup(BASE - 1) == (BASE, 0)  # below the segment
    assert index.lookup_by_position(99) == (BASE, 0)
    assert index.lookup_by_position(100) == (BASE + 5, 100)
    assert index.lookup_by_position(899) == (BASE + 9, 250)
    assert index.lookup_by_position(900) == (BASE + 20, 900)


def test_on_disk_format_is_kafkas(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(BASE + 5, 100), (BASE + 9, 250)])
    assert index.path.read_bytes() == struct.pack(">iiii", 5, 100, 9, 250)


def test_reopen_reads_lazily_from_the_file(tmp_path: Path) -> None:
    make_index(tmp_path, [(BASE + 5, 100), (BASE + 9, 250)]).close()
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE, 4096)
    assert index._data is None
    assert index.last_entry == (BASE + 9, 250)  # one pread, no full load
    assert index._data is None
    assert index.lookup(BASE + 6) == (BASE + 5, 100)
    index.append(BASE + 12, 300)
    assert index.lookup(BASE + 100) == (BASE + 12, 300)


def test_entries_must_increase(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(BASE + 5, 100)])
    with pytest.raises(ValueError):
        index.append(BASE + 5, 200)
    with pytest.raises(ValueError):
        index.append(BASE + 6, 100)
    with pytest.raises(ValueError):
        index.append(BASE - 1, 300)  # below the base: no relative offset
    with pytest.raises(ValueError):
        index.append(BASE + 2**31, 300)  # relative offset overflows int32


def test_full_index(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(BASE + 1, 10), (BASE + 2, 20)], max_size=20)
    assert index.max_entries == 2
    assert index.is_full
    with pytest.raises(ValueError):
        index.append(BASE + 3, 30)


def test_truncate(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(BASE + 5, 100), (BASE + 9, 250), (BASE + 20, 900)])
    index.truncate_to(BASE + 10)
    assert index.entries == 2
    assert index.path.stat().st_size == 16
    assert index.lookup(BASE + 30) == (BASE + 9, 250)
    index.truncate_to(BASE + 9)  # an entry at exactly the offset goes
    assert index.last_entry == (BASE + 5, 100)
    index.append(BASE + 6, 150)
    assert index.lookup(BASE + 7) == (BASE + 6, 150)
    index.reset()
    assert index.entries == 0 and index.path.stat().st_size == 0


def test_torn_file_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(b"\x00" * 12)
    index = OffsetIndex(path, BASE, 4096)
    with pytest.raises(CorruptIndexError):
        _ = index.entries
    with pytest.raises(CorruptIndexError):
        index.sanity_check()


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=40),
    targets=st.lists(st.integers(-5, 3000), min_size=1, max_size=20),
)
def test_lookup_matches_a_linear_scan(
    tmp_path_factory: pytest.TempPathFactory,
    gaps: list[tuple[int, int]],
    targets: list[int],
) -> None:
    entries = []
    offset, position = BASE, 0
    for d_offset, d_position in gaps:
        offset += d_offset
        position += d_position
        entries.append((offset, position))
    index = make_index(tmp_path_factory.mktemp("idx"), entries, max_size=8 * 64)
    for target in targets:
        expected = (BASE, 0)
        for entry in entries:
            if entry[0] <= BASE + target:
                expected = entry
        assert index.lookup(BASE + target) == expected
