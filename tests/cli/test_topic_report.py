"""kafka-topics' describe lines and partition filters, on hand-made metadata."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from odradek.cli.topic_report import PartitionFilter, describe_lines
from odradek.client.metadata import PartitionInfo, TopicInfo


@dataclass
class Entry:
    value: str
    is_default: bool = False
    sensitive: bool = False


TOPIC_ID = uuid.UUID(bytes=bytes(range(16)))


def topic() -> TopicInfo:
    return TopicInfo(
        "t",
        partitions={
            0: PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3)),
            1: PartitionInfo(1, 2, (2, 3, 1), (2, 3)),
            2: PartitionInfo(2, -1, (3, 1, 2), (3,), offline=(3,)),
            3: PartitionInfo(3, 4, (4, 1, 2), (4, 1)),
        },
        topic_id=TOPIC_ID,
    )


CONFIGS = {"min.insync.replicas": Entry("2"), "segment.bytes": Entry("1", is_default=True)}
LIVE = {1, 2, 3}


def test_full_description_is_kafka_topics_layout() -> None:
    lines = describe_lines(topic(), CONFIGS, LIVE, PartitionFilter())
    assert lines == [
        "Topic: t\tTopicId: AAECAwQFBgcICQoLDA0ODw\tPartitionCount: 4\tReplicationFactor: 3"
        "\tConfigs: min.insync.replicas=2",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3",
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,3",
        "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 3,1,2\tIsr: 3\tOffline: 3",
        "\tTopic: t\tPartition: 3\tLeader: 4\tReplicas: 4,1,2\tIsr: 4,1",
    ]


def test_no_topic_id_no_field() -> None:
    info = topic()
    info.topic_id = None
    assert describe_lines(info, {}, LIVE, PartitionFilter())[0].startswith(
        "Topic: t\tPartitionCount: 4\t"
    )


def partitions_of(lines: list[str]) -> list[int]:
    assert all(line.startswith("\tTopic: t\tPartition: ") for line in lines)
    return [int(line.split("\t")[2].split(": ")[1]) for line in lines]


def test_filters() -> None:
    def pick(**flags: bool) -> list[int]:
        return partitions_of(describe_lines(topic(), CONFIGS, LIVE, PartitionFilter(**flags)))

    assert pick(under_replicated=True) == [1, 2, 3]
    # Leaderless, or led by broker 4 that is not live.
    assert pick(unavailable=True) == [2, 3]
    # min.insync.replicas=2: ISR of 1 (and leaderless) is under, ISR of 2 is at.
    assert pick(under_min_isr=True) == [2]
    assert pick(at_min_isr=True) == [1, 3]
    # Several filters: a partition matching any of them.
    assert pick(unavailable=True, at_min_isr=True) == [1, 2, 3]


def test_min_isr_defaults_to_one() -> None:
    lines = describe_lines(topic(), {}, LIVE, PartitionFilter(at_min_isr=True))
    assert partitions_of(lines) == [2]
