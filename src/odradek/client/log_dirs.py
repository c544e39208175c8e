"""DescribeLogDirs for the admin client: each broker's log directories and their replicas.

What Kafka's ``Admin.describeLogDirs`` returns: broker id -> log directory path ->
:class:`LogDirDescription` (the directory's error, e.g. KAFKA_STORAGE_ERROR when it is
offline, its replicas with their sizes, and from v4 the volume's total and usable bytes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.client.entities import build_request
from odradek.client.errors import KafkaError
from odradek.client.versions import DESCRIBE_LOG_DIRS

if TYPE_CHECKING:
    from odradek.client.core import KafkaClient

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ReplicaInfo:
    size: int
    offset_lag: int
    is_future: bool


@dataclass
class LogDirDescription:
    error: KafkaError | None
    replicas: dict[TopicPartition, ReplicaInfo] = field(default_factory=dict)
    total_bytes: int | None = None  # None: the broker does not say (before v4, or unknown)
    usable_bytes: int | None = None


def _request_topics(
    partitions: Iterable[TopicPartition] | None,
) -> list[dict[str, object]] | None:
    if partitions is None:
        return None
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": t, "partitions": sorted(p)} for t, p in sorted(by_topic.items())]


async def describe_log_dirs(
    client: KafkaClient,
    brokers: Sequence[int] | None = None,
    partitions: Iterable[TopicPartition] | None = None,
) -> dict[int, dict[str, LogDirDescription]]:
    """Ask each broker (every known one by default) about its log directories; with
    ``partitions`` only those replicas are listed."""
    if brokers is None:
        cluster = await client.metadata([], refresh=True)
        brokers = sorted(cluster.brokers)
    topics = _request_topics(partitions)
    result: dict[int, dict[str, LogDirDescription]] = {}
    for broker in brokers:
        response = await client.request(
            broker, DESCRIBE_LOG_DIRS, lambda v: build_request(DESCRIBE_LOG_DIRS, v, topics=topics)
        )
        if getattr(response, "error_code", 0):
            raise KafkaError(response.error_code, f"DescribeLogDirs on broker {broker}")
        dirs: dict[str, LogDirDescription] = {}
        for res in response.results:
            total = int(getattr(res, "total_bytes", -1))
            usable = int(getattr(res, "usable_bytes", -1))
            dirs[str(res.log_dir)] = LogDirDescription(
                error=KafkaError(res.error_code, f"log directory {res.log_dir}")
                if res.error_code
                else None,
                replicas={
                    (str(t.name), int(p.partition_index)): ReplicaInfo(
                        int(p.partition_size), int(p.offset_lag), bool(p.is_future_key)
                    )
                    for t in res.topics
                    for p in t.partitions
                },
                total_bytes=total if total >= 0 else None,
                usable_bytes=usable if usable >= 0 else None,
            )
        result[broker] = dirs
    return result
