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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from odradek.broker.config import BrokerConfig
from odradek.broker.config_changes import ClusterConfigs
from odradek.broker.controlled_shutdown import bound_s as controlled_shutdown_bound_s
from odradek.broker.controlled_shutdown import controlled_shutdown
from odradek.broker.handlers.cluster_configs import ClusterConfigHandlers
from odradek.broker.handlers.cluster_topics import ClusterTopicHandlers
from odradek.broker.handlers.elect_leaders import ElectLeadersHandler
from odradek.broker.handlers.interbroker import InterBrokerHandlers, LeadershipChange
from odradek.broker.handlers.reassignments import ReassignmentHandlers
from odradek.broker.internal_topics import InternalTopicCoordinators
from odradek.broker.isr_writer import IsrWriter
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.partition import ReplicaStates
from odradek.broker.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.replica_selector import make_selector
from odradek.broker.replication_quota import ReplicationQuotas
from odradek.cluster.controller import Controller
from odradek.cluster.peer import Connector, open_plaintext
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import BrokerEndpoint, BrokerRegistration
from odradek.cluster.zk.errors import BrokerIdAlreadyRegistered, ZooKeeperError
from odradek.protocol.versions import SUPPORTED
from odradek.storage import meta_properties
from odradek.storage.config import LogConfig

