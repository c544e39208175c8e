"""Offset JSON, admission control and range splitting (pure functions, no Spark)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.spark.offsets import (
    OffsetFormatError,
    OffsetRange,
    from_json_dict,
    rate_limit,
    split_ranges,
    to_json_dict,
)

partition_offsets = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b", "topic.with.dots"]), st.integers(0, 50)),
    st.integers(0, 2**62),
    max_size=20,
)


@settings(max_examples=200)
@given(partition_offsets)
def test_json_round_trip_through_text(offsets: dict[tuple[str, int], int]) -> None:
    text = json.dumps(to_json_dict(offsets))
    assert from_json_dict(json.loads(text)) == offsets
    # Equal offsets always give equal text: Spark compares checkpointed offsets.
    assert json.dumps(to_json_dict(dict(reversed(list(offsets.items()))))) == text


def test_json_shape_is_sparks() -> None:
    assert to_json_dict({("t", 1): 5, ("t", 0): 7}) == {"t": {"0": 7, "1": 5}}


@pytest.mark.parametrize(
    "bad", [[], {"t": 5}, {"t": {"x": 1}}, {"t": {"0": "5"}}, {"t": {"0": True}}]
)
def test_malformed_offsets_raise(bad: object) -> None:
    with pytest.raises(OffsetFormatError):
        from_json_dict(bad)


def test_rate_limit_is_proportional() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 10}
    latest = {("t", 0): 300, ("t", 1): 100, ("t", 2): 10}
    assert rate_limit(100, start, latest) == {("t", 0): 75, ("t", 1): 25, ("t", 2): 10}
    assert rate_limit(1000, start, latest) == latest


def test_rate_limit_never_starves_a_small_partition() -> None:
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 10_000, ("t", 1): 1}
    limited = rate_limit(10, start, latest)
    assert limited[("t", 1)] == 1
    assert limited[("t", 0)] == 9


@settings(max_examples=200)
@given(
    st.integers(1, 1000),
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
)
def test_rate_limit_bounds(limit: int, spans: list[tuple[int, int]]) -> None:
    start = {("t", i): s for i, (s, _) in enumerate(spans)}
    latest = {("t", i): s + n for i, (s, n) in enumerate(spans)}
    end = rate_limit(limit, start, latest)
    for tp in latest:
        assert start[tp] <= end[tp] <= latest[tp]
    admitted = sum(end[tp] - start[tp] for tp in latest)
    assert admitted <= limit + len(spans)  # Spark's rounding: at most one extra per partition
    backlog = sum(latest[tp] - start[tp] for tp in latest)
    assert admitted >= min(backlog, 1)  # progress whenever there is something to read


def test_split_keeps_one_task_per_partition_by_default() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 0, 1)]
    assert split_ranges(ranges) == [ranges[0], ranges[2]]


def test_split_for_min_partitions_matches_spark() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 50)]
    pieces = split_ranges(ranges, min_partitions=6)
    sizes = [(p.partition, p.size) for p in pieces]
    assert sizes == [(0, 25), (0, 25), (0, 25), (0, 25), (1, 25), (1, 25)]


def test_split_for_max_records_per_partition() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 10, 35)], max_records_per_partition=10)
    assert [(p.from_offset, p.until_offset) for p in pieces] == [(10, 18), (18, 26), (26, 35)]


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000)), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(1, 40)),
    st.one_of(st.none(), st.integers(1, 3000)),
)
def test_split_covers_every_offset_once(
    spans: list[tuple[int, int]], min_partitions: int | None, max_records: int | None
) -> None:
    ranges = [OffsetRange("t", i, s, s + n) for i, (s, n) in enumerate(spans)]
    pieces = split_ranges(
        ranges, min_partitions=min_partitions, max_records_per_partition=max_records
    )
    for r in ranges:
        mine = [p for p in pieces if p.partition == r.partition]
        assert sum(p.size for p in mine) == r.size
        assert all(p.size > 0 for p in mine)
        if mine:
            assert mine[0].from_offset == r.from_offset
            assert mine[-1].until_offset == r.until_offset
            for left, right in itertools.pairwise(mine):
                assert left.until_offset == right.from_offset
        if max_records is not None:
            assert all(p.size <= max_records for p in mine)
    nonempty = sum(1 for r in ranges if r.size)
    assert len(pieces) >= nonempty
