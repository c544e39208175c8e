"""Reaching ZooKeeper from a command (``--zookeeper HOST:PORT[/CHROOT]``), with a one-line
error instead of kazoo's exception when it cannot be reached."""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.cli.errors import CliError

if TYPE_CHECKING:
    from odradek.cluster.zk.client import ZkClient

ZK_TIMEOUT_MS = 10000


def connect_zookeeper(connect: str) -> ZkClient:
    """A connected client; the caller closes it."""
    from odradek.cluster.zk.client import ZkClient
    from odradek.cluster.zk.errors import ZooKeeperError

    try:
        return ZkClient.connect(
            connect, session_timeout_ms=ZK_TIMEOUT_MS, connection_timeout_ms=ZK_TIMEOUT_MS
        )
    except (ZooKeeperError, ValueError) as exc:
        raise CliError(f"cannot reach ZooKeeper at {connect}: {exc}") from None
