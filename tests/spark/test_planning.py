"""Offset planning of batch and streaming reads against an in-memory cluster view (no broker)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from odradek.spark.offsets import OffsetRange
from odradek.spark.options import OptionError, parse_source_options
from odradek.spark.planning import DataLossError, StreamPlanner, plan_batch

TP = tuple[str, int]


class FakeCluster:
    """Partitions with a log start offset, a log end offset and record timestamps."""

    def __init__(self, logs: dict[TP, tuple[int, int]]) -> None:
        self.logs = dict(logs)
        self.timestamps: dict[TP, list[tuple[int, int]]] = {}  # tp -> [(offset, ts)]

    def partitions(self) -> list[TP]:
        return sorted(self.logs)

    def earliest(self, partitions: Iterable[TP]) -> dict[TP, int]:
        return {tp: self.logs[tp][0] for tp in partitions if tp in self.logs}

    def latest(self, partitions: Iterable[TP]) -> dict[TP, int]:
        return {tp: self.logs[tp][1] for tp in partitions if tp in self.logs}

    def offsets_for_times(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        result: dict[TP, int | None] = {}
        for tp, ts in timestamps.items():
            result[tp] = next((o for o, t in self.timestamps.get(tp, []) if t >= ts), None)
        return result


def options(streaming: bool = False, **extra: str):
    return parse_source_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t", **extra}, streaming=streaming
    )


def test_batch_reads_earliest_to_latest_by_default() -> None:
    cluster = FakeCluster({("t", 0): (5, 50), ("t", 1): (0, 0), ("t", 2): (0, 7)})
    assert plan_batch(options(), cluster) == [
        OffsetRange("t", 0, 5, 50),
        OffsetRange("t", 2, 0, 7),
    ]


def test_batch_specific_offsets_must_cover_the_subscription() -> None:
    cluster = FakeCluster({("t", 0): (0, 50), ("t", 1): (0, 10)})
    with pytest.raises(OptionError, match="missing t-1"):
        plan_batch(options(startingOffsets='{"t":{"0":3}}'), cluster)
    ranges = plan_batch(
        options(startingOffsets='{"t":{"0":3,"1":-2}}', endingOffsets='{"t":{"0":-1,"1":4}}'),
        cluster,
    )
    assert ranges == [OffsetRange("t", 0, 3, 50), OffsetRange("t", 1, 0, 4)]


def test_batch_start_after_end_is_an_error() -> None:
    cluster = FakeCluster({("t", 0): (0, 50)})
    with pytest.raises(OptionError, match="after its ending offset"):
        plan_batch(
            options(startingOffsets='{"t":{"0":30}}', endingOffsets='{"t":{"0":20}}'), cluster
        )


def test_offsets_deleted_by_retention_follow_fail_on_data_loss() -> None:
    cluster = FakeCluster({("t", 0): (100, 150)})
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        plan_batch(options(startingOffsets='{"t":{"0":10}}'), cluster)
    ranges = plan_batch(options(startingOffsets='{"t":{"0":10}}', failOnDataLoss="false"), cluster)
    assert ranges == [OffsetRange("t", 0, 100, 150)]


def test_starting_timestamps_and_strategy() -> None:
    cluster = FakeCluster({("t", 0): (0, 4)})
    cluster.timestamps[("t", 0)] = [(0, 100), (1, 200), (2, 300), (3, 400)]
    assert plan_batch(options(startingTimestamp="250"), cluster) == [OffsetRange("t", 0, 2, 4)]
    with pytest.raises(DataLossError, match="No offset matched timestamp 999"):
        plan_batch(options(startingTimestamp="999"), cluster)
    late = options(startingTimestamp="999", startingOffsetsByTimestampStrategy="latest")
    assert plan_batch(late, cluster) == []
    assert plan_batch(options(endingTimestamp="150"), cluster) == [OffsetRange("t", 0, 0, 1)]


def test_min_partitions_splits_batch_ranges() -> None:
    cluster = FakeCluster({("t", 0): (0, 100)})
    ranges = plan_batch(options(minPartitions="4"), cluster)
    assert [r.size for r in ranges] == [25, 25, 25, 25]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_stream_admission_control_and_new_partitions() -> None:
    cluster = FakeCluster({("t", 0): (0, 100)})
    planner = StreamPlanner(options(True, startingOffsets="earliest"), cluster)
    start = planner.initial_offsets()
    assert start == {("t", 0): 0}
    end = planner.latest_offsets(start, max_rows=30, read_all=False)
    assert end == {("t", 0): 30}
    assert planner.ranges(start, end) == [OffsetRange("t", 0, 0, 30)]
    # A partition is added (and a topic matching nothing is ignored by the view).
    cluster.logs[("t", 1)] = (0, 10)
    end2 = planner.latest_offsets(end, max_rows=None, read_all=True)
    assert end2 == {("t", 0): 100, ("t", 1): 10}
    assert planner.ranges(end, end2) == [OffsetRange("t", 0, 30, 100), OffsetRange("t", 1, 0, 10)]
    assert planner.latest_offsets(end2, max_rows=10, read_all=False) == end2


def test_stream_starting_latest_skips_existing_data() -> None:
    cluster = FakeCluster({("t", 0): (0, 100)})
    planner = StreamPlanner(options(True), cluster)
    start = planner.initial_offsets()
    assert start == {("t", 0): 100}
    assert planner.latest_offsets(start, max_rows=None, read_all=True) == start


def test_available_now_stops_at_the_target() -> None:
    cluster = FakeCluster({("t", 0): (0, 100)})
    planner = StreamPlanner(options(True, startingOffsets="earliest"), cluster)
    start = planner.initial_offsets()
    planner.prepare_available_now()
    cluster.logs[("t", 0)] = (0, 500)  # produced after the query started
    cluster.logs[("t", 1)] = (0, 50)  # a partition born after the target
    seen = []
    offsets = start
    for _ in range(10):
        end = planner.latest_offsets(offsets, max_rows=40, read_all=False)
        if end == offsets:
            break
        seen.extend(planner.ranges(offsets, end))
        offsets = end
    assert offsets == {("t", 0): 100, ("t", 1): 0}
    assert sum(r.size for r in seen) == 100
    assert max(r.size for r in seen) <= 40


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay() -> None:
    cluster = FakeCluster({("t", 0): (0, 5)})
    clock = Clock()
    opts = options(
        True, startingOffsets="earliest", minOffsetsPerTrigger="10", maxTriggerDelay="1s"
    )
    planner = StreamPlanner(opts, cluster, clock=clock)
    start = planner.initial_offsets()
    assert planner.latest_offsets(start, max_rows=None, read_all=False) == start
    clock.now = 2.0
    assert planner.latest_offsets(start, max_rows=None, read_all=False) == {("t", 0): 5}
    # Trigger.Once / ReadAllAvailable ignores the minimum.
    assert planner.latest_offsets(start, max_rows=None, read_all=True) == {("t", 0): 5}


def test_stream_data_loss_cases() -> None:
    cluster = FakeCluster({("t", 0): (0, 100), ("t", 1): (0, 100)})
    strict = StreamPlanner(options(True, startingOffsets="earliest"), cluster)
    lenient = StreamPlanner(
        options(True, startingOffsets="earliest", failOnDataLoss="false"), cluster
    )
    start = {("t", 0): 50, ("t", 1): 50}
    # Partition t-1 deleted.
    end = {("t", 0): 100}
    with pytest.raises(DataLossError, match="t-1 are gone"):
        strict.ranges(start, end)
    assert lenient.ranges(start, end) == [OffsetRange("t", 0, 50, 100)]
    # Topic recreated: offsets went backwards.
    backwards = {("t", 0): 10, ("t", 1): 100}
    with pytest.raises(DataLossError, match="changed from 50 to 10"):
        strict.ranges(start, backwards)
    assert lenient.ranges(start, backwards) == [OffsetRange("t", 1, 50, 100)]