log = logging.getLogger(__name__)


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

    def register(self, endpoints: Sequence[tuple[str, str, int, str]]) -> int:
        """Create ``/brokers/ids/<id>`` naming every bound listener (``(name, host, port,
        security protocol)``, as advertised); re-register on every new session after an
        expiry. Returns the broker epoch (blocking)."""
        self.registration = BrokerRegistration(
            self.broker_id,
            tuple(
                BrokerEndpoint(name, host, port, protocol)
                for name, host, port, protocol in endpoints
            ),
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


# partition, leader epoch
PartitionCallback = Callable[[int, int], None]


@dataclass
class InternalTopicLeadership:
    """Coordinators that live where an internal topic's partitions are led (the group
    coordinator over ``__consumer_offsets``; the transaction coordinator over
    ``__transaction_state`` the same way) register here: ``on_elected(partition,
    leader_epoch)`` when LeaderAndIsr makes this broker the partition's leader,
    ``on_resigned(partition, leader_epoch)`` when it makes it a follower or StopReplica
    stops it (Kafka's onElection / onResignation)."""

    _callbacks: dict[str, list[tuple[PartitionCallback, PartitionCallback]]] = field(
        default_factory=dict
    )

    def register(
        self, topic: str, on_elected: PartitionCallback, on_resigned: PartitionCallback
    ) -> None:
        self._callbacks.setdefault(topic, []).append((on_elected, on_resigned))

    def __call__(self, elected: list[LeadershipChange], resigned: list[LeadershipChange]) -> None:
        # Resignations first: a batch never names a partition twice, but a coordinator
        # that frees state before taking more keeps its memory bounded.
        for topic, partition, epoch in resigned:
            for _elect, resign in self._callbacks.get(topic, ()):
                _call(resign, topic, partition, epoch)
        for topic, partition, epoch in elected:
            for elect, _resign in self._callbacks.get(topic, ()):
                _call(elect, topic, partition, epoch)


def _call(callback: PartitionCallback, topic: str, partition: int, epoch: int) -> None:
    # One coordinator's bug must not keep the others from following leadership.
    try:
        callback(partition, epoch)
    except Exception:
        log.exception("coordinator callback for %s-%d failed", topic, partition)


@dataclass
class ClusterParts:
    """What cluster mode adds to a running broker (the replication phase extends it)."""

    metadata_cache: MetadataCache
    replica_states: ReplicaStates
    interbroker: InterBrokerHandlers
    topics: ClusterTopicHandlers
    fetchers: ReplicaFetcherManager
    elections: ElectLeadersHandler
    configs: ClusterConfigHandlers
    internal_leadership: InternalTopicLeadership = field(default_factory=InternalTopicLeadership)
    coordinators: InternalTopicCoordinators | None = None
    reassignments: ReassignmentHandlers = field(default_factory=ReassignmentHandlers)
    # broker id -> (host, port) of its inter-broker listener, to reach it from another
    # broker (replica fetchers and the transaction marker channel); None while the cache
    # does not know it.
    address_of: Callable[[int], tuple[str, int] | None] = lambda _broker: None
    # Opens a connection to another broker secured as the inter-broker listener demands.
    connector: Connector = open_plaintext

    def handlers(self) -> dict[int, Callable[[Any, Any], Awaitable[Any]]]:
        """API key -> handler(ctx, request): Metadata, DescribeCluster, CreateTopics and
        DeleteTopics from the cache and ZooKeeper, plus LeaderAndIsr, StopReplica,
        UpdateMetadata and ControlledShutdown once the protocol layer knows their
        versions (an API key without versions cannot be decoded, so it is left out)."""
        table: dict[int, Callable[[Any, Any], Awaitable[Any]]] = dict(self.topics.handlers())
        table.update(self.elections.handlers())
        table.update(self.reassignments.handlers())
        table.update(self.configs.handlers())
        for api_key, handler in self.interbroker.handlers().items():
            if api_key in SUPPORTED:
                table[api_key] = handler
        return table


def install(
    membership: ClusterMembership,
    config: BrokerConfig,
    replica_manager: ReplicaManager,
    topic_log_config: Callable[[Mapping[str, str]], LogConfig],
) -> ClusterParts:
    """Build the cluster-mode parts over the broker's replica manager."""
    cache = MetadataCache(membership.broker_id)
    states = ReplicaStates()
    # A partition the cluster knows but this broker does not host: NOT_LEADER_OR_FOLLOWER.
    replica_manager.known_in_cluster = cache.contains
    # Fetch from follower (KIP-392): racks as UpdateMetadata lists them.
    replica_manager.replica_selector = make_selector(config.get("replica.selector.class"))
    replica_manager.broker_rack = lambda b: (live.rack if (live := cache.broker(b)) else None)
    replica_manager.broker_alive = lambda b: cache.broker(b) is not None

    # Topic and dynamic broker configs live in ZooKeeper (applied on change notifications).
    configs = ClusterConfigs(membership.broker_id, membership.zk, config, replica_manager)

    interbroker = InterBrokerHandlers(
        membership.broker_id,
        replica_manager=replica_manager,
        metadata_cache=cache,
        replica_states=states,
        log_config=configs.topic_log_config,
        broker_epoch=lambda: membership.broker_epoch,
    )

    inter_broker = config.inter_broker
    listener = inter_broker.listener if inter_broker is not None else "PLAINTEXT"
    connector = inter_broker.connect if inter_broker is not None else open_plaintext

    def address_of(broker: int) -> tuple[str, int] | None:
        live = cache.broker(broker)
        return live.endpoint(listener) if live is not None else None

    fetchers = ReplicaFetcherManager(
        membership.broker_id,
        replica_manager,
        address_of,
        FetcherSettings.from_config(config.get),
        connector,
    )
    interbroker.fetchers = fetchers
    # Replication throttles: rates from dynamic broker configs, replicas from topic configs.
    quotas = ReplicationQuotas(
        membership.broker_id,
        config.get("replication.quota.window.num"),
        config.get("replication.quota.window.size.seconds"),
    )
    replica_manager.leader_quota = quotas.leader
    fetchers.quota = quotas.follower

    def in_sync(topic: str, index: int) -> bool:
        info = cache.partition(topic, index)
        return info is not None and membership.broker_id in info.isr

    fetchers.in_sync = in_sync
    configs.on_broker_configs.append(quotas.apply_broker_configs)
    replica_manager.isr_writer = IsrWriter(membership.zk, states, replica_manager).request
    topics = ClusterTopicHandlers(
        membership.broker_id,
        membership.cluster_id,
        membership.zk,
        cache,
        config.get,
        topic_log_config,
    )
    leadership = InternalTopicLeadership()
    interbroker.leadership_listeners.append(leadership)
    coordinators = InternalTopicCoordinators(cache, topics.create_internal)
    return ClusterParts(
        cache,
        states,
        interbroker,
        topics,
        fetchers,
        ElectLeadersHandler(cache),
        ClusterConfigHandlers(configs),
        leadership,
        coordinators,
        address_of=address_of,  # by name: the reassignments field comes before it
        connector=connector,
    )


# The keys the controller reads, by Kafka's names (it takes a plain mapping so that it
# does not depend on the broker's config class).
_CONTROLLER_KEYS = (
    "unclean.leader.election.enable",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
    "leader.imbalance.per.broker.percentage",
    "delete.topic.enable",
    "controller.socket.timeout.ms",
)


async def start_controller(
    membership: ClusterMembership, config: BrokerConfig, parts: ClusterParts
) -> Controller:
    """Every broker of a ZooKeeper cluster runs a controller that takes part in the
    election; the elected one drives the cluster (Kafka's KafkaController). The broker's
    ControlledShutdown and ElectLeaders handlers forward to it. The config change
    listener starts here too (once the broker is registered)."""
    parts.configs.configs.start()
    settings: dict[str, Any] = {key: config.get(key) for key in _CONTROLLER_KEYS}
    if config.inter_broker is not None:  # always in a cluster (checked at start-up)
        settings["inter.broker.listener.name"] = config.inter_broker.listener
    controller = Controller(membership.zk, membership.broker_id, settings, parts.connector)

    async def forward(broker_id: int, broker_epoch: int) -> tuple[int, list[tuple[str, int]]]:
        result = await controller.controlled_shutdown(broker_id, broker_epoch)
        return int(result.error_code), list(result.remaining)

    parts.interbroker.controlled_shutdown_hook = forward

    async def elect(
        partitions: set[tuple[str, int]], election_type: int
    ) -> dict[tuple[str, int], tuple[int, str | None, int | None]]:
        results = await controller.elect_leaders(partitions, election_type)
        return {tp: (int(r.error_code), r.message, r.leader) for tp, r in results.items()}

    parts.elections.hook = elect
    parts.reassignments.alter_hook = partial(_alter_reassignments, controller)
    parts.reassignments.list_hook = partial(_list_reassignments, controller)
    await controller.start()
    return controller


async def _alter_reassignments(
    controller: Controller, targets: dict[tuple[str, int], tuple[int, ...] | None]
) -> dict[tuple[str, int], tuple[int, str | None]] | int:
    results = await controller.alter_partition_reassignments(targets)
    if isinstance(results, int):  # a top-level ErrorCode
        return int(results)
    return {tp: (int(r.error_code), r.message) for tp, r in results.items()}


async def _list_reassignments(
    controller: Controller, partitions: set[tuple[str, int]] | None
) -> dict[tuple[str, int], tuple[tuple[int, ...], ...]] | int:
    found = await controller.list_partition_reassignments(partitions)
    if isinstance(found, int):
        return int(found)
    return {tp: (a.replicas, a.adding, a.removing) for tp, a in found.items()}


def leave_cluster_timeout_s(config: BrokerConfig) -> float:
    """How long :func:`leave_cluster` may take: a controlled shutdown whose every attempt
    times out (Kafka's bound), then the controller's resignation, one ZooKeeper call of at
    most ``zookeeper.connection.timeout.ms``, and a little slack for a loaded machine."""
    shutdown = 0.0
    if config.get("controlled.shutdown.enable"):
        shutdown = controlled_shutdown_bound_s(
            config.get("controlled.shutdown.max.retries"),
            config.get("controlled.shutdown.retry.backoff.ms") / 1000,
            config.get("controller.socket.timeout.ms") / 1000,
        )
    zk_ms = config.get("zookeeper.connection.timeout.ms") or config.get(
        "zookeeper.session.timeout.ms"
    )
    return shutdown + zk_ms / 1000 + 5.0


async def leave_cluster(
    membership: ClusterMembership,
    config: BrokerConfig,
    parts: ClusterParts | None,
    controller: Controller | None,
) -> None:
    """Controlled shutdown first (leadership moves while this broker still serves),
    then stop the controller (it resigns if active)."""
    # No step of a shutdown waits for ZooKeeper to come back (Kafka's controller thread
    # would): a call made while it is out of reach fails at once from now on.
    membership.zk.interrupt()
    if not membership.zk.connected:
        # The controller cannot move leadership for a broker whose session it cannot see
        # end or change: the session's expiry will do it.
        log.warning("not connected to ZooKeeper: stopping without a controlled shutdown")
    elif parts and config.get("controlled.shutdown.enable") and membership.broker_epoch >= 0:
        # Stop following first, for good: the controller answers by making this broker a
        # follower of the partitions it led, and a fetch that caught up afterwards would
        # let their new leader put a broker that is leaving back into the ISR (the race
        # KIP-841 closes on the controller's side; here the leaving broker ends it).
        await parts.fetchers.close()
        await controlled_shutdown(
            parts.metadata_cache,
            parts.address_of,
            parts.connector,
            membership.broker_id,
            membership.broker_epoch,
            max_retries=config.get("controlled.shutdown.max.retries"),
            backoff_s=config.get("controlled.shutdown.retry.backoff.ms") / 1000,
            request_timeout_s=config.get("controller.socket.timeout.ms") / 1000,
        )
    if parts is not None:
        parts.configs.configs.stop()
    if controller is not None:
        await controller.stop()
