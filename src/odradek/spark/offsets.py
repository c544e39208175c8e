"""Partition offsets as Spark checkpoints them, offset ranges, admission control, range splits.

Streaming offsets travel between Spark's JVM and Python as JSON, and Spark writes them into the
query's checkpoint (``offsets/<batchId>``). The shape is the one Spark's Kafka source uses, so a
checkpointed offset reads the same way to anyone who knows Kafka::

    {"events": {"0": 1200, "1": 1187}, "clicks": {"0": 40}}

Topic names are keys, partition numbers are *string* keys (JSON objects have string keys), and
each value is the next offset to read. Serialization is sorted so that equal offsets give equal
JSON text.

A micro-batch or a batch query reads half-open ranges ``[from_offset, until_offset)`` per
partition. :func:`rate_limit` spreads ``maxOffsetsPerTrigger`` over partitions in proportion to
their backlog, and :func:`split_ranges` cuts ranges into more Spark tasks for ``minPartitions``
and ``maxRecordsPerPartition``, both following Spark's KafkaMicroBatchStream and
KafkaOffsetRangeCalculator so that a job behaves the same on odradek as on Kafka.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


class OffsetFormatError(ValueError):
    """A checkpointed or supplied offset object does not have the expected shape."""


def to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(topic, p): n}`` -> ``{"topic": {"p": n}}``, topics and partitions in order."""
    result: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return result


def from_json_dict(data: object) -> PartitionOffsets:
    """Inverse of :func:`to_json_dict`; raises OffsetFormatError on anything else."""
    if not isinstance(data, Mapping):
        raise OffsetFormatError(f"offsets must be a JSON object of topics, got {data!r}")
    result: PartitionOffsets = {}
    for topic, partitions in data.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise OffsetFormatError(
                f"offsets for topic {topic!r} must be an object, got {partitions!r}"
            )
        for partition_text, offset in partitions.items():
            try:
                partition = int(partition_text)
            except (TypeError, ValueError):
                raise OffsetFormatError(
                    f"partition {partition_text!r} of topic {topic!r} is not a number"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise OffsetFormatError(
                    f"offset of {topic}-{partition} is not an integer: {offset!r}"
                )
            result[(topic, partition)] = offset
    return result


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one partition, read by one Spark task."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


def rate_limit(
    limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> PartitionOffsets:
    """End offsets that admit at most about ``limit`` offsets beyond ``start``.

    Partitions share the limit in proportion to their backlog (``latest - start``); a partition
    whose share is below one offset still advances by one, so that a small backlog is never
    starved (Spark's rule, which may exceed ``limit`` by at most one offset per partition).
    Every partition of ``latest`` must be in ``start`` (new partitions with their first offset);
    one missing from ``start`` is returned at its latest offset, unlimited.
    """
    sizes = {tp: latest[tp] - start[tp] for tp in latest if tp in start and latest[tp] > start[tp]}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    result = dict(latest)
    for tp, size in sizes.items():
        share = limit * (size / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        result[tp] = min(latest[tp], start[tp] + step)
    return result


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Drop empty ranges and cut the rest into Spark tasks.

    Without options each non-empty range is one task. ``maxRecordsPerPartition`` cuts every range
    into pieces of at most that many offsets. If there are then fewer ranges than
    ``minPartitions``, each range gets a number of pieces proportional to its share of all
    offsets (at least one), the pieces as equal as integer division allows.
    """
    pieces = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        pieces = [
            piece
            for r in pieces
            for piece in _cut(r, math.ceil(r.size / max_records_per_partition))
        ]
    if min_partitions is None or len(pieces) >= min_partitions:
        return pieces
    total = sum(r.size for r in pieces)
    result: list[OffsetRange] = []
    for r in pieces:
        # Python's round() is banker's rounding; Spark's math.round rounds halves up.
        parts = max(math.floor(r.size / total * min_partitions + 0.5), 1)
        result.extend(_cut(r, parts))
    return result


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    result = []
    remaining = r.size
    start = r.from_offset
    for part in range(parts):
        this_part = remaining // (parts - part)  # the last piece takes the remainder
        remaining -= this_part
        end = min(start + this_part, r.until_offset)
        if end > start:
            result.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return result
