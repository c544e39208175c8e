"""Cluster mode: how a broker joins a ZooKeeper-coordinated cluster.

Cluster mode is on when ``zookeeper.connect`` is set; without it the broker is the
embedded single node and nothing here runs. Joining follows Kafka's KafkaServer.startup:

1. connect (``zookeeper.session.timeout.ms``, ``zookeeper.connection.timeout.ms``) and
   create the persistent top-level paths;
2. get or create ``/cluster/id`` and check it against ``meta.properties``: a log dir
   that belongs to another cluster refuses to start (InconsistentClusterIdException);
3. settle the broker id: the configured one, or with ``broker.id=-1`` and
   ``broker.id.generation.enable`` the one ``meta.properties`` kept, else a fresh one from
   ``/brokers/seqid`` (kept in ``meta.properties`` for the next start);
4. once the listener is bound, register the ephemeral ``/brokers/ids/<id>`` (endpoints,
   ``broker.rack``), and register again whenever ZooKeeper gives a new session after
   the old one expired.

Every failure a user can cause becomes :class:`ClusterModeError` with one line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from odradek.broker.config import BrokerConfig
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import BrokerEndpoint, BrokerRegistration
from odradek.cluster.zk.errors import BrokerIdAlreadyRegistered, ZooKeeperError
from odradek.storage import meta_properties

log = logging.getLogger(__name__)

LISTENER = "PLAINTEXT"  # the one listener odradek serves today


class ClusterModeError(Exception):
    """Joining the cluster failed for a reason the user must fix (one line)."""


@dataclass
class ClusterMembership:
    """This broker's place in the cluster: its session, id and registration."""

    zk: ZkClient
    broker_id: int
    cluster_id: str
    rack: str | None
    broker_epoch: int = -1
    registration: BrokerRegistration | None = None

    # --- joining --------------------------------------------------------------------

    @classmethod
    def join(cls, config: BrokerConfig, data_dir: Path) -> ClusterMembership:
        """Steps 1-3 of the module docstring (blocking: run it in a thread)."""
        connect = config.zookeeper_connect
        session_ms = config.get("zookeeper.session.timeout.ms")
        connection_ms = config.get("zookeeper.connection.timeout.ms") or session_ms
        try:
            zk = ZkClient.connect(
                connect, session_timeout_ms=session_ms, connection_timeout_ms=connection_ms
            )
        except ZooKeeperError as exc:
            raise ClusterModeError(
                f"cannot reach ZooKeeper at {connect} within "
                f"zookeeper.connection.timeout.ms={connection_ms}: {exc}"
            ) from None
        try:
            zk.create_top_level_paths()
            cluster_id = zk.get_or_create_cluster_id()
            broker_id = _settle_broker_id(config, data_dir, zk)
            meta_properties.check_and_write(data_dir, broker_id, cluster_id)
        except (ZooKeeperError, meta_properties.MetaPropertiesError, ClusterModeError) as exc:
            zk.close()
            raise ClusterModeError(str(exc)) from None
        except BaseException:
            zk.close()
            raise
        log.info("joined cluster %s as broker %d via %s", cluster_id, broker_id, connect)
        rack = config.get("broker.rack") or None
        return cls(zk, broker_id, cluster_id, rack)

    def register(self, host: str, port: int) -> int:
        """Create ``/brokers/ids/<id>`` for the bound listener; re-register on every new
        session after an expiry. Returns the broker epoch (blocking)."""
        self.registration = BrokerRegistration(
            self.broker_id,
            (BrokerEndpoint(LISTENER, host, port, LISTENER),),
            rack=self.rack,
            timestamp_ms=int(time.time() * 1000),
        )
        self.broker_epoch = self._register()
        self.zk.on_new_session(self._register_again)
        return self.broker_epoch

    def _register(self) -> int:
        assert self.registration is not None
        try:
            return self.zk.register_broker(self.registration)
        except BrokerIdAlreadyRegistered as exc:
            raise ClusterModeError(str(exc)) from None
        except ZooKeeperError as exc:
            raise ClusterModeError(f"registering broker {self.broker_id} failed: {exc}") from None

    def _register_again(self) -> None:
        # Runs on a kazoo worker thread after the session expired and a new one connected:
        # the ephemeral registration went with the old session (Kafka's
        # SessionExpirationListener re-registers the same way).
        try:
            self.broker_epoch = self._register()
            log.info("re-registered broker %d, broker epoch %d", self.broker_id, self.broker_epoch)
        except ClusterModeError as exc:
            log.error("re-registering after session expiry failed: %s", exc)

    def close(self) -> None:
        """End the session: ZooKeeper drops the registration at once."""
        self.zk.close()


def _settle_broker_id(config: BrokerConfig, data_dir: Path, zk: ZkClient) -> int:
    """Kafka's getOrGenerateBrokerId."""
    configured = config.broker_id
    generation = config.get("broker.id.generation.enable")
    reserved = config.get("reserved.broker.max.id")
    if generation and configured > reserved:
        raise ClusterModeError(
            f"broker.id {configured}: must not be greater than reserved.broker.max.id "
            f"({reserved}) while broker.id.generation.enable is true"
        )
    stored = meta_properties.read(data_dir)
    if configured >= 0:
        return configured  # a mismatch with meta.properties is refused by check_and_write
    if stored is not None:
        return stored.broker_id
    generated = zk.generate_broker_id(reserved)
    log.info("generated broker.id %d", generated)
    return generated


async def join(config: BrokerConfig, data_dir: Path) -> ClusterMembership | None:
    """None for the embedded single broker; the membership in cluster mode."""
    if not config.zookeeper_connect:
        return None
    return await asyncio.to_thread(ClusterMembership.join, config, data_dir)
