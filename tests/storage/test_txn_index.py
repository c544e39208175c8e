"""TransactionIndex: Kafka's 34-byte entries, collect by range, truncation, corruption."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.errors import CorruptIndexError
from odradek.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex


def make_index(tmp_path: Path, start: int = 0) -> TransactionIndex:
    return TransactionIndex(tmp_path / f"{start:020d}.txnindex", start)


def test_entry_layout_is_kafkas(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    index.append(AbortedTxn(producer_id=7, first_offset=3, last_offset=9, last_stable_offset=4))
    index.flush()
    data = index.path.read_bytes()
    assert ENTRY_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 7, 3, 9, 4)


def test_file_created_lazily(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    assert index.collect(0, 100) == []
    assert index.is_empty
    assert not index.path.exists()
    index.close()


def test_collect_overlap_rules(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    a = AbortedTxn(1, first_offset=0, last_offset=10, last_stable_offset=11)
    b = AbortedTxn(2, first_offset=5, last_offset=20, last_stable_offset=21)
    c = AbortedTxn(3, first_offset=25, last_offset=30, last_stable_offset=31)
    for txn in (a, b, c):
        index.append(txn)
    assert index.collect(0, 100) == [a, b, c]
    assert index.collect(10, 25) == [a, b]  # a's marker at the fetch offset counts
    assert index.collect(11, 25) == [b]  # c starts at the upper bound: excluded
    assert index.collect(11, 26) == [b, c]
    assert index.collect(31, 100) == []
    assert index.collect(0, 0) == []
    found, complete = index.collect_until(0, 15)
    assert found == [a, b] and complete  # a's LSO 11 < 15, b's LSO 21 >= 15
    found, complete = index.collect_until(0, 40)
    assert found == [a, b, c] and not complete


def test_reload_from_disk(tmp_path: Path) -> None:
    index = make_index(tmp_path, start=100)
    txns = [AbortedTxn(i, 100 + i * 10, 105 + i * 10, 106 + i * 10) for i in range(5)]
    for txn in txns:
        index.append(txn)
    index.close()
    again = make_index(tmp_path, start=100)
    again.sanity_check()
    assert again.all_entries() == txns
    assert again.last_offset == txns[-1].last_offset


def test_append_order_enforced(tmp_path: Path) -> None:
    index = make_index(tmp_path, start=10)
    index.append(AbortedTxn(1, 10, 15, 16))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 11, 15, 16))
    with pytest.raises(ValueError):
        TransactionIndex(tmp_path / "other.txnindex", 10).append(AbortedTxn(1, 0, 5, 6))
    index.close()
    with pytest.raises(ValueError):
        index.append(AbortedTxn(3, 20, 25, 26))


def test_truncate_to_boundaries(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    txns = [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 12, 20, 21), AbortedTxn(3, 22, 30, 31)]
    for txn in txns:
        index.append(txn)
    index.truncate_to(31)
    assert index.all_entries() == txns
    index.truncate_to(30)  # the marker at 30 is gone
    assert index.all_entries() == txns[:2]
    assert index.path.stat().st_size == 2 * ENTRY_SIZE
    index.truncate_to(11)
    assert index.all_entries() == txns[:1]
    # appends after truncation land right after the kept entries
    index.append(AbortedTxn(4, 12, 14, 15))
    index.close()
    assert make_index(tmp_path).all_entries() == [txns[0], AbortedTxn(4, 12, 14, 15)]


def test_reset_and_delete(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    index.append(AbortedTxn(1, 0, 10, 11))
    index.reset()
    assert index.is_empty and index.path.stat().st_size == 0
    index.delete()
    assert not index.path.exists()
    index.delete()  # twice is fine


def test_rename_keeps_index_usable(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    index.append(AbortedTxn(1, 0, 10, 11))
    target = tmp_path / "00000000000000000000.txnindex.cleaned"
    index.rename_to(target)
    assert target.exists() and index.path == target
    index.append(AbortedTxn(2, 11, 12, 13))
    index.close()
    assert len(TransactionIndex(target, 0).all_entries()) == 2


def test_partial_entry_is_corrupt(tmp_path: Path) -> None:
    index = make_index(tmp_path)
    index.append(AbortedTxn(1, 0, 10, 11))
    index.close()
    with index.path.open("ab") as f:
        f.write(b"\x00" * 10)
    with pytest.raises(CorruptIndexError, match="multiple"):
        make_index(tmp_path).collect(0, 100)


def test_unknown_version_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 3, 1, 0, 10, 11))
    with pytest.raises(CorruptIndexError, match="version"):
        TransactionIndex(path, 0).sanity_check()


def test_entry_before_segment_start_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 0, 10, 11))
    with pytest.raises(CorruptIndexError, match="segment start"):
        TransactionIndex(path, 50).sanity_check()


@settings(max_examples=50, deadline=None)
@given(
    gaps=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=12),
    fetch=st.integers(0, 80),
    span=st.integers(0, 40),
)
def test_collect_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[tuple[int, int]], fetch: int, span: int
) -> None:
    index = make_index(tmp_path_factory.mktemp("txn"))
    txns = []
    last = -1
    for pid, (gap, length) in enumerate(gaps):
        first = last + 1 + gap
        last = first + length
        txns.append(AbortedTxn(pid, first, last, last + 1))
        index.append(txns[-1])
    upper = fetch + span
    expected = [t for t in txns if t.last_offset >= fetch and t.first_offset < upper]
    assert index.collect(fetch, upper) == expected
    index.close()
