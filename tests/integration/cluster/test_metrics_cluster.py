"""Cluster metrics on three real brokers over a real ZooKeeper: exactly one active
controller across the cluster, and under-replicated partitions (and ISR shrinks and
expansions) when a follower stops and comes back; consumer lag exported once per group,
by its coordinator, following the coordinator when it moves."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers.broker import free_port
from tests.helpers.cluster import BrokerCluster, wait_for
from tests.helpers.metrics import scrape

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(240)]


def _sum(ports: dict[int, int], name: str, brokers: list[int]) -> float:
    return sum(scrape(ports[b], timeout=5).value(name) for b in brokers)


def test_one_active_controller_and_under_replicated_partitions(
    tmp_path: Path, zk_connect: str
) -> None:
    cluster = BrokerCluster(
        tmp_path,
        zk_connect,
        3,
        {
            # A stopped follower leaves the ISR (by its leader) long before its ZooKeeper
            # session ends.
            "replica.lag.time.max.ms": "3000",
            "zookeeper.session.timeout.ms": "20000",
        },
    )
    ports = {broker_id: free_port() for broker_id in cluster.brokers}
    for broker_id, broker in cluster.brokers.items():
        broker.overrides["metrics.port"] = str(ports[broker_id])
    try:
        cluster.start()
        every = sorted(cluster.brokers)
        active = "kafka_controller_kafkacontroller_activecontrollercount"
        wait_for(lambda: _sum(ports, active, every) == 1, 30, "one active controller")
        controller = cluster.controller_id()
        assert scrape(ports[controller]).value(active) == 1

        cluster.create_topic("watched", 3, 3)
        urp = "kafka_server_replicamanager_underreplicatedpartitions"
        wait_for(lambda: _sum(ports, urp, every) == 0, 60, "every ISR complete")
        # Three partitions, three replicas each, one leader each (no other topic yet).
        assert _sum(ports, "kafka_server_replicamanager_partitioncount", every) == 9
        assert _sum(ports, "kafka_server_replicamanager_leadercount", every) == 3
        leaders = [cluster.leaders("watched", controller)[p] for p in range(3)]

        # Stop a broker that is not the controller and leads none of the partitions if
        # possible, so the others lead everything and notice it fall behind.
        candidates = [b for b in every if b != controller]
        stopped = next((b for b in candidates if b not in leaders), candidates[0])
        live = [b for b in every if b != stopped]
        shrinks_before = _sum(ports, "kafka_server_replicamanager_isrshrinks_total", live)
        process = cluster.brokers[stopped].proc
        assert process is not None
        os.kill(process.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: _sum(ports, urp, live) >= 1, 60, "under-replicated partitions")
            assert _sum(ports, "kafka_server_replicamanager_isrshrinks_total", live) > (
                shrinks_before
            )
            assert _sum(ports, active, live) == 1
        finally:
            os.kill(process.pid, signal.SIGCONT)
        expands = "kafka_server_replicamanager_isrexpands_total"
        wait_for(lambda: _sum(ports, urp, every) == 0, 90, "the ISR complete again")
        assert _sum(ports, expands, every) >= 1
        assert _sum(ports, active, every) == 1
        assert _sum(ports, "kafka_controller_kafkacontroller_offlinepartitionscount", every) == 0
    finally:
        cluster.close()


def _lag_by_broker(ports: dict[int, int], group: str) -> dict[int, dict[int, float]]:
    """broker -> {partition: lag} of ``group``, for the brokers exporting any of its lag."""
    found: dict[int, dict[int, float]] = {}
    for broker, port in ports.items():
        series = scrape(port, timeout=10).series("kafka_consumergroup_lag")
        mine = {int(labels["partition"]): value for labels, value in series
                if labels["consumergroup"] == group}  # fmt: skip
        if mine:
            found[broker] = mine
    return found


def _wait_lag(
    ports: dict[int, int], group: str, expected: dict[int, dict[int, float]], timeout: float
) -> None:
    """Until exactly ``expected`` (broker -> {partition: lag}) is exported for ``group``."""
    deadline = time.monotonic() + timeout
    seen: object = None
    while time.monotonic() < deadline:
        try:
            seen = _lag_by_broker(ports, group)
        except OSError as exc:  # a broker busy taking over
            seen = exc
        if seen == expected:
            return
        time.sleep(0.5)
    raise AssertionError(f"lag of {group}: expected {expected}, last seen {seen!r}")


def _coordinator(cluster: BrokerCluster, group: str) -> int:
    admin = cluster.admin()
    description = admin.describe_consumer_groups([group])[group].result(30)
    return int(description.coordinator.id)


def test_group_lag_is_exported_once_by_its_coordinator(tmp_path: Path, zk_connect: str) -> None:
    cluster = BrokerCluster(
        tmp_path,
        zk_connect,
        3,
        {"offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3"},
    )
    ports = {broker_id: free_port() for broker_id in cluster.brokers}
    for broker_id, broker in cluster.brokers.items():
        broker.overrides["metrics.port"] = str(ports[broker_id])
    try:
        cluster.start()
        # Three partitions led by the three brokers (placement spreads leaders), so the
        # coordinator leads at most one: the others' high watermarks come from their leaders.
        cluster.create_topic("lagged", 3, 3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
        for partition in range(3):
            for i in range(10):
                producer.produce("lagged", b"v%d" % i, partition=partition)
        assert producer.flush(30) == 0
        group = "lag-watchers"
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group})
        committed = {0: 2, 1: 5, 2: 10}
        consumer.commit(
            offsets=[TopicPartition("lagged", p, o) for p, o in committed.items()],
            asynchronous=False,
        )
        consumer.close()
        expected = {p: 10.0 - o for p, o in committed.items()}
        coordinator = _coordinator(cluster, group)
        _wait_lag(ports, group, {coordinator: expected}, 30)
        current = scrape(ports[coordinator]).value(
            "kafka_consumergroup_current_offset", consumergroup=group, topic="lagged",
            partition="1",
        )  # fmt: skip
        assert current == 5

        # The coordinator stops: the group moves with its __consumer_offsets partition's
        # leadership, and so does its lag (now read partly from new partition leaders).
        cluster.brokers[coordinator].stop()
        live = {b: p for b, p in ports.items() if b != coordinator}
        moved = wait_for(lambda: _coordinator(cluster, group), 60, "a new coordinator")
        assert moved != coordinator
        _wait_lag(live, group, {moved: expected}, 60)
        # Records produced now show up as lag on the new coordinator at once.
        for _ in range(4):
            producer.produce("lagged", b"late", partition=2)
        assert producer.flush(30) == 0
        _wait_lag(live, group, {moved: {**expected, 2: 4.0}}, 30)
    finally:
        cluster.close()
