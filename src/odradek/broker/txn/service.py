"""The transaction coordinator's parts, assembled for one broker (the server owns one).

Becoming coordinator follows ``__transaction_state`` partition leadership, like the group
coordinator follows ``__consumer_offsets``: :meth:`TransactionService.start` loads every
partition led here (after the group coordinator has loaded its partitions, so markers
written for transactions found prepared can complete their pending offset commits), and a
cluster will call :meth:`on_become_leader` / :meth:`on_resign` as leadership moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from odradek.broker.group.txn_offsets import TxnOffsetCommits
from odradek.broker.txn.coordinator import TransactionCoordinator, TxnConfig
from odradek.broker.txn.markers import LocalMarkerWriter
from odradek.broker.txn.state_topic import TxnStateTopic

if TYPE_CHECKING:
    from odradek.broker.server import KafkaServer

log = logging.getLogger(__name__)


class TransactionService:
    def __init__(self, server: KafkaServer) -> None:
        self._server = server
        self.state_topic = TxnStateTopic(server)
        self.offsets = TxnOffsetCommits(server.group_coordinator)
        self.markers = LocalMarkerWriter(server.replica_manager, self.offsets.complete)
        self.coordinator = TransactionCoordinator(
            self.state_topic,
            self.markers,
            server.producer_ids.generate,
            TxnConfig.from_broker_config(server.config.get),
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.coordinator.starting = True
        self._create_lock = asyncio.Lock()

    async def start(self) -> None:
        """Load the partitions led here, once the group coordinator has loaded its own."""
        while self._server.group_coordinator.is_loading():
            await asyncio.sleep(0.01)
        open_txns = self._server.offsets_topic.open_transactions
        for index in list(open_txns):
            self.offsets.restore(index, open_txns.pop(index))
        try:
            if self.state_topic.exists():
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
        empty, so becoming their coordinator is immediate."""
        if self.state_topic.exists():
            return
        async with self._create_lock:
            if self.state_topic.ensure_created():
                await self._load_all()

    async def ensure_offsets_topic(self) -> None:
        """AddOffsetsToTxn names a group whose offsets partition must exist to take markers."""
        offsets = self._server.offsets_topic
        if not offsets.exists() and offsets.ensure_created():
            for index in range(offsets.num_partitions):
                if offsets.is_local_leader(index):
                    await self._server.group_coordinator.load_partition(index)

    async def on_become_leader(self, partition: int) -> None:
        await self.coordinator.load_partition(partition)

    def on_resign(self, partition: int) -> None:
        self.coordinator.unload_partition(partition)

    async def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.coordinator.shutdown()


async def _every(name: str, interval_ms: int, job: object) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            await job()  # type: ignore[operator]
        except Exception:
            log.exception("%s failed; will retry", name)
