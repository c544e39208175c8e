"""The leader of an RF 3 topic is also the controller, and it is SIGKILLed.

What Kafka's ZooKeeper controller does on failover (KafkaController.onControllerFailover,
then ZkPartitionStateMachine.startup): the new controller reads the live brokers and every
partition's state znode; a partition whose leader is not alive is OfflinePartition, and
triggerOnlinePartitionStateChange elects it a leader from the live members of its ISR
(leader epoch + 1, the ISR cut to the live ones). A partition with no live ISR member and
unclean election off stays offline: its znode keeps naming the dead leader, and Metadata
answers LEADER_NOT_AVAILABLE with leader -1 on every broker, also once a replica outside
the ISR comes back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.helpers.cluster import SESSION_TIMEOUT_MS, BrokerCluster, wait_for
from tests.helpers.raw import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(240)]

CREATE_TOPICS, METADATA = 19, 3
FAILOVER_S = SESSION_TIMEOUT_MS / 1000 + 40  # session expiry and election on a loaded CI
LED, STRANDED = "led-by-controller", "stranded"


def create(cluster: BrokerCluster, via: int, topic: str, replicas: list[int]) -> None:
    raw = RawClient(cluster.brokers[via].port)
    try:
        response: Any = raw.call(
            CREATE_TOPICS,
            5,
            {
                "topics": [
                    {
                        "name": topic,
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": replicas}],
                        "configs": [],
                    }
                ],
                "timeout": 15000,
                "validate_only": False,
            },
        )
    finally:
        raw.sock.close()
    assert response.topics[0].error_code == ErrorCode.none, response


def partition_metadata(cluster: BrokerCluster, via: int, topic: str) -> tuple[int, int, int]:
    """(error code, leader id, leader epoch) of partition 0 as broker ``via`` answers."""
    raw = RawClient(cluster.brokers[via].port)
    try:
        response: Any = raw.call(
            METADATA,
            9,
            {
                "topics": [{"name": topic}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
    finally:
        raw.sock.close()
    [answer] = response.topics
    [p] = answer.partitions
    return int(p.error_code), int(p.leader_id), int(p.leader_epoch)


def znode(cluster: BrokerCluster, topic: str) -> Any:
    found = cluster.zk.get_partition_state(topic, 0)
    assert found is not None
    return found[0]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_the_controller_leading_a_partition_dies(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(3, **{"unclean.leader.election.enable": "false"})
    controller = cluster.controller_id()
    assert controller is not None
    follower, survivor = (b for b in sorted(cluster.brokers) if b != controller)
    # The controller leads both; STRANDED has one other replica, which dies first.
    create(cluster, controller, LED, [controller, follower, survivor])
    create(cluster, controller, STRANDED, [controller, follower])
    for topic in (LED, STRANDED):
        wait_for(
            lambda t=topic: all(
                partition_metadata(cluster, b, t)[:2] == (0, controller) for b in cluster.brokers
            ),
            30,
            f"{topic} led by the controller on every broker",
        )
    produce(cluster.bootstrap(), LED, [b"1", b"2", b"3"])
    produce(cluster.bootstrap(), STRANDED, [b"s"])
    before = znode(cluster, LED)
    assert before.leader == controller and sorted(before.isr) == sorted(cluster.brokers)

    # The follower dies first: the (still living) controller takes it out of the ISRs.
    cluster.brokers[follower].kill()
    wait_for(lambda: znode(cluster, STRANDED).isr == (controller,), FAILOVER_S, "ISR [controller]")

    cluster.brokers[controller].kill()
    wait_for(lambda: cluster.controller_id() == survivor, FAILOVER_S, "the new controller")

    # LED: offline on failover, then a leader from the live ISR, leader epoch + 1.
    after = wait_for(
        lambda: (s := znode(cluster, LED)).leader == survivor and s, FAILOVER_S, "LED's election"
    )
    assert after.leader_epoch > before.leader_epoch
    assert after.isr == (survivor,)
    assert wait_for(
        lambda: partition_metadata(cluster, survivor, LED)[:2] == (0, survivor), 30, "metadata"
    )
    assert consume(cluster.bootstrap(survivor), LED, 3) == [b"1", b"2", b"3"]
    produce(cluster.bootstrap(survivor), LED, [b"4"])

    # STRANDED: no live ISR member and unclean election off: it stays offline. The znode
    # still names the dead leader (Kafka leaves it so); Metadata says LEADER_NOT_AVAILABLE.
    stranded = znode(cluster, STRANDED)
    assert (stranded.leader, stranded.isr) == (controller, (controller,))
    assert wait_for(
        lambda: partition_metadata(cluster, survivor, STRANDED)[:2]
        == (ErrorCode.leader_not_available, -1),
        30,
        "LEADER_NOT_AVAILABLE",
    )

    # The other replica comes back, out of the ISR: still no leader for STRANDED (unclean
    # election is off), while it rejoins LED's ISR.
    cluster.brokers[follower].start()
    wait_for(
        lambda: sorted(znode(cluster, LED).isr) == sorted([survivor, follower]),
        FAILOVER_S,
        "the restarted follower back in LED's ISR",
    )
    for broker in (survivor, follower):
        error, leader, _epoch = partition_metadata(cluster, broker, STRANDED)
        assert (error, leader) == (ErrorCode.leader_not_available, -1), broker
    assert znode(cluster, STRANDED).leader == controller
