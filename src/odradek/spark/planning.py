"""Driver-side planning: which offsets a batch query or a micro-batch reads, and data-loss rules.

This is the part of Spark's KafkaOffsetReader / KafkaMicroBatchStream / KafkaRelation logic that
decides offsets, written against a small :class:`ClusterView` (partitions of the subscription,
earliest / latest offsets, offsets for timestamps) so it can be tested without a broker.

* A **batch query** resolves ``startingOffsets`` and ``endingOffsets`` (or their timestamp
  forms) to numbers once and reads ``[start, end)`` of every partition.
* A **streaming query** starts from :meth:`StreamPlanner.initial_offsets` (checkpointed by Spark
  as JSON); each trigger asks :meth:`StreamPlanner.latest_offsets` for the end of the next
  micro-batch, limited by ``maxOffsetsPerTrigger`` (or held back by ``minOffsetsPerTrigger``),
  and capped at the target recorded by ``Trigger.AvailableNow``. Partitions that appear later
  (new partitions, new topics matching a pattern) start at their earliest offset.
* **Data loss** (offsets deleted by retention, a partition or topic deleted, offsets going
  backwards after a topic was recreated) raises :class:`DataLossError` when
  ``failOnDataLoss`` is true, and is logged and skipped otherwise, as Spark does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from odradek.spark.offsets import OffsetRange, PartitionOffsets, rate_limit, split_ranges
from odradek.spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, SourceOptions

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

INSTRUCTION_FAIL_ON_DATA_LOSS = (
    "Some data may have been lost because they are not available in odradek any more; either "
    "the data was aged out by retention or the topic may have been deleted before all the data "
    "in the topic was processed. If you want your query to continue on such cases, set the "
    "source option 'failOnDataLoss' to 'false'."
)


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (retention, deleted topic) and failOnDataLoss is true."""


class ClusterView(Protocol):
    """What planning needs to know about the cluster, for the query's subscription."""

    def partitions(self) -> list[TopicPartition]:
        """Partitions of the subscribed / matching / assigned topics that exist now."""
        ...

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """First offset whose timestamp is >= the given one, None if there is none."""
        ...


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {INSTRUCTION_FAIL_ON_DATA_LOSS}")
    log.warning("%s. Some data may have been lost; continuing as failOnDataLoss is false.", message)


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


def _check_covers(
    spec_partitions: Iterable[TopicPartition], tps: list[TopicPartition], name: str
) -> None:
    given = set(spec_partitions)
    missing = set(tps) - given
    unknown = given - set(tps)
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {_names(missing)}")
        if unknown:
            parts.append(f"not found in the subscription {_names(unknown)}")
        raise OptionError(
            f"Option '{name}' with per-partition values must name every partition of the "
            f"subscription ({'; '.join(parts)}). Use -2 for earliest and -1 for latest."
        )


def resolve(
    spec: OffsetSpec,
    tps: list[TopicPartition],
    cluster: ClusterView,
    *,
    ending: bool,
    options: SourceOptions,
) -> PartitionOffsets:
    """Turn an offset spec into numbers for ``tps``, checking them against the log's bounds."""
    name = "endingOffsets" if ending else "startingOffsets"
    if not tps:
        return {}
    if spec.kind == "earliest":
        return cluster.earliest(tps)
    if spec.kind == "latest":
        return cluster.latest(tps)
    earliest = cluster.earliest(tps)
    latest = cluster.latest(tps)
    if spec.kind in ("timestamp", "timestamps"):
        if spec.kind == "timestamp":
            assert spec.timestamp is not None
            stamps = dict.fromkeys(tps, spec.timestamp)
        else:
            _check_covers(spec.offsets, tps, f"{name[:-7]}OffsetsByTimestamp")
            stamps = {tp: spec.offsets[tp] for tp in tps}
        found = cluster.offsets_for_times(stamps)
        result: PartitionOffsets = {}
        for tp in tps:
            offset = found.get(tp)
            if offset is None:
                if not ending and options.timestamp_strategy == "error":
                    raise DataLossError(
                        f"No offset matched timestamp {stamps[tp]} in {tp[0]}-{tp[1]}: no record "
                        "has that timestamp or a later one. Set the source option "
                        "'startingOffsetsByTimestampStrategy' to 'latest' to start at the "
                        "latest offset instead"
                    )
                offset = latest[tp]
            result[tp] = offset
        return result
    _check_covers(spec.offsets, tps, name)
    result = {}
    for tp in tps:
        wanted = spec.offsets[tp]
        if wanted == EARLIEST:
            result[tp] = earliest[tp]
        elif wanted == LATEST:
            result[tp] = latest[tp]
        elif wanted < earliest[tp]:
            report_data_loss(
                f"{name} for {tp[0]}-{tp[1]} is {wanted} but the earliest offset available is "
                f"{earliest[tp]}",
                options.fail_on_data_loss,
            )
            result[tp] = earliest[tp]
        elif wanted > latest[tp]:
            report_data_loss(
                f"{name} for {tp[0]}-{tp[1]} is {wanted} but the latest offset is {latest[tp]}",
                options.fail_on_data_loss,
            )
            result[tp] = latest[tp]
        else:
            result[tp] = wanted
    return result


