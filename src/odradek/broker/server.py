"""KafkaServer: one broker process, assembled from its parts.

Start-up order matters and mirrors Kafka's: open the log manager (recovery happens
here, in a thread, before any request is served), load the metadata store and host every
partition assigned to this broker, then start the background jobs (flush, retention,
checkpoints, compaction) and finally the network listener. Shutdown runs it backwards:
stop accepting, finish the requests in flight, stop background jobs, flush and checkpoint
every log and write the clean-shutdown marker, so the next start reads no segment data.

Requests are dispatched by API key to the handler modules in
:mod:`odradek.broker.handlers`; every handler runs on the one event loop, and blocking
storage work (fsync, deletion, compaction) goes to a thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from odradek import timeouts
from odradek.broker import cluster_mode, dir_failure_halt, exit_watchdog, stack_dump
from odradek.broker.client_quotas import ClientQuotaManager, LocalQuotaStore
from odradek.broker.config import BrokerConfig, parse_ip_overrides
from odradek.broker.delayed_fetch import FetchWaiters
from odradek.broker.fetch_session import FetchManager, FetchSessionCache
from odradek.broker.group.config import GroupConfig
from odradek.broker.group.coordinator import GroupCoordinator
from odradek.broker.group.handlers import GroupHandlers
from odradek.broker.handlers import (
    acls,
    admin,
    client_quotas,
    configs,
    delete_records,
    fetch,
    leader_epoch,
    log_dirs,
    metadata,
    produce,
    scram_users,
)
from odradek.broker.handlers.produce_lane import ProduceLane
from odradek.broker.internal_topics import InternalTopicSpec
from odradek.broker.isr_writer import run_isr_expiration
from odradek.broker.listeners import Endpoint
from odradek.broker.metadata_answers import EncodedAnswers, TopicEntries
from odradek.broker.metrics import BrokerMetrics, BrokerStats, RequestObserver
from odradek.broker.network import NetworkServer
from odradek.broker.offsets_topic import OFFSETS_TOPIC, OffsetsTopic
from odradek.broker.producer_ids import ProducerIdManager, ProducerIds, ZkProducerIdManager
from odradek.broker.quotas import ConnectionQuotas, MemoryPool
from odradek.broker.replica_manager import ReadResult, ReplicaManager
from odradek.broker.request_quota import RequestQuota
from odradek.broker.requests import ChunkedResponse, RequestContext, current_listener
from odradek.broker.security.api_rules import RULES as ACL_RULES
from odradek.broker.security.authorizer import AclAuthorizer, authorizer_settings
from odradek.broker.security.enforcement import Enforcer
from odradek.broker.security.hooks import ListenerHooks
from odradek.broker.security.scram import ScramCredential
from odradek.broker.timing_wheel import Timer, TimerDriver
from odradek.broker.topics import TopicManager, broker_log_defaults
from odradek.broker.txn import handlers as txn_handlers
from odradek.broker.txn.service import TransactionService
from odradek.cluster.acl_store import LocalAclStore
from odradek.cluster.controller import Controller
from odradek.cluster.local_store import LocalMetadataStore
from odradek.cluster.metadata import BrokerInfo, MetadataStore
from odradek.protocol.fetch_encoder import encode_fetch_response
from odradek.protocol.versions import advertised
from odradek.storage import flush_stats, meta_properties
from odradek.storage.config import LogConfig
from odradek.storage.dir_lock import DirLock
from odradek.storage.log_cleaner import LogCleaner
from odradek.storage.log_manager import LogManager

log = logging.getLogger(__name__)

# How often an offline log directory is probed with a test write (log_dir_failure.py).
LOG_DIR_PROBE_INTERVAL_MS = 1000

Handler = Callable[["KafkaServer", RequestContext, Any], Awaitable[Any]]

# API key -> handler. An API absent here is absent from ApiVersions too.
HANDLERS: dict[int, Handler] = {
    0: produce.handle_produce,
    1: fetch.handle_fetch,
    2: fetch.handle_list_offsets,
    3: metadata.handle_metadata,
    18: metadata.handle_api_versions,
    19: admin.handle_create_topics,
    20: admin.handle_delete_topics,
    21: delete_records.handle_delete_records,
    23: leader_epoch.handle_offset_for_leader_epoch,
    32: configs.handle_describe_configs,
    33: configs.handle_alter_configs,
    35: log_dirs.handle_describe_log_dirs,
    37: admin.handle_create_partitions,
    44: configs.handle_incremental_alter_configs,
    60: metadata.handle_describe_cluster,
    17: scram_users.handle_sasl_handshake,
    36: scram_users.handle_sasl_authenticate,
    50: scram_users.handle_describe_user_scram_credentials,
    51: scram_users.handle_alter_user_scram_credentials,
    29: acls.handle_describe_acls,
    30: acls.handle_create_acls,
    31: acls.handle_delete_acls,
    48: client_quotas.handle_describe_client_quotas,
    49: client_quotas.handle_alter_client_quotas,
}


# Hosting at least this many partitions after start-up, the objects loaded are frozen
# (gc.freeze): below it a full collection is cheap, and an in-process test broker does not
# freeze its test's garbage for good.
GC_FREEZE_PARTITIONS = 1000

class KafkaServer:
    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.data_dir = config.data_dir
        self._clock = clock
        self._io_pool = ThreadPoolExecutor(
            max_workers=config.get("num.io.threads"), thread_name_prefix="odradek-io"
        )
        # Decodes large requests and encodes their responses off the event loop (Kafka's
        # network threads parse requests too).
        self._network_pool = ThreadPoolExecutor(
            max_workers=config.get("num.network.threads"), thread_name_prefix="odradek-network"
        )
        self.networks: list[NetworkServer] = []
        self._background: list[asyncio.Task[None]] = []
        self._dir_lock: DirLock | None = None
        self.cluster: cluster_mode.ClusterMembership | None = None
        self.cluster_parts: cluster_mode.ClusterParts | None = None
        self.controller: Controller | None = None
        self._stopped = asyncio.Event()
        self._handlers: dict[int, Handler] = dict(HANDLERS)
        self.api_versions_cache: dict[int, bytes] = {}  # ApiVersions bodies by version
        # authorizer.class.name set: ACLs decide every request (security.enforcement).
        self.authorizer: AclAuthorizer | None = None
        self._enforcer: Enforcer | None = None
        self.metadata_answers = EncodedAnswers()  # encoded Metadata answers (embedded)
        self.metadata_topic_entries = TopicEntries()  # and their topic entries
        # One hierarchical timing wheel for every delayed operation of this broker (fetches,
        # group joins, syncs and sessions), advanced by one task on the event loop.
        self.timer = Timer()
        self._timer_driver: TimerDriver | None = None
        self.fetch_waiters = FetchWaiters(self.timer)
        self.fetch_manager = FetchManager(
            FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"))
        )
        # Prometheus metrics (broker/metrics), when metrics.port is set; the hot paths bump
        # ``stats`` only when it is not None.
        self.metrics: BrokerMetrics | None = None
        self.stats: BrokerStats | None = None
        # Filled in by start():
        self.log_manager: LogManager
        self.metadata: MetadataStore
        self.replica_manager: ReplicaManager
        self.topics: TopicManager
        self.producer_ids: ProducerIds
        self.network: NetworkServer

    # Lifecycle ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.network.port

    async def start(self) -> None:
        # Loading thousands of partitions allocates millions of objects that live as long
        # as the broker; CPython's full collections would scan them all again and again
        # (a third of a 10,000-partition restart). So no collection runs during start-up,
        # and with many partitions the loaded objects are frozen: left out of every later
        # collection (ReplicaManager.remove_partition unfreezes them once one may be
        # garbage).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            await self._start()
        finally:
            replicas = getattr(self, "replica_manager", None)
            if replicas is not None and len(replicas.partitions()) >= GC_FREEZE_PARTITIONS:
                gc.freeze()
            if gc_was_enabled:
                gc.enable()

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Before anything reads or writes the directory: it must be ours alone, and
        # meant for this broker id (LogDirInUseError / InconsistentBrokerIdError).
        self._dir_lock = DirLock.acquire(self.data_dir)
        # Cluster mode (zookeeper.connect set): the cluster id and, possibly generated,
        # broker id come from ZooKeeper; None keeps the embedded single broker.
        self.cluster = await cluster_mode.join(self.config, self.data_dir)
        if self.cluster is not None:
            self.broker_id = self.cluster.broker_id
        meta_properties.check_and_write(self.data_dir, self.broker_id)
        listeners = self.config.listeners
        advertised = self.config.advertised_listeners
        # What Metadata names for each listener; a port 0 is filled in once bound.
        self.advertised_endpoints: dict[str, tuple[str, int]] = {
            endpoint.name: (
                endpoint.host if endpoint.host not in ("0.0.0.0", "::", "") else "127.0.0.1",
                endpoint.port,
            )
            for endpoint in advertised
        }
        first_host, first_port = self.advertised_endpoints[advertised[0].name]
        broker_info = BrokerInfo(
            self.broker_id, first_host, first_port, self.config.get("broker.rack") or None
        )
        self.metadata = LocalMetadataStore(
            self.data_dir,
            broker_info,
            self.cluster.cluster_id if self.cluster else self.config.get("cluster.id") or None,
        )
        meta_properties.check_and_write(self.data_dir, self.broker_id, self.metadata.cluster_id)
        # Per-topic overrides are applied again by the topic manager when it hosts each
        # partition right after; the defaults are the same ones it derives.
        self.log_manager = LogManager(
            self.data_dir,
            broker_log_defaults(self.config, self.metadata.broker_configs()),
            clock=self._clock,
            producer_id_expiration_ms=self.config.get("producer.id.expiration.ms"),
            recovery_threads=self.config.get("num.recovery.threads.per.data.dir"),
            topic_config=self._topic_log_config,
        )
        if self.cluster is not None:
            # Kafka halts a broker whose last log directory failed, so that the other
            # replicas take over its partitions (broker/dir_failure_halt.py).
            self.log_manager.dir_failure.on_offline = dir_failure_halt.halter(self.data_dir)
        started = time.monotonic()
        await loop.run_in_executor(self._io_pool, self.log_manager.startup)
        self.replica_manager = ReplicaManager(
            self.broker_id,
            self.log_manager,
            on_data_appended=self.fetch_waiters.notify,
            clock=self._clock,
        )
        append_thread_bytes = self.config.get("append.thread.min.bytes")
        if append_thread_bytes >= 0:  # off by default: see docs/benchmarks.md
            self.replica_manager.offload_append_bytes = append_thread_bytes
        self.topics = TopicManager(self.config, self.metadata, self.replica_manager)
        self.topics.load_all()
        if self.cluster is not None:
            # Cluster mode: metadata from the controller, topics through ZooKeeper.
            self.cluster_parts = cluster_mode.install(
                self.cluster, self.config, self.replica_manager, self.topics.log_config
            )
            for api_key, cluster_handler in self.cluster_parts.handlers().items():
                self._handlers[api_key] = _unbound(cluster_handler)
        # A cluster claims blocks of producer ids in ZooKeeper so brokers never share one.
        self.producer_ids = (
            ProducerIdManager(self.data_dir)
            if self.cluster is None
            else ZkProducerIdManager(self.cluster.zk, self.broker_id)
        )
        # Client quotas (KIP-13/KIP-55): throttle times for Produce and Fetch.
        self.client_quotas = ClientQuotaManager(
            self.config.get("quota.window.num"), self.config.get("quota.window.size.seconds")
        )
        self.request_quota = RequestQuota(self.client_quotas)  # request_percentage (KIP-124)
        self.client_quota_store: Any = LocalQuotaStore(self.metadata, self.client_quotas)
        self.scram_store: Any = self.metadata
        if self.cluster is not None and self.cluster_parts is not None:
            # A cluster keeps both in ZooKeeper, where every broker sees them.
            from odradek.broker.zk_user_store import ZkUserStore

            user_store = ZkUserStore(self.cluster.zk, self.client_quotas)
            await user_store.reload()
            self.cluster_parts.configs.configs.on_user_configs.append(user_store.reload)
            self.client_quota_store = self.scram_store = user_store
        self.cleaner: LogCleaner | None = None
        if self.config.get("log.cleaner.enable") and self.config.get("log.cleaner.threads") > 0:
            self.cleaner = LogCleaner(
                self.log_manager,
                threads=self.config.get("log.cleaner.threads"),
                backoff_ms=self.config.get("log.cleaner.backoff.ms"),
                clock=self._clock,
                high_watermark=self._high_watermark_of,
            )
            self.replica_manager.cleaner = self.cleaner
            self.cleaner.start()
        log.info(
            "loaded %d partitions in %.2fs",
            len(self.replica_manager.partitions()),
            time.monotonic() - started,
        )
        self._timer_driver = TimerDriver(self.timer)
        self._timer_driver.start()
        self._start_group_coordinator()
        self._start_transaction_coordinator()
        self._set_up_metrics()
        if self.metrics is not None:  # before the listeners: a port in use stops us early
            await self.metrics.start()
            log.info("Prometheus metrics on http://%s:%d/metrics", *self._metrics_address())
        await self._start_authorizer()
        await self._start_listeners(listeners)
        broker_info.host, broker_info.port = self.advertised_endpoints[advertised[0].name]
        self._start_background_jobs()
        if self.cluster is not None:
            await self._register_in_cluster(broker_info)

    async def _start_listeners(self, listeners: list[Endpoint]) -> None:
        """Bind every listener, or none: a failure closes the ones already bound."""
        config = self.config
        quotas = ConnectionQuotas(
            config.get("max.connections"),
            config.get("max.connections.per.ip"),
            parse_ip_overrides(config.get("max.connections.per.ip.overrides")),
        )
        pool = MemoryPool(config.get("queued.max.request.bytes"))
        self.networks = []
        security = config.listener_security()
        for endpoint in listeners:
            hooks = (
                ListenerHooks(security[endpoint.name], self.scram_credential)
                if endpoint.name in security
                else None
            )
            network = NetworkServer(
                self,
                endpoint.host or "0.0.0.0",
                endpoint.port,
                max_request_size=config.get("socket.request.max.bytes"),
                max_in_flight_per_connection=config.get("queued.max.requests"),
                connections_max_idle_ms=config.get("connections.max.idle.ms"),
                listener_name=endpoint.name,
                quotas=quotas,
                memory_pool=pool,
                executor=self._network_pool,
                security=hooks,
                request_observer=self._request_observer,
                produce_lane=self._produce_lane,
            )
            try:
                await network.start()
            except BaseException:
                for started in self.networks:
                    await started.shutdown(timeout=1)
                raise
            self.networks.append(network)
            host, port = self.advertised_endpoints[endpoint.name]
            if port == 0:
                self.advertised_endpoints[endpoint.name] = (host, network.port)
            log.info(
                "odradek broker %d listening on %s://%s:%d (data in %s)",
                self.broker_id,
                endpoint.name,
                endpoint.host or "0.0.0.0",
                network.port,
                self.data_dir,
            )
        self.network = self.networks[0]

    def _set_up_metrics(self) -> None:
        """The metrics endpoint (metrics.port) and the per-request hook (metrics and the
        slow-request log); neither costs anything when not configured."""
        port = self.config.get("metrics.port")
        if port is not None:
            self.metrics = BrokerMetrics(self, self.config.get("metrics.host"), port)
            self.stats = self.metrics.stats
            flush_stats.observer = self.stats.flushed
        slow_ms = self.config.get("log.slow.request.threshold.ms")
        self._request_observer = (
            RequestObserver(self.stats, slow_ms) if self.stats is not None or slow_ms >= 0 else None
        )
        self._produce_lane = ProduceLane(self) if self.config.get("produce.lane.enable") else None

    def _metrics_address(self) -> tuple[str, int]:
        assert self.metrics is not None
        return self.metrics.endpoint.host, self.metrics.port
    async def _start_authorizer(self) -> None:
        """ACLs from ZooKeeper in a cluster, else from the data directory's file."""
        settings = authorizer_settings(self.config.get)
        if settings is None:
            return
        if self.cluster is not None:
            from odradek.cluster.zk.acls import ZkAclStore

            store: Any = ZkAclStore(self.cluster.zk)
        else:
            store = LocalAclStore(self.data_dir)
        self.authorizer = AclAuthorizer(store, settings)
        await asyncio.to_thread(self.authorizer.start)
        self._enforcer = Enforcer(self.authorizer, ACL_RULES)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A user's stored SCRAM credential (salted and hashed), for SASL/SCRAM."""
        users = getattr(self.scram_store, "user_scram_credentials", None)
        text = users().get(user, {}).get(mechanism) if users is not None else None
        return ScramCredential.from_text(text) if text else None

    def advertised_endpoint(self, listener_name: str) -> tuple[str, int] | None:
        """Host and port clients of ``listener_name`` are told to use."""
        return self.advertised_endpoints.get(listener_name)

    async def _register_in_cluster(self, broker_info: BrokerInfo) -> None:
        """Announce this broker in /brokers/ids once its listener is bound (as Kafka);
        a refused registration (duplicate broker.id) stops the broker cleanly."""
        assert self.cluster is not None
        endpoints = [
            (endpoint.name, *self.advertised_endpoints[endpoint.name], endpoint.protocol)
            for endpoint in self.config.advertised_listeners
        ]
        try:
            await asyncio.to_thread(self.cluster.register, endpoints)
            assert self.cluster_parts is not None
            self.controller = await cluster_mode.start_controller(
                self.cluster, self.config, self.cluster_parts
            )
            self._background.append(
                asyncio.create_task(
                    run_isr_expiration(
                        self.replica_manager, self.config.get("replica.lag.time.max.ms")
                    ),
                    name="odradek-isr-expiration",
                )
            )
        except BaseException:
            await self.shutdown()
            raise

    async def shutdown(self) -> None:
        """Graceful stop: finish in-flight requests, flush, checkpoint, mark clean."""
        if self._stopped.is_set():
            return
        log.info("shutting down")
        if self.cluster is not None:
            try:
                # Bounded: a broker cut off from ZooKeeper or its controller must still
                # stop; the end of its session moves leadership all the same.
                leave_timeout_s = cluster_mode.leave_cluster_timeout_s(self.config)
                await timeouts.wait_for(
                    cluster_mode.leave_cluster(
                        self.cluster, self.config, self.cluster_parts, self.controller
                    ),
                    leave_timeout_s,
                )
            except TimeoutError:
                log.warning(
                    "leaving the cluster took over %.0f s; stopping anyway", leave_timeout_s
                )
            except Exception:  # the session's end moves leadership all the same
                log.exception("leaving the cluster failed")
        if self.cluster_parts is not None:
            with contextlib.suppress(Exception):
                await self.cluster_parts.fetchers.close()
        # Requests parked in purgatories would hold the drain below for their whole
        # timeout (a long-poll fetch, a JoinGroup): answer them now with what there is.
        try:
            self.fetch_waiters.drain()
            if self.cluster_parts is not None and self.cluster_parts.coordinators is not None:
                await self.cluster_parts.coordinators.close()
            await self.group_coordinator.shutdown()  # parked group requests: NOT_COORDINATOR
            await self.txn.shutdown()
        except Exception:  # never let one step keep the logs from a clean close
            log.exception("answering parked requests failed")
        with contextlib.suppress(Exception):
            # Stop accepting, finish what is in flight, on every listener at once.
            await asyncio.gather(*(network.shutdown() for network in self.networks))
        self._network_pool.shutdown(wait=False)
        if self.metrics is not None:
            await self.metrics.stop()
            if flush_stats.observer == self.stats.flushed:  # type: ignore[union-attr]
                flush_stats.observer = None
        if self.authorizer is not None:
            self.authorizer.close()
        await asyncio.gather(*(timeouts.cancel_until_done(task) for task in self._background))
        try:
            self.fetch_waiters.close()
            if self._timer_driver is not None:
                self._timer_driver.stop()
                await self._timer_driver.wait_stopped()
        except Exception:
            log.exception("stopping the purgatories failed")
        loop = asyncio.get_running_loop()
        if self.cleaner is not None:
            await loop.run_in_executor(self._io_pool, self.cleaner.stop)
        await loop.run_in_executor(self._io_pool, self.replica_manager.stop_append_thread)
        try:
            await loop.run_in_executor(
                self._io_pool, self.replica_manager.checkpoint_high_watermarks
            )
        except Exception:
            log.exception("writing the high-watermark checkpoint failed")
        await loop.run_in_executor(self._io_pool, self.log_manager.shutdown)
        self._io_pool.shutdown(wait=True)
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.close)  # drops /brokers/ids/<id>
        if self._dir_lock is not None:
            self._dir_lock.release()
        self._stopped.set()
        log.info("shut down cleanly")

    async def serve_forever(self, stop: asyncio.Event | None = None) -> None:
        """Run until SIGTERM or SIGINT (or ``stop`` is set), then shut down gracefully."""
        if stop is None:
            stop = stop_on_signals()
        await stop.wait()
        await self.shutdown()

    # Consumer groups ----------------------------------------------------------------------

    def _start_group_coordinator(self) -> None:
        parts = self.cluster_parts
        coordinators = parts.coordinators if parts is not None else None
        self.offsets_topic = OffsetsTopic(
            self,
            None if coordinators is None else lambda: coordinators.partition_count(OFFSETS_TOPIC),
        )
        self.group_coordinator = GroupCoordinator(
            self.offsets_topic,
            self.timer,
            GroupConfig.from_broker_config(self.config.get),
        )
        self.group_coordinator.startup()
        self.group_handlers = GroupHandlers(
            self.group_coordinator,
            coordinator_node=self._coordinator_node,
            partition_exists=self._partition_exists,
        )
        self.topics.on_topic_deleted = lambda topic, partitions: self._spawn(
            self.group_coordinator.on_partitions_deleted((topic, p) for p in partitions),
            f"drop-offsets-{topic}",
        )
        for api_key, handler in self.group_handlers.handlers().items():
            self._handlers[api_key] = _unbound(handler)
        if parts is not None:
            # Cluster mode: this broker coordinates the groups of the offsets partitions
            # the controller makes it lead, and only while it leads them.
            parts.internal_leadership.register(
                OFFSETS_TOPIC, self._on_offsets_elected, self._on_offsets_resigned
            )
        elif self.offsets_topic.exists():
            self.offsets_topic.ensure_created()  # learns the existing partition count
            self._load_offsets_partitions()

    # Transactions ------------------------------------------------------------------------

    def _start_transaction_coordinator(self) -> None:
        self.txn = TransactionService(self)
        for api_key, handler in txn_handlers.HANDLERS.items():
            self._handlers[api_key] = handler
        self.group_handlers.transaction_node = self._transaction_node
        self.group_handlers.unstable_partitions = self.txn.offsets.unstable_partitions
        self._spawn(self.txn.start(), "load-transaction-state")

    async def _transaction_node(self, transactional_id: str) -> Any:
        if self.cluster_parts is not None:
            return self.txn.coordinator_node(transactional_id)  # the state partition's leader
        await self.txn.ensure_state_topic()
        error = self.txn.coordinator.coordinator_error(transactional_id)
        if error is not None:
            return error
        for broker in self.metadata.brokers():
            if broker.node_id == self.broker_id:
                return broker.node_id, broker.host, broker.port
        return None

    def _partition_exists(self, topic: str, partition: int) -> bool:
        """OffsetCommit's UNKNOWN_TOPIC_OR_PARTITION check: the cluster's partitions in
        cluster mode (the coordinator hosts few of them), the hosted ones otherwise."""
        if self.cluster_parts is not None:
            return self.cluster_parts.metadata_cache.contains(topic, partition)
        return self.replica_manager.partition(topic, partition) is not None

    def _on_offsets_elected(self, partition: int, _leader_epoch: int) -> None:
        # Loads in the background; its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile.
        self.group_coordinator.schedule_load(partition)

    def _on_offsets_resigned(self, partition: int, _leader_epoch: int) -> None:
        # Its groups go; parked joins and syncs are answered NOT_COORDINATOR.
        self.group_coordinator.unload_partition(partition)

    def _load_offsets_partitions(self) -> None:
        """Become coordinator for every offsets partition led here; each loads in the
        background and answers COORDINATOR_LOAD_IN_PROGRESS until it is done."""
        for index in range(self.offsets_topic.num_partitions):
            if self.offsets_topic.is_local_leader(index):
                self._spawn(self.group_coordinator.load_partition(index), f"load-offsets-{index}")

    def _spawn(self, coroutine: Awaitable[Any], name: str) -> None:
        """Run a one-off job on the loop; shutdown cancels it if still running."""
        task = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self._background.append(task)
        task.add_done_callback(self._forget_task)

    def _forget_task(self, task: asyncio.Future[Any]) -> None:
        with contextlib.suppress(ValueError):
            self._background.remove(task)  # type: ignore[arg-type]
        if not task.cancelled() and task.exception() is not None:
            log.error("background job %s failed: %r", task.get_name(), task.exception())

    async def _coordinator_node(self, partition: int) -> tuple[int, str, int] | None:
        parts = self.cluster_parts
        if parts is not None and parts.coordinators is not None:
            # The leader of the partition per the controller; first use creates the topic
            # through ZooKeeper (Kafka's AutoTopicCreationManager).
            spec = InternalTopicSpec(
                OFFSETS_TOPIC,
                self.config.get("offsets.topic.num.partitions"),
                self.config.get("offsets.topic.replication.factor"),
                "offsets.topic.replication.factor",
                self.offsets_topic.topic_configs(),
            )
            return parts.coordinators.coordinator(spec, partition, current_listener.get())
        # First use creates __consumer_offsets, as Kafka does; its partitions are empty,
        # so becoming their coordinator is immediate.
        if not self.offsets_topic.exists() and self.offsets_topic.ensure_created():
            for index in range(self.offsets_topic.num_partitions):
                if self.offsets_topic.is_local_leader(index):
                    await self.group_coordinator.load_partition(index)
        topic = self.metadata.topic(OFFSETS_TOPIC)
        if topic is None or partition not in topic.partitions:
            return None
        leader = topic.partitions[partition].leader
        if leader == self.broker_id:
            # Named as the listener the FindCoordinator came in on advertises us (Kafka).
            own = self.advertised_endpoint(current_listener.get())
            if own is not None:
                return leader, own[0], own[1]
        for broker in self.metadata.brokers():
            if broker.node_id == leader:
                return broker.node_id, broker.host, broker.port
        return None

    # Background jobs ------------------------------------------------------------------

    def _start_background_jobs(self) -> None:
        jobs: list[tuple[str, int, Callable[[], object]]] = [
            (
                "retention",
                self.config.get("log.retention.check.interval.ms"),
                self.log_manager.run_retention,
            ),
            (
                "checkpoint",
                max(1000, self.config.get("log.flush.offset.checkpoint.interval.ms")),
                self.log_manager.checkpoint,
            ),
            (
                "hw-checkpoint",
                self.config.get("replica.high.watermark.checkpoint.interval.ms"),
                self.replica_manager.checkpoint_high_watermarks,
            ),
            # Brings an offline log dir back once a test write succeeds (a no-op online).
            ("log-dir-probe", LOG_DIR_PROBE_INTERVAL_MS, self.log_manager.dir_failure.probe),
        ]
        flush_interval = self.config.get("log.flush.scheduler.interval.ms")
        if flush_interval < 2**62:
            jobs.append(("flush", flush_interval, self.log_manager.run_flush))
        else:
            # flush.ms / flush.messages per topic still need checking; once a second is
            # Kafka's cadence for topic-level flush policies when the scheduler is unset.
            jobs.append(("flush", 1000, self.log_manager.run_flush))
        for name, interval_ms, job in jobs:
            self._background.append(
                asyncio.create_task(self._every(name, interval_ms, job), name=f"odradek-{name}")
            )

    async def _every(self, name: str, interval_ms: int, job: Callable[[], object]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await loop.run_in_executor(self._io_pool, job)
            except Exception:
                log.exception("background job %s failed; will retry", name)

    # Request dispatch (the network layer calls this) ------------------------------------

    async def handle(self, ctx: RequestContext, request: object) -> object | None:
        handler = self._handlers.get(ctx.header.api_key)
        if handler is None:
            # The protocol layer only decodes advertised APIs, so this is a wiring bug.
            raise LookupError(f"no handler for api key {ctx.header.api_key}")
        if self.request_quota.applies(ctx, request):  # a set lookup unless quotas are set
            call = partial(handler, self)
            if self._enforcer is not None:
                call = partial(self._enforcer.handle, handler=call)
            return await self.request_quota.handle(ctx, request, call)
        if self._enforcer is not None:
            return await self._enforcer.handle(ctx, request, partial(handler, self))
        return await handler(self, ctx, request)

    def advertised_versions(self) -> dict[int, tuple[int, int]]:
        return advertised(self._handlers.keys())

    def _topic_log_config(self, topic: str) -> LogConfig | None:
        """A topic's effective log config while logs load (before the topic manager)."""
        meta = self.metadata.topic(topic)
        if meta is None:
            return None
        try:
            return LogConfig.from_properties(meta.configs, base=self.log_manager.default_config)
        except ValueError:
            return None

    def _high_watermark_of(self, topic: str, partition: int) -> int | None:
        hosted = self.replica_manager.partition(topic, partition)
        return hosted.high_watermark if hosted is not None else None

    # Helpers for handlers ---------------------------------------------------------------

    def broker_topic_overrides(self) -> set[str]:
        """Topic-level keys whose broker default was set by config (not Kafka's default)."""
        from odradek.broker.config import KEYS

        return {
            spec.topic_key
            for spec in KEYS.values()
            if spec.topic_key and not self.config.is_default(spec.name)
        } | {KEYS[k].topic_key for k in self.metadata.broker_configs() if KEYS[k].topic_key}

    def set_dynamic_broker_configs(self, configs: dict[str, str], *, validate_only: bool) -> None:
        self.topics.set_broker_overrides(configs, validate_only=validate_only)

    async def wait_for_data(
        self,
        keys: list[tuple[str, int]],
        max_wait_ms: int,
        ready: Callable[[], bool],
        kind: str = "Fetch",
    ) -> None:
        """``kind``: the purgatory Kafka would park it in (Fetch or Produce)."""
        await self.fetch_waiters.wait(keys, max_wait_ms, ready, kind)

    def encode_fetch(
        self,
        ctx: RequestContext,
        error_code: int,
        session_id: int,
        results: list[tuple[str, int, ReadResult]],
        throttle_ms: int = 0,
    ) -> ChunkedResponse:
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, partition, result in results:
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "error_code": result.error_code,
                    "high_watermark": result.high_watermark,
                    "last_stable_offset": result.last_stable_offset,
                    "log_start_offset": result.log_start_offset,
                    "aborted_transactions": result.aborted_transactions,
                    "preferred_read_replica": result.preferred_read_replica,
                    "records": result.regions,
                }
            )
        return ChunkedResponse(
            encode_fetch_response(ctx.header, throttle_ms, int(error_code), session_id, topics)
        )

    async def encode_fetch_off_loop(
        self,
        ctx: RequestContext,
        error_code: int,
        session_id: int,
        results: list[tuple[str, int, ReadResult]],
    ) -> ChunkedResponse:
        """``encode_fetch`` on the network threads, for answers listing many partitions."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._network_pool, self.encode_fetch, ctx, error_code, session_id, results
        )


def _unbound(handler: Callable[[Any, Any], Awaitable[Any]]) -> Handler:
    """Adapt a handler bound to its own object to the server's (server, ctx, request)."""

    async def call(_server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
        return await handler(ctx, request)

    return call


def stop_on_signals() -> asyncio.Event:
    """An event SIGTERM and SIGINT set (instead of their default action: death)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def run_server(config: BrokerConfig) -> None:
    """Start a broker and serve until SIGTERM/SIGINT (the `odradek server` command)."""
    exit_code = 1
    try:
        await _serve(config)
        exit_code = 0
    finally:
        # Whatever the interpreter's teardown still waits for, the process leaves.
        exit_watchdog.arm(exit_code)


async def _serve(config: BrokerConfig) -> None:
    server = KafkaServer(config)
    stack_dump.install(asyncio.get_running_loop())
    # Before start(): the listener opens before start-up ends (cluster registration, the
    # controller), and a SIGTERM in that window must still mean a graceful stop.
    stop = stop_on_signals()
    # A SIGTERM during start-up (still registering, or electing a controller while
    # ZooKeeper is out of reach) stops it too, instead of waiting for start() to end.
    starting = asyncio.ensure_future(server.start())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        log.info("stop requested during start-up")
        starting.cancel()  # start() shuts down what it started, then re-raises
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await server.shutdown()  # a no-op when start() already did it
        return
    stopping.cancel()
    starting.result()  # a failed start-up fails the command
    freeze_start_up_heap()
    await server.serve_forever(stop)


def freeze_start_up_heap() -> None:
    """Leave what start-up loaded (modules, configs, logs) out of later collections.

    In a broker process those objects live as long as the process, yet every full
    collection traversed them all again: 17-34 ms on the event loop with a handful of
    partitions, which made the p99 of a consumer tailing a 10,000 records/s producer
    (bench_ingest's latency runs). Frozen, a full collection scans only what came later.
    The garbage start-up left is collected first, so that none of it is frozen for good.
    Unlike ``KafkaServer.start``'s freeze, this is for the ``odradek server`` process
    only: a broker started in a test's process must not freeze the test's objects.
    """
    gc.collect()
    gc.freeze()
