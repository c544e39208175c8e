"""DeleteRecords in a three-broker cluster, as Kafka's ReplicaManager.deleteRecords: only
the leader deletes, and its answer waits until every live follower has moved its log
start offset too (the low watermark), or answers REQUEST_TIMED_OUT when one could not
within the request's timeout. Compacted topics refuse with POLICY_VIOLATION."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode

from tests.helpers.cluster import BrokerCluster, wait_for
from tests.helpers.raw import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(150)]

DELETE_RECORDS = 21
TOPIC = "dr"


def delete_records(
    cluster: BrokerCluster, broker_id: int, topic: str, offset: int, timeout_ms: int
) -> tuple[int, int]:
    """(error code, low watermark) of partition 0, asked of broker ``broker_id``."""
    broker = cluster.brokers[broker_id]
    raw = RawClient(broker.port, broker.host)
    raw.sock.settimeout(timeout_ms / 1000 + 20)
    try:
        response: Any = raw.call(
            DELETE_RECORDS,
            2,
            {
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}
                ],
                "timeout": timeout_ms,
            },
        )
    finally:
        raw.sock.close()
    [result] = response.topics[0].partitions
    return int(result.error_code), int(result.low_watermark)


def test_the_leader_deletes_once_its_followers_have_moved_their_log_start(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(3)
    admin = cluster.admin()
    topics = [
        NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"}),
        NewTopic("compacted", 1, replica_assignment=[[1, 2, 3]],
                 config={"cleanup.policy": "compact"}),
    ]  # fmt: skip
    for future in admin.create_topics(topics, operation_timeout=20).values():
        future.result(30)
    wait_for(lambda: cluster.leaders(TOPIC, via=1) == {0: 1}, 30, "broker 1 to lead")
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    for i in range(10):
        producer.produce(TOPIC, f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    # A follower refuses: clients must find the leader.
    assert delete_records(cluster, 2, TOPIC, 4, 30_000) == (ErrorCode.not_leader_or_follower, -1)
    # The leader answers once both followers state the new log start in their fetches.
    assert delete_records(cluster, 1, TOPIC, 4, 30_000) == (ErrorCode.none, 4)

    # A follower that cannot fetch (paused, still alive to ZooKeeper) holds the low
    # watermark back: the leader moves its own start, then times out.
    paused = cluster.brokers[3]
    os.kill(paused.proc.pid, signal.SIGSTOP)
    try:
        assert delete_records(cluster, 1, TOPIC, 6, 1000) == (ErrorCode.request_timed_out, 4)
    finally:
        os.kill(paused.proc.pid, signal.SIGCONT)
    # Back, it catches up; asking again completes (the start is already there).
    assert delete_records(cluster, 1, TOPIC, 6, 30_000) == (ErrorCode.none, 6)
    assert delete_records(cluster, 1, TOPIC, 11, 30_000)[0] == ErrorCode.offset_out_of_range
    assert delete_records(cluster, 1, "compacted", 0, 30_000)[0] == ErrorCode.policy_violation
