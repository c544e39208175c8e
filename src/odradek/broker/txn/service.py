"""The transaction coordinator's parts, assembled for one broker (the server owns one).

Becoming coordinator follows ``__transaction_state`` partition leadership, like the group
coordinator follows ``__consumer_offsets``: :meth:`TransactionService.start` loads every
partition led here (after the group coordinator has loaded its partitions, so markers
written for transactions found prepared can complete their pending offset commits). In a
cluster, LeaderAndIsr elections and resignations of ``__transaction_state`` partitions
load and unload their ids as leadership moves (cluster_mode.InternalTopicLeadership), the
coordinator epoch is the partition's leader epoch, and markers reach partitions led by
other brokers over the wire (:mod:`odradek.broker.txn.marker_channel`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek import timeouts
from odradek.broker.group.txn_offsets import TxnOffsetCommits
from odradek.broker.requests import current_listener
from odradek.broker.txn.coordinator import TransactionCoordinator, TxnConfig
from odradek.broker.txn.marker_channel import ClusterMarkerWriter
from odradek.broker.txn.markers import LocalMarkerWriter
from odradek.broker.txn.state_topic import TRANSACTION_STATE_TOPIC, TxnStateTopic

if TYPE_CHECKING:
    from odradek.broker.server import KafkaServer

log = logging.getLogger(__name__)

APPEND_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default, for acks=all appends


class TransactionService:
    def __init__(self, server: KafkaServer) -> None:
        self._server = server
        parts = server.cluster_parts
        self._cluster = parts
        coordinators = parts.coordinators if parts is not None else None
        self.state_topic = TxnStateTopic(
            server,
            None
            if coordinators is None
            else lambda: coordinators.partition_count(TRANSACTION_STATE_TOPIC),
            None if parts is None else self.wait_replicated,
        )
        self.offsets = TxnOffsetCommits(server.group_coordinator.registry)
        self.markers: LocalMarkerWriter | ClusterMarkerWriter
        if parts is None:
            self.markers = LocalMarkerWriter(server.replica_manager, self.offsets.complete)
        else:
            # Cluster mode: partitions led elsewhere get WriteTxnMarkers over the wire, and
            # this broker coordinates the ids of the state partitions it leads, only while
            # it leads them.
            self.markers = ClusterMarkerWriter(
                server.broker_id,
                server.replica_manager,
                parts.metadata_cache,
                parts.address_of,
                on_offsets_marker=self.offsets.complete,
                wait_replicated=self.wait_replicated,
                timeout_s=APPEND_TIMEOUT_MS / 1000,
                connector=parts.connector,
            )
            parts.internal_leadership.register(
                TRANSACTION_STATE_TOPIC, self._on_elected, self._on_resigned
            )
        self.coordinator = TransactionCoordinator(
            self.state_topic,
            self.markers,
            server.producer_ids.generate,
            TxnConfig.from_broker_config(server.config.get),
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._loads: set[asyncio.Task[None]] = set()
        self.coordinator.starting = True
        self._create_lock = asyncio.Lock()

    async def wait_replicated(self, topic: str, partition: int, required_offset: int) -> int:
        """acks=all for the coordinator's own appends (state records, markers): 0 once the
        partition's high watermark reaches ``required_offset``, else the error (Kafka's
        DelayedProduce, with Kafka's default ``request.timeout.ms``)."""
        replica_manager = self._server.replica_manager

        def status() -> int | None:
            return replica_manager.produce_status(topic, partition, required_offset)

        if status() is None:
            await self._server.wait_for_data(
                [(topic, partition)],
                APPEND_TIMEOUT_MS,
                lambda: status() is not None,
            )
        code = status()
        return int(ErrorCode.request_timed_out) if code is None else code

    def partition_exists(self, topic: str, partition: int) -> bool:
        """AddPartitionsToTxn's UNKNOWN_TOPIC_OR_PARTITION check: the cluster's partitions
        in cluster mode (the coordinator leads few of them), the hosted ones otherwise."""
        if self._cluster is not None:
            return self._cluster.metadata_cache.contains(topic, partition)
        return self._server.replica_manager.partition(topic, partition) is not None

    def coordinator_node(self, transactional_id: str) -> tuple[int, str, int] | None:
        """Cluster mode: the leader of the id's state partition for the listener the
        request came on; the first call creates the topic through ZooKeeper."""
        assert self._cluster is not None and self._cluster.coordinators is not None
        return self._cluster.coordinators.coordinator(
            self.state_topic.spec(),
            self.coordinator.partition_for(transactional_id),
            current_listener.get(),
        )

    def _on_elected(self, partition: int, leader_epoch: int) -> None:
        # Requests for its ids get COORDINATOR_LOAD_IN_PROGRESS until the load is done;
        # transactions found prepared get their markers sent again.
        if self.coordinator.schedule_load(partition, leader_epoch):
            task = asyncio.ensure_future(self.coordinator.load_partition(partition, leader_epoch))
            task.set_name(f"load-txn-state-{partition}")
            self._loads.add(task)
            task.add_done_callback(self._load_done)

    def _load_done(self, task: asyncio.Task[None]) -> None:
        self._loads.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("loading %s failed: %r", task.get_name(), task.exception())

    def _on_resigned(self, partition: int, _leader_epoch: int) -> None:
        self.coordinator.unload_partition(partition)

    async def start(self) -> None:
        """Load the partitions led here, once the group coordinator has loaded its own."""
        while self._server.group_coordinator.is_loading():
            await asyncio.sleep(0.01)
        open_txns = self._server.offsets_topic.open_transactions
        for index in list(open_txns):
            self.offsets.restore(index, open_txns.pop(index))
        try:
            # A cluster loads the partitions LeaderAndIsr makes this broker lead instead.
            if self._cluster is None and self.state_topic.exists():
                self.state_topic.ensure_created()  # learns the partition count
                await self._load_all()
        finally:
            self.coordinator.starting = False
        config = self._server.config
        for name, interval_ms, job in (
            (
                "txn-timeouts",
                config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                self.coordinator.abort_timed_out_transactions,
            ),
            (
                "txn-id-expiry",
                config.get("transaction.remove.expired.transaction.cleanup.interval.ms"),
                self.coordinator.remove_expired_transactional_ids,
            ),
        ):
            self._tasks.append(asyncio.create_task(_every(name, interval_ms, job), name=name))

    async def _load_all(self) -> None:
        for index in range(self.state_topic.num_partitions):
            if self.state_topic.is_local_leader(index):
                await self.coordinator.load_partition(index)

    async def ensure_state_topic(self) -> None:
        """First use creates ``__transaction_state`` (as Kafka does); its partitions are
        empty, so becoming their coordinator is immediate. A cluster creates it on the
        first FindCoordinator instead, and loads partitions as it is elected."""
        if self._cluster is not None or self.state_topic.exists():
            return
        async with self._create_lock:
            if self.state_topic.ensure_created():
                await self._load_all()

    async def ensure_offsets_topic(self) -> None:
        """AddOffsetsToTxn names a group whose offsets partition must exist to take markers."""
        offsets = self._server.offsets_topic
        if self._cluster is not None:
            return  # created through ZooKeeper by the group's FindCoordinator
        if not offsets.exists() and offsets.ensure_created():
            for index in range(offsets.num_partitions):
                if offsets.is_local_leader(index):
                    await self._server.group_coordinator.load_partition(index)

    async def shutdown(self) -> None:
        for task in [*self._tasks, *self._loads]:
            await timeouts.cancel_until_done(task)
        if isinstance(self.markers, ClusterMarkerWriter):
            await self.markers.close()
        for task in self._tasks:
            await timeouts.cancel_until_done(task)
        await self.coordinator.shutdown()


async def _every(name: str, interval_ms: int, job: object) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            await job()  # type: ignore[operator]
        except Exception:
            log.exception("%s failed; will retry", name)
