"""The lines of ``odradek topics describe``, as kafka-topics ``--describe`` prints them.

A topic header ``Topic: t\\tTopicId: ...\\tPartitionCount: n\\tReplicationFactor: r\\tConfigs:
k=v,...`` (TopicId only when the broker reported one), then one line per partition
``\\tTopic: t\\tPartition: p\\tLeader: l\\tReplicas: ...\\tIsr: ...`` (``Leader: none``
without a leader; ``\\tOffline: ...`` appended when replicas are offline).

The partition filters follow TopicCommand's PartitionDescription: under-replicated = the
ISR is smaller than the replica list; unavailable = no leader, or a leader that is not a
live broker; under-min-ISR = no leader, or an ISR smaller than the topic's
``min.insync.replicas``; at-min-ISR = an ISR exactly that size. With any filter the topic
header is left out and only matching partitions are printed (a partition matching any of
the chosen filters).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.client.metadata import PartitionInfo, TopicInfo
from odradek.cluster.zk.codecs import kafka_uuid_string

DEFAULT_MIN_ISR = 1  # Kafka's min.insync.replicas default


@dataclass(frozen=True)
class PartitionFilter:
    under_replicated: bool = False
    unavailable: bool = False
    under_min_isr: bool = False
    at_min_isr: bool = False

    @property
    def active(self) -> bool:
        return self.under_replicated or self.unavailable or self.under_min_isr or self.at_min_isr

    def matches(self, part: PartitionInfo, min_isr: int, live: Collection[int]) -> bool:
        has_leader = part.leader >= 0
        return (
            (self.under_replicated and len(part.replicas) > len(part.isr))
            or (self.unavailable and (not has_leader or part.leader not in live))
            or (self.under_min_isr and (not has_leader or len(part.isr) < min_isr))
            or (self.at_min_isr and len(part.isr) == min_isr)
        )


def config_text(entries: Mapping[str, Any], all_configs: bool) -> str:
    shown = [
        f"{name}={'<sensitive>' if entry.sensitive else entry.value}"
        for name, entry in sorted(entries.items())
        if all_configs or not entry.is_default
    ]
    return ",".join(shown)


def _min_isr(entries: Mapping[str, Any]) -> int:
    entry = entries.get("min.insync.replicas")
    try:
        return int(entry.value) if entry is not None else DEFAULT_MIN_ISR
    except (TypeError, ValueError):
        return DEFAULT_MIN_ISR


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def partition_line(name: str, part: PartitionInfo) -> str:
    row = [
        f"Topic: {name}",
        f"Partition: {part.partition}",
        f"Leader: {part.leader if part.leader >= 0 else 'none'}",
        f"Replicas: {_ids(part.replicas)}",
        f"Isr: {_ids(part.isr)}",
    ]
    if part.offline:
        row.append(f"Offline: {_ids(part.offline)}")
    return "\t" + "\t".join(row)


def describe_lines(
    info: TopicInfo,
    configs: Mapping[str, Any],
    live_brokers: Collection[int],
    partition_filter: PartitionFilter,
    all_configs: bool = False,
) -> list[str]:
    partitions = [info.partitions[p] for p in sorted(info.partitions)]
    lines: list[str] = []
    if not partition_filter.active:
        header = [f"Topic: {info.name}"]
        if info.topic_id is not None and info.topic_id.int != 0:
            header.append(f"TopicId: {kafka_uuid_string(info.topic_id)}")
        header += [
            f"PartitionCount: {len(partitions)}",
            f"ReplicationFactor: {len(partitions[0].replicas) if partitions else 0}",
            f"Configs: {config_text(configs, all_configs)}",
        ]
        lines.append("\t".join(header))
        return lines + [partition_line(info.name, part) for part in partitions]
    min_isr = _min_isr(configs)
    return [
        partition_line(info.name, part)
        for part in partitions
        if partition_filter.matches(part, min_isr, live_brokers)
    ]
