"""Real-ZooKeeper fixtures for the ZooKeeper layer's tests."""

from tests.helpers.zookeeper import zk_connect, zookeeper_server

__all__ = ["zk_connect", "zookeeper_server"]
