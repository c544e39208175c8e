"""Fixtures shared by the assignor tests, re-created from Kafka's Java test helpers.

``rack_cluster`` and ``verify_rack_assignment`` follow AbstractPartitionAssignorTest: broker
``i`` sits on ``broker_racks[i]``, and replica ``j`` of partition ``i`` of the n-th topic
(counting partitions of earlier topics in the given order) is on broker
``(i + j + offset) % brokers``. Assignments are compared as Java prints them: sorted
``topic-partition`` strings joined by ", ".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from odradek.client.assignors import AbstractPartitionAssignor, Subscription, TopicPartition

ALL_RACKS = ["a", "b", "c", "d", "e", "f"]


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def racks(n: int) -> list[str | None]:
    return [ALL_RACKS[i % len(ALL_RACKS)] for i in range(n)]


def null_racks(n: int) -> list[str | None]:
    return [None] * n


def rack_cluster(
    partitions_per_topic: Mapping[str, int],
    replication_factor: int,
    broker_racks: Sequence[str | None],
) -> dict[TopicPartition, set[str]]:
    out: dict[TopicPartition, set[str]] = {}
    offset = 0
    for topic, count in partitions_per_topic.items():
        for i in range(count):
            replicas = [
                broker_racks[(i + j + offset) % len(broker_racks)]
                for j in range(replication_factor)
            ]
            out[tp(topic, i)] = {r for r in replicas if r is not None}
        offset += count
    return out


def java_string(partitions: Sequence[TopicPartition]) -> str:
    return ", ".join(sorted(f"{t}-{p}" for t, p in partitions))


def parse_partitions(text: str) -> list[TopicPartition]:
    out = []
    for item in text.split(", "):
        topic, _, p = item.rpartition("-")
        out.append(tp(topic, int(p)))
    return out


def verify_rack_assignment(
    assignor: AbstractPartitionAssignor,
    partitions_per_topic: Mapping[str, int],
    replication_factor: int,
    broker_racks: Sequence[str | None],
    consumer_racks: Sequence[str | None],
    consumer_topics: Sequence[Sequence[str]],
    expected: Sequence[str],
    mismatched: int,
    owned: Sequence[str] = (),
) -> None:
    cluster = rack_cluster(partitions_per_topic, replication_factor, broker_racks)
    subscriptions = {
        f"consumer{i}": Subscription(
            tuple(topics),
            owned_partitions=tuple(parse_partitions(owned[i])) if i < len(owned) else (),
            rack_id=consumer_racks[i],
        )
        for i, topics in enumerate(consumer_topics)
    }
    result = assignor.assign(partitions_per_topic, subscriptions, partition_racks=cluster)
    actual = {m: java_string(a.partitions) for m, a in result.items()}
    assert actual == {f"consumer{i}": e for i, e in enumerate(expected)}
    if mismatched >= 0:
        count = sum(
            1
            for i, rack in enumerate(consumer_racks)
            if rack is not None
            for part in result[f"consumer{i}"].partitions
            if rack not in cluster[part]
        )
        assert count == mismatched


def assignment_sets(result: Mapping[str, object]) -> dict[str, set[TopicPartition]]:
    return {m: set(a.partitions) for m, a in result.items()}  # type: ignore[attr-defined]
