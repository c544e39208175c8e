"""Typed failures of the ZooKeeper layer, named after the Kafka exceptions they stand for."""

from __future__ import annotations

from odradek.cluster.zk.codecs import ZNodeDecodeError

__all__ = [
    "BrokerIdAlreadyRegistered",
    "ControllerMoved",
    "NoNode",
    "NodeExists",
    "StaleVersion",
    "ZNodeDecodeError",
    "ZooKeeperClientTimeout",
    "ZooKeeperError",
]


class ZooKeeperError(Exception):
    """Base of every failure this layer raises on purpose."""


class ZooKeeperClientTimeout(ZooKeeperError):
    """No connection within ``zookeeper.connection.timeout.ms`` (Kafka's
    ZooKeeperClientTimeoutException)."""


class BrokerIdAlreadyRegistered(ZooKeeperError):
    """``/brokers/ids/<id>`` is held by another live session: two brokers share a broker.id."""

    def __init__(self, broker_id: int, owner_session: int) -> None:
        super().__init__(
            f"NodeExistsException: broker.id {broker_id} already registered at "
            f"/brokers/ids/{broker_id} by ZooKeeper session 0x{owner_session:x}; "
            "another broker is running with the same broker.id"
        )
        self.broker_id = broker_id
        self.owner_session = owner_session


class StaleVersion(ZooKeeperError):
    """A compare-and-set found the znode at another version than expected (BADVERSION):
    someone else changed it since it was read."""

    def __init__(self, path: str, expected_version: int) -> None:
        super().__init__(f"{path} is no longer at version {expected_version}")
        self.path = path
        self.expected_version = expected_version


class ControllerMoved(ZooKeeperError):
    """The controller epoch check failed or another broker holds ``/controller``
    (Kafka's ControllerMovedException): this broker must not act as controller."""


class NodeExists(ZooKeeperError):
    """A znode that must be new already exists (a topic that exists, a partition state
    created twice)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} already exists")
        self.path = path


class NoNode(ZooKeeperError):
    """A znode that must exist does not."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} does not exist")
        self.path = path
