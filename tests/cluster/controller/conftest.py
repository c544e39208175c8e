"""Real-ZooKeeper fixtures for the controller's tests."""

from tests.helpers.zookeeper import zk_connect, zookeeper_server

__all__ = ["zk_connect", "zookeeper_server"]
