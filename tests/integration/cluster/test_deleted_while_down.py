"""A topic deleted while one of its brokers is down (Kafka 3.9's ZooKeeper mode).

The ZooKeeper controller does not forget a replica it could not delete: the deletion stays
pending (``/admin/delete_topics/<t>`` and the topic's znodes stay, its replicas on the
dead broker are ReplicaDeletionIneligible) and is retried when the broker registers again,
with StopReplica(delete). So the returning broker's replica directories go, the deletion
completes, and the topic can be created again, with new, empty replicas everywhere.
(Kafka's stray-log handling by a FULL LeaderAndIsr is a KRaft/migration-only path: a
ZooKeeper controller never sends one.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]


def _replica_dirs(data_dir: Path, topic: str) -> list[str]:
    """The topic's live partition directories (a deleted one is first renamed
    ``<name>.<uuid>-delete``, then removed by the background job, as in Kafka)."""
    return sorted(
        p.name
        for p in data_dir.iterdir()
        if p.name.startswith(f"{topic}-") and not p.name.endswith("-delete")
    )


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def _read(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(60):
            if len(values) >= expect:
                break
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_a_topic_deleted_while_a_broker_was_down_is_gone_when_it_returns(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(3)
    cluster.create_topic("gone", 2)
    _produce(cluster.bootstrap(), "gone", [b"old-1", b"old-2"])
    down = cluster.brokers[3]
    wait_for(lambda: _replica_dirs(down.data_dir, "gone") == ["gone-0", "gone-1"], 30, "replicas")
    old_id = cluster.zk.get_topic_assignment("gone")[0].topic_id

    down.stop()
    wait_for(lambda: 3 not in cluster.zk.get_broker_ids(), 30, "broker 3 gone from ZooKeeper")
    admin = cluster.admin(1, 2)
    admin.delete_topics(["gone"], operation_timeout=20)["gone"].result(30)
    # Pending: the controller waits for broker 3's replicas.
    assert cluster.zk.get_topic_assignment("gone") is not None
    assert _replica_dirs(down.data_dir, "gone") == ["gone-0", "gone-1"]
    for broker_id in (1, 2):
        wait_for(
            lambda b=broker_id: _replica_dirs(cluster.brokers[b].data_dir, "gone") == [],
            30,
            f"broker {broker_id}'s replicas deleted",
        )

    down.start()
    wait_for(lambda: _replica_dirs(down.data_dir, "gone") == [], 30, "broker 3's replicas deleted")
    wait_for(lambda: cluster.zk.get_topic_assignment("gone") is None, 30, "deletion completed")
    assert "gone" not in cluster.metadata(3).topics

    # Created again: a new topic id, nothing of the old data, replicas on broker 3 too.
    cluster.create_topic("gone", 2)
    assert cluster.zk.get_topic_assignment("gone")[0].topic_id != old_id
    _produce(cluster.bootstrap(), "gone", [b"new"])
    assert _read(cluster.bootstrap(), "gone", 1) == [b"new"]
    wait_for(lambda: _replica_dirs(down.data_dir, "gone") == ["gone-0", "gone-1"], 30, "new dirs")