def plan_batch(options: SourceOptions, cluster: ClusterView) -> list[OffsetRange]:
    """The offset ranges of a batch query, split for minPartitions / maxRecordsPerPartition."""
    tps = sorted(cluster.partitions())
    start = resolve(options.starting, tps, cluster, ending=False, options=options)
    end = resolve(options.ending, tps, cluster, ending=True, options=options)
    ranges = []
    for tp in tps:
        if end[tp] < start[tp]:
            raise OptionError(
                f"The starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending offset "
                f"{end[tp]}; check startingOffsets / endingOffsets"
            )
        ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
    return split_ranges(
        ranges,
        min_partitions=options.min_partitions,
        max_records_per_partition=options.max_records_per_partition,
    )


class StreamPlanner:
    """Offsets of a micro-batch stream. Holds only what Spark's Kafka source keeps in memory:
    the Trigger.AvailableNow target and the time of the last batch (for maxTriggerDelay)."""

    def __init__(
        self,
        options: SourceOptions,
        cluster: ClusterView,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.cluster = cluster
        self._clock = clock
        self._target: PartitionOffsets | None = None
        self._last_batch_at = clock()

    def initial_offsets(self) -> PartitionOffsets:
        tps = sorted(self.cluster.partitions())
        return resolve(self.options.starting, tps, self.cluster, ending=False, options=self.options)

    def prepare_available_now(self) -> None:
        """Record the latest offsets now: an AvailableNow query reads up to here and stops."""
        tps = sorted(self.cluster.partitions())
        self._target = self.cluster.latest(tps)

    def current_latest(self) -> PartitionOffsets:
        return self.cluster.latest(sorted(self.cluster.partitions()))

    def latest_offsets(
        self, start: PartitionOffsets, *, max_rows: int | None, read_all: bool
    ) -> PartitionOffsets:
        """End offsets of the next micro-batch (equal to ``start`` when there is nothing to do).

        ``max_rows`` is the engine's ReadMaxRows limit (None: no limit); ``read_all`` is set when
        the engine asked for everything available (ReadAllAvailable, e.g. Trigger.Once), which
        also switches off minOffsetsPerTrigger.
        """
        tps = sorted(self.cluster.partitions())
        latest = self.cluster.latest(tps)
        new = [tp for tp in tps if tp not in start]
        begin = dict(start)
        if new:
            begin.update(self.cluster.earliest(new))
        if self._target is not None:
            # AvailableNow: never beyond the target; partitions born after it add nothing.
            # A target below the start (restart of a finished run) means nothing to read; a
            # latest offset below the start stays visible so that data loss is reported.
            latest = {
                tp: min(latest[tp], max(self._target.get(tp, begin[tp]), begin[tp])) for tp in tps
            }
        live = {tp: begin[tp] for tp in tps}
        end = rate_limit(max_rows, live, latest) if max_rows is not None else dict(latest)

        min_rows = self.options.min_offsets_per_trigger
        if min_rows is not None and not read_all and self._target is None:
            available = sum(max(latest[tp] - live[tp], 0) for tp in tps)
            waited_ms = (self._clock() - self._last_batch_at) * 1000
            if available < min_rows and waited_ms < self.options.max_trigger_delay_ms:
                return dict(start)
        if end != start:
            self._last_batch_at = self._clock()
        return end

    def ranges(self, start: PartitionOffsets, end: PartitionOffsets) -> list[OffsetRange]:
        """The offset ranges of the micro-batch ``(start, end]`` (as Spark plans partitions)."""
        new = [tp for tp in end if tp not in start]
        begin = dict(start)
        if new:
            earliest = self.cluster.earliest(new)
            for tp in new:
                if tp not in earliest:
                    report_data_loss(
                        f"Partition {tp[0]}-{tp[1]} was added and then deleted",
                        self.options.fail_on_data_loss,
                    )
                    continue
                begin[tp] = earliest[tp]
        gone = [tp for tp in start if tp not in end]
        if gone:
            report_data_loss(f"Partitions {_names(gone)} are gone", self.options.fail_on_data_loss)
        ranges = []
        for tp in sorted(end):
            if tp not in begin:
                continue
            if end[tp] < begin[tp]:
                report_data_loss(
                    f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin[tp]} to "
                    f"{end[tp]}, some data may have been missed",
                    self.options.fail_on_data_loss,
                )
                continue
            ranges.append(OffsetRange(tp[0], tp[1], begin[tp], end[tp]))
        return split_ranges(
            ranges,
            min_partitions=self.options.min_partitions,
            max_records_per_partition=self.options.max_records_per_partition,
        )
