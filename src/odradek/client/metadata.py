"""The client's picture of the cluster: brokers, controller, topics, partitions and leaders.

Built from a Metadata response of any version (v1+). A topic the broker reports with an error
(UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE while it is being created, ...) is kept with its
``error_code`` so callers can tell "no such topic" from "not ready yet".
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()
    error_code: int = 0
    leader_epoch: int = -1


@dataclass(slots=True)
class TopicInfo:
    name: str
    error_code: int = 0
    is_internal: bool = False
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    topic_id: uuid.UUID | None = None

    def available_partitions(self) -> list[int]:
        """Partitions that currently have a leader, in partition order."""
        return sorted(p for p, info in self.partitions.items() if info.leader >= 0)


@dataclass(slots=True)
class ClusterMetadata:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)

    def leader(self, topic: str, partition: int) -> int | None:
        """Leader node of (topic, partition), or None if unknown or leaderless."""
        info = self.topics.get(topic)
        if info is None:
            return None
        part = info.partitions.get(partition)
        if part is None or part.leader < 0:
            return None
        return part.leader

    def partitions_for(self, topic: str) -> list[int]:
        """All partition ids of ``topic`` (empty if unknown)."""
        info = self.topics.get(topic)
        return sorted(info.partitions) if info is not None else []

    def copy(self) -> ClusterMetadata:
        """A shallow snapshot whose dicts can be changed without touching this one."""
        return ClusterMetadata(
            cluster_id=self.cluster_id,
            controller_id=self.controller_id,
            brokers=dict(self.brokers),
            topics=dict(self.topics),
        )


def from_metadata_response(response: Any) -> ClusterMetadata:
    """Convert a kio MetadataResponse (v1-v13) into a ClusterMetadata."""
    brokers = {
        int(b.node_id): BrokerInfo(int(b.node_id), str(b.host), int(b.port), b.rack)
        for b in response.brokers
    }
    topics: dict[str, TopicInfo] = {}
    for t in response.topics:
        if t.name is None:  # v10+ may describe a topic by id only; we always ask by name
            continue
        partitions = {
            int(p.partition_index): PartitionInfo(
                partition=int(p.partition_index),
                leader=int(p.leader_id),
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
                offline=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                error_code=int(p.error_code),
                leader_epoch=int(getattr(p, "leader_epoch", -1)),
            )
            for p in t.partitions
        }
        topic_id = getattr(t, "topic_id", None)
        if topic_id is not None and topic_id.int == 0:
            topic_id = None
        topics[str(t.name)] = TopicInfo(
            name=str(t.name),
            error_code=int(t.error_code),
            is_internal=bool(t.is_internal),
            partitions=partitions,
            topic_id=topic_id,
        )
    return ClusterMetadata(
        cluster_id=getattr(response, "cluster_id", None),
        controller_id=int(getattr(response, "controller_id", -1)),
        brokers=brokers,
        topics=topics,
    )
