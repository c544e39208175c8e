"""Real-ZooKeeper fixtures for brokers in cluster mode."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.cluster import BrokerCluster
from tests.helpers.zookeeper import zk_connect, zookeeper_server

__all__ = ["cluster_factory", "zk_connect", "zookeeper_server"]


@pytest.fixture
def cluster_factory(tmp_path: Path, zk_connect: str) -> Iterator[Callable[..., BrokerCluster]]:
    """Start a cluster of N brokers (ids 1..N) on this test's ZooKeeper chroot, with
    extra broker configs; every cluster started is stopped at the end of the test."""
    started: list[BrokerCluster] = []

    def start(size: int = 3, **overrides: str) -> BrokerCluster:
        cluster = BrokerCluster(tmp_path, zk_connect, size, overrides)
        started.append(cluster)
        return cluster.start()

    yield start
    for cluster in started:
        cluster.close()
