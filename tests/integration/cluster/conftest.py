"""Real-ZooKeeper fixtures for brokers in cluster mode."""

from tests.helpers.zookeeper import zk_connect, zookeeper_server

__all__ = ["zk_connect", "zookeeper_server"]
