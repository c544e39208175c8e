"""The transaction coordinator (Kafka's TransactionCoordinator + TransactionStateManager).

Each transactional id belongs to one ``__transaction_state`` partition
(``abs(hashCode(id)) % partitions``); the broker leading that partition is its coordinator.
:meth:`load_partition` rebuilds the ids of a partition from the log (requests for them get
COORDINATOR_LOAD_IN_PROGRESS meanwhile) and finishes any transaction found in
PrepareCommit/PrepareAbort by writing its markers; :meth:`unload_partition` forgets them
when leadership moves away.

The protocol (errors as Kafka's):

* InitProducerId: a new id gets a producer id and epoch 0; an existing one gets its epoch
  bumped, which fences the previous instance. If that instance left a transaction Ongoing,
  it is aborted first (with a bumped epoch) and the caller gets CONCURRENT_TRANSACTIONS
  and retries. KIP-360: a producer that names its current id and epoch gets a bump too.
* AddPartitionsToTxn / AddOffsetsToTxn move Empty/Complete* to Ongoing and add partitions.
* EndTxn writes PrepareCommit/PrepareAbort, answers, writes the markers, then writes
  CompleteCommit/CompleteAbort.
* An Ongoing transaction older than its timeout is aborted by the coordinator (with an
  epoch bump, so the producer is fenced); ids idle for ``transactional.id.expiration.ms``
  are removed with a tombstone.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from kio.schema.errors import ErrorCode

from odradek import timeouts
from odradek.broker.group.partitioning import partition_for
from odradek.broker.producer_ids import ProducerIdsUnavailable
from odradek.broker.txn.log_records import (
    CorruptTxnRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from odradek.broker.txn.markers import MarkerWriter
from odradek.broker.txn.state import (
    COMPLETED,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TopicPartition,
    TransactionMetadata,
    TxnSnapshot,
    TxnState,
)

log = logging.getLogger(__name__)

_LOAD_YIELD_EVERY = 500
# Testing aid only: hold markers this long after a client's EndTxn was answered, so a test
# can kill the broker while a transaction is in PrepareCommit/PrepareAbort.
DEBUG_MARKER_DELAY_ENV = "ODRADEK_DEBUG_TXN_MARKER_DELAY_MS"


class StateLog(Protocol):
    """How the coordinator reads and writes ``__transaction_state`` (TxnStateTopic)."""

    num_partitions: int

    def leader_epoch(self, partition: int) -> int: ...

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int: ...

    def read(self, partition: int) -> Iterable[tuple[int, bytes, bytes | None]]: ...


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms

    @classmethod
    def from_broker_config(cls, get: Callable[[str], object]) -> TxnConfig:
        return cls(
            max_timeout_ms=int(get("transaction.max.timeout.ms")),  # type: ignore[call-overload]
            id_expiration_ms=int(get("transactional.id.expiration.ms")),  # type: ignore[call-overload]
        )


@dataclass(frozen=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator:
    def __init__(
        self,
        state_log: StateLog,
        markers: MarkerWriter,
        next_producer_id: Callable[[], Awaitable[int] | int],
        config: TxnConfig,
        *,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.log = state_log
        self.markers = markers
        self.next_producer_id = next_producer_id
        self.config = config
        self.clock = clock
        self._txns: dict[str, TransactionMetadata] = {}
        self._owned: set[int] = set()
        self._loading: set[int] = set()
        self._partition_epoch: dict[int, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Until the broker has loaded the partitions it leads, every id is "loading": a
        # client that arrives early retries instead of looking for another coordinator.
        self.starting = False
        self._marker_delay_s = int(os.environ.get(DEBUG_MARKER_DELAY_ENV, "0") or 0) / 1000

    # == ownership =================================================================

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.log.num_partitions)

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        """None if this broker coordinates the id now; else the error to answer."""
        partition = self.partition_for(transactional_id)
        if self.starting or partition in self._loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self._owned:
            return ErrorCode.not_coordinator
        return None

    def is_loading(self) -> bool:
        return self.starting or bool(self._loading)

    def transactions(self) -> list[TransactionMetadata]:
        return list(self._txns.values())

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        return self._txns.get(transactional_id)

    def schedule_load(self, partition: int, leader_epoch: int) -> bool:
        """This broker became the partition's leader (at ``leader_epoch``): True if the
        caller must now run :meth:`load_partition`; its ids answer
        COORDINATOR_LOAD_IN_PROGRESS from now on. A partition already loaded (the
        controller bumped the epoch of a leader that did not change, e.g. when a follower
        died) only takes the new coordinator epoch."""
        if partition in self._owned:
            for meta in self._txns.values():
                if self.partition_for(meta.transactional_id) == partition:
                    meta.coordinator_epoch = max(meta.coordinator_epoch, leader_epoch)
            return False
        if partition in self._loading:
            return False
        self._loading.add(partition)
        return True

    async def load_partition(self, partition: int, leader_epoch: int | None = None) -> None:
        if partition in self._owned:
            return
        if partition in self._loading and leader_epoch is None:
            return  # a load is under way
        epoch = self._partition_epoch.get(partition, 0) + 1
        self._partition_epoch[partition] = epoch
        self._loading.add(partition)
        loaded: dict[str, TxnSnapshot] = {}
        count = 0
        try:
            for offset, key, value in self.log.read(partition):
                count += 1
                if count % _LOAD_YIELD_EVERY == 0:
                    await asyncio.sleep(0)
                    if self._partition_epoch.get(partition) != epoch:
                        return
                try:
                    txn_id = decode_key(key)
                    if value is None:
                        loaded.pop(txn_id, None)
                    else:
                        loaded[txn_id] = decode_value(value)
                except CorruptTxnRecordError as exc:
                    log.error(
                        "skipping malformed record at offset %d of __transaction_state-%d: %s",
                        offset,
                        partition,
                        exc,
                    )
            if self._partition_epoch.get(partition) != epoch:
                return
            coordinator_epoch = self.log.leader_epoch(partition)
            if leader_epoch is not None:
                coordinator_epoch = max(coordinator_epoch, leader_epoch)
            for txn_id, snapshot in loaded.items():
                if snapshot.state is TxnState.DEAD:
                    continue
                meta = TransactionMetadata(txn_id, snapshot, coordinator_epoch=coordinator_epoch)
                self._txns[txn_id] = meta
                if snapshot.state in PREPARED:
                    # The client was told its EndTxn succeeded; finish what it asked for.
                    self._spawn(self._complete(meta, snapshot.state is TxnState.PREPARE_COMMIT))
            self._owned.add(partition)
            log.info(
                "loaded %d transactional ids from %d records of __transaction_state-%d",
                len(loaded),
                count,
                partition,
            )
        finally:
            if self._partition_epoch.get(partition) == epoch:
                self._loading.discard(partition)

    def unload_partition(self, partition: int) -> None:
        self._partition_epoch[partition] = self._partition_epoch.get(partition, 0) + 1
        self._loading.discard(partition)
        self._owned.discard(partition)
        for txn_id in [t for t in self._txns if self.partition_for(t) == partition]:
            del self._txns[txn_id]

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            await timeouts.cancel_until_done(task)

    def _spawn(self, coroutine: object) -> None:
        task = asyncio.ensure_future(coroutine)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # == writes ====================================================================

    async def _write(self, meta: TransactionMetadata, snapshot: TxnSnapshot) -> ErrorCode:
        """Persist a prepared transition; on success it becomes current."""
        partition = self.partition_for(meta.transactional_id)
        value = None if snapshot.state is TxnState.DEAD else encode_value(snapshot)
        try:
            await self.log.append(partition, [(encode_key(meta.transactional_id), value)])
        except Exception as exc:
            meta.abandon()
            log.warning("writing transaction state of %s failed: %r", meta.transactional_id, exc)
            return _append_error(getattr(exc, "error_code", -1))
        if self._txns.get(meta.transactional_id) is not meta:
            return ErrorCode.not_coordinator  # unloaded meanwhile
        meta.complete(snapshot)
        return ErrorCode.none

    # == InitProducerId ===============================================================

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitResult:
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return InitResult(error)
        now = self.clock()
        meta = self._txns.get(transactional_id)
        if meta is None:
            try:
                new_id = await self._new_producer_id()
            except ProducerIdsUnavailable:
                return InitResult(ErrorCode.coordinator_load_in_progress)
            # Claiming ids may have waited on ZooKeeper: the partition may have moved, or
            # a concurrent InitProducerId may have created the id meanwhile.
            error = self.coordinator_error(transactional_id)
            if error is not None:
                return InitResult(error)
            meta = self._txns.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(
                transactional_id,
                TxnSnapshot(
                    producer_id=new_id,
                    producer_epoch=NO_PRODUCER_EPOCH,
                    timeout_ms=timeout_ms,
                    state=TxnState.EMPTY,
                    partitions=frozenset(),
                    start_timestamp_ms=-1,
                    last_update_timestamp_ms=now,
                ),
                coordinator_epoch=self.log.leader_epoch(self.partition_for(transactional_id)),
            )
            self._txns[transactional_id] = meta
        if meta.pending_state is not None:
            return InitResult(ErrorCode.concurrent_transactions)
        current = meta.current
        if expected_producer_id != NO_PRODUCER_ID and not (
            expected_producer_id == current.producer_id
            and expected_epoch in (current.producer_epoch, current.last_producer_epoch)
        ):
            return InitResult(ErrorCode.producer_fenced)
        state = current.state
        if state in PREPARED:
            return InitResult(ErrorCode.concurrent_transactions)
        if state is TxnState.ONGOING:
            # A previous instance left a transaction open: fence it and abort it; the caller
            # retries and then gets its bump.
            await self._abort_with_fence(meta)
            return InitResult(ErrorCode.concurrent_transactions)
        if state not in (TxnState.EMPTY, *COMPLETED):
            return InitResult(ErrorCode.unknown_server_error)
        if (
            expected_producer_id != NO_PRODUCER_ID
            and expected_epoch == current.last_producer_epoch
            and expected_epoch != current.producer_epoch
        ):
            # A retry of a bump that already happened: answer the same epoch again.
            return InitResult(ErrorCode.none, current.producer_id, current.producer_epoch)
        if current.producer_epoch >= MAX_EPOCH - 1:
            try:
                producer_id, epoch = await self._new_producer_id(), 0
            except ProducerIdsUnavailable:
                return InitResult(ErrorCode.coordinator_load_in_progress)
            if meta.pending_state is not None or self._txns.get(transactional_id) is not meta:
                return InitResult(ErrorCode.concurrent_transactions)
        else:
            producer_id, epoch = current.producer_id, current.producer_epoch + 1
        snapshot = meta.prepare(
            TxnState.EMPTY,
            producer_id=producer_id,
            producer_epoch=epoch,
            last_producer_epoch=current.producer_epoch,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_timestamp_ms=-1,
            last_update_timestamp_ms=now,
        )
        error = await self._write(meta, snapshot)
        if error is not ErrorCode.none:
            return InitResult(error)
        return InitResult(ErrorCode.none, producer_id, epoch)

    async def _new_producer_id(self) -> int:
        produced = self.next_producer_id()
        return await produced if inspect.isawaitable(produced) else produced  # type: ignore[return-value]

    # == AddPartitionsToTxn / AddOffsetsToTxn =============================================

    def check_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TransactionMetadata | None]:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error, None
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced, None
        if meta.pending_state is not None or meta.state in PREPARED:
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, meta

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> ErrorCode:
        error, meta = self.check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        wanted = frozenset(partitions)
        current = meta.current
        if current.state is TxnState.ONGOING and wanted <= current.partitions:
            return ErrorCode.none
        if current.state not in (TxnState.ONGOING, TxnState.EMPTY, *COMPLETED):
            return ErrorCode.invalid_txn_state
        now = self.clock()
        ongoing = current.state is TxnState.ONGOING
        snapshot = meta.prepare(
            TxnState.ONGOING,
            partitions=(current.partitions if ongoing else frozenset()) | wanted,
            start_timestamp_ms=current.start_timestamp_ms if ongoing else now,
            last_update_timestamp_ms=now,
        )
        return await self._write(meta, snapshot)

    # == EndTxn ===================================================================

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if meta.pending_state is not None:
            return ErrorCode.concurrent_transactions
        state = meta.state
        if state is TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            error = await self._prepare_end(meta, target)
            if error is ErrorCode.none:
                self._spawn(self._complete(meta, commit, delay=self._marker_delay_s))
            return error
        if state is TxnState.COMPLETE_COMMIT:
            return ErrorCode.none if commit else ErrorCode.invalid_txn_state
        if state is TxnState.COMPLETE_ABORT:
            return ErrorCode.none if not commit else ErrorCode.invalid_txn_state
        if state is TxnState.PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state
        if state is TxnState.PREPARE_ABORT:
            return ErrorCode.concurrent_transactions if not commit else ErrorCode.invalid_txn_state
        return ErrorCode.invalid_txn_state  # Empty: nothing to end

    async def _prepare_end(
        self, meta: TransactionMetadata, target: TxnState, **changes: object
    ) -> ErrorCode:
        snapshot = meta.prepare(target, last_update_timestamp_ms=self.clock(), **changes)
        return await self._write(meta, snapshot)

    async def _complete(self, meta: TransactionMetadata, commit: bool, delay: float = 0) -> None:
        """Write the markers of a prepared transaction, then its Complete* state."""
        if delay > 0:
            await asyncio.sleep(delay)
        attempt = 0
        remaining = set(meta.current.partitions)
        while self._txns.get(meta.transactional_id) is meta:
            current = meta.current
            results = await self.markers.write_markers(
                producer_id=current.producer_id,
                producer_epoch=current.producer_epoch,
                coordinator_epoch=meta.coordinator_epoch,
                commit=commit,
                partitions=remaining,
            )
            remaining = {tp for tp, code in results.items() if code != 0}
            if not remaining:
                break
            fenced = {tp: code for tp, code in results.items() if code in _MARKERS_FENCED}
            if fenced:
                # A newer coordinator (or producer epoch) has taken over: this one must not
                # complete the transaction; it is about to lose the partition (Kafka drops
                # the pending markers the same way).
                log.warning(
                    "markers of %s were fenced (%s): leaving the transaction to the new "
                    "coordinator",
                    meta.transactional_id,
                    fenced,
                )
                return
            attempt += 1
            # A partition that cannot take its marker now (its leader moved, storage
            # offline, ...): retry just those, as Kafka's marker channel does, until they
            # can or the id moves away.
            await asyncio.sleep(min(0.1 * attempt, 2.0))
        else:
            return
        target = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        while self._txns.get(meta.transactional_id) is meta:
            if meta.pending_state is None:
                snapshot = meta.prepare(
                    target,
                    partitions=frozenset(),
                    start_timestamp_ms=-1,
                    last_update_timestamp_ms=self.clock(),
                )
                if await self._write(meta, snapshot) is ErrorCode.none:
                    return
            await asyncio.sleep(0.1)

    async def _abort_with_fence(self, meta: TransactionMetadata) -> ErrorCode:
        """Abort an Ongoing transaction on the coordinator's own initiative, bumping the
        epoch (PrepareEpochFence) so its producer can no longer write or commit."""
        current = meta.current
        epoch = current.producer_epoch
        if epoch < MAX_EPOCH:
            epoch += 1
        # PrepareEpochFence lives only in memory (Kafka never writes it): it becomes
        # PrepareAbort with the bumped epoch in the same step.
        meta.current = _with(current, state=TxnState.PREPARE_EPOCH_FENCE)
        error = await self._prepare_end(
            meta,
            TxnState.PREPARE_ABORT,
            producer_epoch=epoch,
            last_producer_epoch=current.producer_epoch,
        )
        if error is not ErrorCode.none:
            meta.current = current
            return error
        self._spawn(self._complete(meta, commit=False))
        return ErrorCode.none

    # == timeouts and expiry ==============================================================

    async def abort_timed_out_transactions(self) -> int:
        """Abort every Ongoing transaction older than its timeout; how many were."""
        now = self.clock()
        aborted = 0
        for meta in list(self._txns.values()):
            current = meta.current
            if (
                current.state is TxnState.ONGOING
                and meta.pending_state is None
                and current.start_timestamp_ms + current.timeout_ms < now
            ):
                log.info(
                    "aborting transaction of %s (producer %d epoch %d): older than %d ms",
                    meta.transactional_id,
                    current.producer_id,
                    current.producer_epoch,
                    current.timeout_ms,
                )
                if await self._abort_with_fence(meta) is ErrorCode.none:
                    aborted += 1
        return aborted

    async def remove_expired_transactional_ids(self) -> int:
        now = self.clock()
        removed = 0
        for meta in list(self._txns.values()):
            current = meta.current
            if (
                (current.state is TxnState.EMPTY or current.state in COMPLETED)
                and meta.pending_state is None
                and current.last_update_timestamp_ms + self.config.id_expiration_ms <= now
            ):
                snapshot = meta.prepare(TxnState.DEAD, last_update_timestamp_ms=now)
                if await self._write(meta, snapshot) is ErrorCode.none:
                    self._txns.pop(meta.transactional_id, None)
                    removed += 1
        return removed


def _with(snapshot: TxnSnapshot, **changes: object) -> TxnSnapshot:
    return replace(snapshot, **changes)  # type: ignore[arg-type]


# Marker errors that mean this coordinator is stale: INVALID_PRODUCER_EPOCH,
# TRANSACTION_COORDINATOR_FENCED.
_MARKERS_FENCED = frozenset({47, 52})

# Append failures (Kafka error codes) and what a transactional client is told instead, as
# Kafka's TransactionStateManager maps them: retry elsewhere or later.
_APPEND_ERRORS = {
    3: ErrorCode.coordinator_not_available,  # UNKNOWN_TOPIC_OR_PARTITION
    19: ErrorCode.coordinator_not_available,  # NOT_ENOUGH_REPLICAS
    20: ErrorCode.coordinator_not_available,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    7: ErrorCode.coordinator_not_available,  # REQUEST_TIMED_OUT
    6: ErrorCode.not_coordinator,  # NOT_LEADER_OR_FOLLOWER
    56: ErrorCode.not_coordinator,  # KAFKA_STORAGE_ERROR
}


def _append_error(code: int) -> ErrorCode:
    return _APPEND_ERRORS.get(code, ErrorCode.unknown_server_error)
