"""Cluster metrics on three real brokers over a real ZooKeeper: exactly one active
controller across the cluster, and under-replicated partitions (and ISR shrinks and
expansions) when a follower stops and comes back."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

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
