"""LeaderEpochFileCache: assignment, OffsetForLeaderEpoch lookups, truncation, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.errors import CorruptCheckpointError
from odradek.storage.leader_epoch import (
    CHECKPOINT_FILE_NAME,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
)


@pytest.fixture
def cache(tmp_path: Path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(tmp_path / CHECKPOINT_FILE_NAME)


def reload(cache: LeaderEpochFileCache) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(cache.path)


def test_empty_cache(cache: LeaderEpochFileCache) -> None:
    assert cache.entries == []
    assert cache.latest_epoch() is None
    assert cache.end_offset_for(0, 100) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert not cache.path.exists()  # nothing written until something is assigned


def test_assign_persists_in_kafka_text_format(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 0)
    cache.assign(2, 10)
    assert cache.path.read_text() == "0\n2\n0 0\n2 10\n"
    assert reload(cache).entries == [(0, 0), (2, 10)]
    assert not cache.path.with_name(CHECKPOINT_FILE_NAME + ".tmp").exists()


def test_assign_same_epoch_later_offset_is_a_no_op(cache: LeaderEpochFileCache) -> None:
    cache.assign(1, 5)
    before = cache.path.stat().st_mtime_ns
    cache.assign(1, 5)
    cache.assign(1, 9)
    assert cache.entries == [(1, 5)]
    assert cache.path.stat().st_mtime_ns == before


def test_assign_same_epoch_earlier_offset_replaces(cache: LeaderEpochFileCache) -> None:
    cache.assign(1, 5)
    cache.assign(1, 3)
    assert cache.entries == [(1, 3)]


def test_assign_drops_non_monotonic_tail(cache: LeaderEpochFileCache) -> None:
    cache.assign(1, 0)
    cache.assign(2, 10)
    cache.assign(3, 20)
    # A new epoch starting before existing entries removes everything at or after it.
    cache.assign(4, 15)
    assert cache.entries == [(1, 0), (2, 10), (4, 15)]
    # A lower epoch than the latest removes the later epochs (Kafka's rule).
    cache.assign(3, 30)
    assert cache.entries == [(1, 0), (2, 10), (3, 30)]
    assert reload(cache).entries == cache.entries


def test_assign_rejects_negative(cache: LeaderEpochFileCache) -> None:
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -5)


def test_end_offset_for_every_case(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 10)
    cache.assign(4, 20)
    cache.assign(7, 35)
    leo = 50
    # Latest epoch -> log end offset.
    assert cache.end_offset_for(7, leo) == (7, leo)
    # Exactly a known earlier epoch -> start of the next epoch.
    assert cache.end_offset_for(2, leo) == (2, 20)
    assert cache.end_offset_for(4, leo) == (4, 35)
    # Between known epochs -> floor epoch, start of the next higher epoch.
    assert cache.end_offset_for(3, leo) == (2, 20)
    assert cache.end_offset_for(5, leo) == (4, 35)
    assert cache.end_offset_for(6, leo) == (4, 35)
    # Older than every entry -> requested epoch, start of the first entry.
    assert cache.end_offset_for(0, leo) == (0, 10)
    assert cache.end_offset_for(1, leo) == (1, 10)
    # Newer than every entry, or undefined -> undefined.
    assert cache.end_offset_for(8, leo) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.end_offset_for(UNDEFINED_EPOCH, leo) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_epoch_for_offset(cache: LeaderEpochFileCache) -> None:
    cache.assign(1, 5)
    cache.assign(3, 10)
    assert cache.epoch_for_offset(4) is None
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(1000) == 3
    assert cache.start_offset_of(3) == 10
    assert cache.start_offset_of(2) is None


def test_truncate_from_end_boundaries(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(0, 0), (1, 10), (2, 20)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(21)  # above the last start: nothing to do
    assert cache.entries == [(0, 0), (1, 10), (2, 20)]
    cache.truncate_from_end(20)  # exactly the last start: that entry goes
    assert cache.entries == [(0, 0), (1, 10)]
    cache.truncate_from_end(-1)  # undefined offset: ignored
    assert cache.entries == [(0, 0), (1, 10)]
    cache.truncate_from_end(5)
    assert cache.entries == [(0, 0)]
    assert reload(cache).entries == [(0, 0)]
    cache.truncate_from_end(0)
    assert cache.entries == []
    assert reload(cache).entries == []


def test_truncate_from_start_boundaries(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(0, 0), (1, 10), (2, 20)]:
        cache.assign(epoch, start)
    cache.truncate_from_start(0)  # the first entry already starts there
    assert cache.entries == [(0, 0), (1, 10), (2, 20)]
    cache.truncate_from_start(9)  # inside epoch 0: its start moves up
    assert cache.entries == [(0, 9), (1, 10), (2, 20)]
    cache.truncate_from_start(10)  # exactly epoch 1's start: epoch 0 goes
    assert cache.entries == [(1, 10), (2, 20)]
    cache.truncate_from_start(25)  # inside the latest epoch
    assert cache.entries == [(2, 25)]
    assert reload(cache).entries == [(2, 25)]
    cache.truncate_from_start(3)  # below the first start: nothing to do
    assert cache.entries == [(2, 25)]


def test_clear_persists(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 0)
    cache.clear()
    assert cache.entries == []
    assert reload(cache).entries == []


def test_truncation_after_directory_deleted_does_not_crash(tmp_path: Path) -> None:
    directory = tmp_path / "topic-0"
    directory.mkdir()
    cache = LeaderEpochFileCache(directory / CHECKPOINT_FILE_NAME)
    cache.assign(0, 0)
    (directory / CHECKPOINT_FILE_NAME).unlink()
    directory.rmdir()
    cache.truncate_from_end(0)
    assert cache.entries == []


@pytest.mark.parametrize(
    "text",
    [
        "1\n0\n",  # unknown version
        "x\n0\n",  # version not a number
        "0\n",  # missing count
        "0\n2\n0 0\n",  # fewer entries than counted
        "0\n1\n0 0\n1 5\n",  # more entries than counted
        "0\n1\n0\n",  # missing field
        "0\n1\na b\n",  # not numbers
        "0\n1\n-1 0\n",  # negative epoch
    ],
)
def test_corrupt_checkpoint_is_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError, match=CHECKPOINT_FILE_NAME):
        LeaderEpochFileCache(path)


def test_load_applies_monotonicity(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE_NAME
    path.write_text("0\n3\n1 0\n3 10\n2 20\n")
    assert LeaderEpochFileCache(path).entries == [(1, 0), (2, 20)]


class Model:
    """Straightforward reference: a dict epoch -> start with Kafka's rules."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and self.entries[-1][0] == epoch and start >= self.entries[-1][1]:
            return
        self.entries = [(e, s) for e, s in self.entries if e < epoch and s < start]
        self.entries.append((epoch, start))

    def end_offset_for(self, requested: int, leo: int) -> tuple[int, int]:
        if not self.entries or requested < 0:
            return (-1, -1)
        if self.entries[-1][0] == requested:
            return (requested, leo)
        higher = [(e, s) for e, s in self.entries if e > requested]
        lower = [(e, s) for e, s in self.entries if e <= requested]
        if not higher:
            return (-1, -1)
        return (lower[-1][0] if lower else requested, higher[0][1])


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["assign", "end", "start"]),
            st.integers(0, 8),
            st.integers(0, 60),
        ),
        max_size=25,
    )
)
def test_matches_model(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    path = tmp_path_factory.mktemp("epochs") / CHECKPOINT_FILE_NAME
    cache = LeaderEpochFileCache(path)
    model = Model()
    for op, epoch, offset in ops:
        if op == "assign":
            cache.assign(epoch, offset)
            model.assign(epoch, offset)
        elif op == "end":
            cache.truncate_from_end(offset)
            model.entries = [(e, s) for e, s in model.entries if s < offset]
        else:
            cache.truncate_from_start(offset)
            before = [(e, s) for e, s in model.entries if s <= offset]
            if before:
                rest = [(e, s) for e, s in model.entries if s > offset]
                model.entries = [(before[-1][0], offset), *rest]
        assert cache.entries == model.entries
        for requested in range(-1, 10):
            assert cache.end_offset_for(requested, 100) == model.end_offset_for(requested, 100)
    if path.exists():
        assert LeaderEpochFileCache(path).entries == model.entries
