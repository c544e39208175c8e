"""Offsets in a replicated ``__consumer_offsets`` (acks=all for the coordinator's appends).

A group commits through confluent-kafka, its coordinator is SIGKILLed as soon as the
commit returns, and the new coordinator serves the committed offset: it was on every ISR
member before the commit was answered. Then, with one of the two survivors paused, a
commit cannot reach ``min.insync.replicas`` and is answered COORDINATOR_NOT_AVAILABLE
(Kafka's mapping of NOT_ENOUGH_REPLICAS[_AFTER_APPEND] and REQUEST_TIMED_OUT), and the
offset it carried is not served.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.helpers.cluster import SESSION_TIMEOUT_MS, BrokerCluster, wait_for
from tests.helpers.raw import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
FAILOVER_S = SESSION_TIMEOUT_MS / 1000 + 40  # session expiry, election, load; loaded CI


def coordinator(cluster: BrokerCluster, group: str, via: int) -> int | None:
    raw = RawClient(cluster.brokers[via].port)
    try:
        answer: Any = raw.call(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
    finally:
        raw.sock.close()
    return int(answer.node_id) if answer.error_code == ErrorCode.none else None


def simple_commit(cluster: BrokerCluster, broker: int, group: str, topic: str, offset: int) -> int:
    """OffsetCommit v2 of a "simple" consumer (no member); the partition's error code."""
    raw = RawClient(cluster.brokers[broker].port)
    raw.sock.settimeout(60)  # the answer waits for the ISR up to offsets.commit.timeout.ms
    try:
        response: Any = raw.call(
            OFFSET_COMMIT,
            2,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "retention_time": -1,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": offset,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )
    finally:
        raw.sock.close()
    return int(response.topics[0].partitions[0].error_code)


def fetched(cluster: BrokerCluster, broker: int, group: str, topic: str) -> int:
    raw = RawClient(cluster.brokers[broker].port)
    try:
        response: Any = raw.call(
            OFFSET_FETCH,
            2,
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]},
        )
    finally:
        raw.sock.close()
    assert response.error_code == ErrorCode.none, response
    return int(response.topics[0].partitions[0].committed_offset)


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


def test_commits_are_on_the_isr_before_they_are_answered(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(
        3,
        **{
            "offsets.topic.replication.factor": "3",
            "offsets.topic.segment.bytes": "1048576",
            "min.insync.replicas": "2",
            "replica.lag.time.max.ms": "4000",
        },
    )
    group, topic = f"g-{uuid.uuid4().hex[:8]}", "replicated-commits"
    old = wait_for(lambda: coordinator(cluster, group, via=1), 60, "a coordinator")
    # The data lives on a broker that stays up, so only the coordinator moves.
    data_broker = next(b for b in cluster.brokers if b != old)
    raw = RawClient(cluster.brokers[data_broker].port)
    created: Any = raw.call(
        19,
        5,
        {
            "topics": [
                {
                    "name": topic,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [data_broker]}],
                    "configs": [{"name": "min.insync.replicas", "value": "1"}],
                }
            ],
            "timeout": 15000,
            "validate_only": False,
        },
    )
    raw.sock.close()
    assert created.topics[0].error_code == ErrorCode.none, created
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    for value in (b"a", b"b", b"c"):
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0

    c = consumer(cluster.bootstrap(), group)
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 3 and time.monotonic() < deadline:
            message = c.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value())
        assert got == [b"a", b"b", b"c"]
        [result] = c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        assert result.error is None
        cluster.brokers[old].kill()  # right after the commit was answered
    finally:
        c.close()

    survivors = cluster.live()
    new = wait_for(
        lambda: (n := coordinator(cluster, group, via=survivors[0])) not in (None, old) and n,
        FAILOVER_S,
        "a new coordinator",
    )
    reader = consumer(cluster.bootstrap(*survivors), group)
    try:
        [tp] = reader.committed([TopicPartition(topic, 0)], timeout=60)
        assert tp.offset == 3
    finally:
        reader.close()
    assert wait_for(lambda: fetched(cluster, new, group, topic) == 3, 60, "the offset")

    # min.insync.replicas=2 and one of the two survivors paused: a commit of another group
    # coordinated on a survivor cannot reach the ISR it needs.
    other_group = next(
        g
        for g in (f"h-{uuid.uuid4().hex[:8]}" for _ in range(200))
        if wait_for(lambda g=g: coordinator(cluster, g, via=new), 30, f"{g}'s coordinator") == new
    )
    paused = next(b for b in survivors if b != new)
    proc = cluster.brokers[paused].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        # Waits until the follower leaves the ISR (or offsets.commit.timeout.ms passes).
        unavailable = ErrorCode.coordinator_not_available
        assert simple_commit(cluster, new, other_group, topic, 2) == unavailable
        # Now below min.insync.replicas before the append: refused at once, same error.
        assert simple_commit(cluster, new, other_group, topic, 1) == unavailable
        assert fetched(cluster, new, other_group, topic) == -1  # neither commit applied
    finally:
        os.kill(proc.pid, signal.SIGCONT)
