"""Deleting a topic deletes its committed offsets: a re-created topic starts afresh."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka import KafkaException as ConfluentKafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.integration


def _committed(admin: AdminClient, group: str, topic: str) -> int | None:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    try:
        result = admin.list_consumer_group_offsets([request])[group].result(10)
    except ConfluentKafkaException:
        return None
    offsets = [tp.offset for tp in result.topic_partitions if tp.offset >= 0]
    return offsets[0] if offsets else None


def test_recreated_topic_does_not_inherit_old_offsets(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("reborn", 1, 1)])["reborn"].result(10)
    request = ConsumerGroupTopicPartitions("keeper", [TopicPartition("reborn", 0, 42)])
    admin.alter_consumer_group_offsets([request])["keeper"].result(10)
    assert _committed(admin, "keeper", "reborn") == 42

    admin.delete_topics(["reborn"])["reborn"].result(10)
    deadline = time.monotonic() + 10
    while _committed(admin, "keeper", "reborn") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    admin.create_topics([NewTopic("reborn", 1, 1)])["reborn"].result(10)
    assert _committed(admin, "keeper", "reborn") is None

    # And after a restart (rebuilt from __consumer_offsets) it stays gone.
    broker.stop()
    broker.start()
    assert (
        _committed(AdminClient({"bootstrap.servers": broker.bootstrap}), "keeper", "reborn") is None
    )
