"""Followers fetch through incremental fetch sessions (KIP-227), and replication still
copies every record: three real brokers over a real ZooKeeper, with metrics on."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers.broker import free_port
from tests.helpers.cluster import BrokerCluster, wait_for
from tests.helpers.metrics import scrape

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(240)]

REQUESTS = "odradek_fetch_session_requests_total"
PARTITIONS = 12


def _sum(ports: dict[int, int], name: str, **labels: str) -> float:
    return sum(scrape(port, timeout=5).value(name, **labels) for port in ports.values())


def test_followers_replicate_through_sessions(tmp_path: Path, zk_connect: str) -> None:
    cluster = BrokerCluster(tmp_path, zk_connect, 3, {"min.insync.replicas": "3"})
    ports = {broker_id: free_port() for broker_id in cluster.brokers}
    for broker_id, broker in cluster.brokers.items():
        broker.overrides["metrics.port"] = str(ports[broker_id])
    try:
        cluster.start()
        cluster.create_topic("replicated", PARTITIONS, 3)
        # acks=all with min.insync.replicas=3: every write waits for both followers.
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
        for round_ in range(3):
            for p in range(PARTITIONS):
                producer.produce("replicated", b"r%d-%d" % (round_, p), partition=p)
            assert producer.flush(60) == 0
        # The followers' sessions: cached on the leaders, used incrementally, no errors.
        wait_for(
            lambda: _sum(ports, REQUESTS, context="incremental") > 10,
            60,
            "incremental follower fetches",
        )
        assert _sum(ports, "kafka_server_fetchsessioncache_numincrementalfetchsessions") >= 2
        cached = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
        # Each partition has two followers, each in one session on its leader.
        assert _sum(ports, cached) == 2 * PARTITIONS
        assert _sum(ports, REQUESTS, context="error") == 0
        urp = "kafka_server_replicamanager_underreplicatedpartitions"
        assert sum(scrape(port).value(urp) for port in ports.values()) == 0

        # The ISR stayed whole through it all, and a consumer reads every record.
        consumer = Consumer(
            {"bootstrap.servers": cluster.bootstrap(), "group.id": "x", "enable.auto.commit": False}
        )
        consumer.assign([TopicPartition("replicated", p, 0) for p in range(PARTITIONS)])
        got = 0
        for _ in range(60):
            got += sum(1 for m in consumer.consume(100, 0.5) if m.error() is None)
            if got >= 3 * PARTITIONS:
                break
        consumer.close()
        assert got == 3 * PARTITIONS
    finally:
        cluster.close()
