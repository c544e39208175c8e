"""The producer: per-partition batching, a sender task, retries and idempotence.

How a record travels (the Java producer's design, in asyncio):

1. :meth:`Producer.send` picks a partition (:mod:`odradek.client.partitioner`), appends the record
   to the open batch of that partition (the *accumulator*) and returns a future. A batch closes
   when the next record would push it past ``batch_size`` bytes.
2. One sender task, owned by the producer, drains batches that are full, older than
   ``linger_ms``, or wanted now (:meth:`flush`, :meth:`close`). It groups them by partition
   leader into one Produce request per broker (one batch per partition per request, at most
   ``max_request_size`` bytes) with at most ``max_in_flight_requests_per_connection`` requests
   outstanding per broker.
3. A response resolves each record's future with its offset, or sends the batch back to the
   front of its partition's queue for a retry (retriable error, lost connection), after
   ``retry_backoff_ms`` and within ``delivery_timeout_ms`` of the batch's creation.

Idempotence (``enable_idempotence``, the default with ``acks="all"``): the producer gets a
producer id and epoch from InitProducerId; every batch carries them plus the sequence number
of its first record, counted per partition. The broker drops duplicates and rejects gaps, so
retries neither duplicate nor reorder records. Ordering rules, as in the Java client's
TransactionManager:

* a partition has at most 5 batches in flight;
* a batch being retried is sent only when nothing earlier of its partition is in flight, so
  retries go out in sequence order;
* OUT_OF_ORDER_SEQUENCE_NUMBER on a batch that is not the next expected one is a consequence of
  an earlier failure and is simply retried; on the next expected batch it is a real gap;
* UNKNOWN_PRODUCER_ID means the broker forgot the producer (its state was removed with the log
  head by retention, or lost);
* after a real gap, UNKNOWN_PRODUCER_ID, or a batch that failed for good after taking a
  sequence, the producer bumps its epoch (locally, as Java does for a non-transactional
  producer; a fresh InitProducerId when the epoch would overflow) and, once that partition has
  nothing in flight, renumbers its queued batches from sequence 0 under the new epoch. Other
  partitions finish their in-flight batches under the old epoch and then restart at 0.

Producer id, epoch and base sequence are stamped into an encoded batch in place (and its CRC
recomputed), so a retried compressed batch is never re-compressed.

``acks=0`` writes requests the broker never answers: futures resolve with offset -1 as soon as
the bytes are written. Idempotence needs ``acks="all"``; with other acks it is switched off, as
the Java client does when idempotence was not asked for explicitly.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek import timeouts
from odradek.client.core import METADATA_REFRESH_ERRORS, ClientUser, KafkaClient
from odradek.client.entities import build_request, epoch_ms
from odradek.client.errors import (
    ClientError,
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionError,
    TransactionFatalError,
    TransactionStateError,
)
from odradek.client.partitioner import Partitioner, PartitionerFn
from odradek.client.security import ClientSecurity
from odradek.client.transactions import BUMP_CODES, FATAL_CODES, State, TransactionManager
from odradek.client.versions import INIT_PRODUCER_ID, PRODUCE
from odradek.records.appender import RecordsAppender
from odradek.records.batch import EncodedRecords, Record, build_batch, build_encoded_batch
from odradek.records.compression import Compression
from odradek.records.header import compute_crc

if TYPE_CHECKING:
    from odradek.client.assignors import GroupMetadata
    from odradek.client.group_admin import OffsetAndMetadata

log = logging.getLogger(__name__)

__all__ = ["Producer", "RecordMetadata"]

TopicPartition = tuple[str, int]

MAX_SEQUENCE = 2**31  # sequences wrap at int32 max, as in Kafka
MAX_EPOCH = 32767
MAX_IN_FLIGHT_PER_PARTITION = 5  # what brokers keep for duplicate detection
_RECORD_OVERHEAD = 21  # length, attributes, deltas and key/value lengths (varints, worst case)
_BATCH_OVERHEAD = 61
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43
_PRODUCER_FIELDS_POS = 43
_CRC_POS = 17


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written. ``offset`` is -1 when unknown (acks=0, duplicate)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


# RecordMetadata's generated frozen __init__ (object.__setattr__ per field) is most of the
# cost of resolving a record's future; complete() fills the slots directly instead.
_METADATA_SLOTS = tuple(
    RecordMetadata.__dict__[name].__set__
    for name in ("topic", "partition", "offset", "timestamp_ms")
)


def _record_size(record: Record) -> int:
    size = _RECORD_OVERHEAD
    if record.key is not None:
        size += len(record.key)
    if record.value is not None:
        size += len(record.value)
    for name, value in record.headers:
        size += 10 + len(name.encode("utf-8", "surrogateescape"))
        if value is not None:
            size += len(value)
    return size


class _Batch:
    """Records bound for one partition, sent together, acknowledged together."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "closed",
        "created",
        "done",
        "encoded",
        "futures",
        "producer_epoch",
        "producer_id",
        "records",
        "retry_after",
        "sequence_reset",
        "size",
        "tp",
    )

    def __init__(self, tp: TopicPartition, now: float) -> None:
        self.tp = tp
        # send() encodes each record as it comes (RecordsAppender); send_batch() hands in
        # Records or an already encoded section.
        self.records: RecordsAppender | list[Record] | EncodedRecords = RecordsAppender()
        # One per record from send(); send_batch() only wants the first record's, so the
        # rest are None (a future per record was half the Spark sink's CPU).
        self.futures: list[asyncio.Future[RecordMetadata] | None] = []
        self.size = _BATCH_OVERHEAD
        self.created = now
        self.closed = False
        self.attempts = 0
        self.retry_after = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.sequence_reset = False
        self.encoded: bytearray | None = None
        # Resolved when every record's future is; flush() waits on these, one per batch.
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence >= 0

    def fail(self, error: BaseException) -> None:
        for future in self.futures:
            if future is not None and not future.done():
                future.set_exception(error)
        if not self.done.done():
            self.done.set_result(None)

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        topic, partition = self.tp
        records = self.records
        if log_append_time_ms >= 0:
            timestamps: Sequence[int] = [log_append_time_ms] * len(records)
        elif isinstance(records, RecordsAppender):
            timestamps = records.timestamps
        elif isinstance(records, EncodedRecords):
            timestamps = [records.base_timestamp] * len(records)
        else:
            timestamps = [r.timestamp_ms or -1 for r in records]
        new = object.__new__
        set_topic, set_partition, set_offset, set_timestamp = _METADATA_SLOTS
        for index, future in enumerate(self.futures):
            if future is None or future.done():
                continue
            metadata = new(RecordMetadata)
            set_topic(metadata, topic)
            set_partition(metadata, partition)
            set_offset(metadata, base_offset + index if base_offset >= 0 else -1)
            set_timestamp(metadata, timestamps[index])
            future.set_result(metadata)
        if not self.done.done():
            self.done.set_result(None)


class _PartitionState:
    """Idempotence bookkeeping for one partition."""

    __slots__ = (
        "in_flight",
        "last_acked_offset",
        "last_acked_sequence",
        "needs_rewrite",
        "next_sequence",
        "producer_epoch",
        "producer_id",
    )

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.last_acked_offset = -1
        self.in_flight: list[_Batch] = []  # on the wire, in sequence order
        self.needs_rewrite = False


def _parse_acks(acks: int | str) -> int:
    text = str(acks).strip().lower()
    if text == "all":
        return -1
    try:
        value = int(text)
    except ValueError:
        value = None
    if value not in (-1, 0, 1):
        raise ValueError(f"acks must be 0, 1, -1 or 'all', not {acks!r}")
    return value


class Producer(ClientUser):
    """Async Kafka producer: ``async with Producer("host:9092") as p: await p.send_and_wait(...)``.

    Configuration names and defaults are the Java producer's (``linger.ms`` -> ``linger_ms``).
    """

    def __init__(
        self,
        client_or_bootstrap: KafkaClient | str | Sequence[str],
        *,
        acks: int | str = "all",
        compression_type: str = "none",
        linger_ms: int = 5,
        batch_size: int = 16384,
        max_request_size: int = 1048576,
        enable_idempotence: bool = True,
        retries: int = 2**31 - 1,
        delivery_timeout_ms: int = 120000,
        partitioner: PartitionerFn | str = "sticky",
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        max_in_flight_requests_per_connection: int = 5,
        buffer_memory: int = 33554432,
        max_block_ms: int = 60000,
        client_id: str = "odradek-producer",
        security: ClientSecurity | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
    ) -> None:
        self.acks = _parse_acks(acks)
        if transactional_id is not None:
            # Java: "Cannot set a transactional.id without also enabling idempotence."
            if not enable_idempotence or self.acks != -1:
                raise ValueError("a transactional producer needs enable_idempotence and acks='all'")
            if transaction_timeout_ms <= 0:
                raise ValueError("transaction_timeout_ms must be > 0")
        self.compression = Compression.from_name(compression_type)
        if linger_ms < 0 or batch_size < 0 or max_request_size <= 0 or retries < 0:
            raise ValueError("linger_ms, batch_size and retries must be >= 0, max_request_size > 0")
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise ValueError(
                "delivery_timeout_ms should be at least linger_ms + request_timeout_ms "
                f"({linger_ms} + {request_timeout_ms})"
            )
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be >= 1")
        self.idempotent = enable_idempotence and self.acks == -1
        if enable_idempotence and not self.idempotent:
            log.info("idempotence disabled: it needs acks='all' (acks=%s)", acks)
        if self.idempotent and max_in_flight_requests_per_connection > MAX_IN_FLIGHT_PER_PARTITION:
            raise ValueError("an idempotent producer allows at most 5 requests in flight")
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self.max_request_size = max_request_size
        self.retries = retries
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_in_flight = max_in_flight_requests_per_connection
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.partitioner = Partitioner(partitioner)
        self._attach_client(
            client_or_bootstrap,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._queues: dict[TopicPartition, collections.deque[_Batch]] = {}
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._in_flight_per_node: collections.Counter[int] = collections.Counter()
        self._sent: set[_Batch] = set()  # batches on the wire, idempotent or not
        # topic -> (client metadata generation, all partitions, partitions with a leader)
        self._topic_cache: dict[str, tuple[int, list[int], list[int]]] = {}
        self._request_tasks: set[asyncio.Task[None]] = set()
        self._sender: asyncio.Task[None] | None = None
        self._refresh_task: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()
        self._space_freed = asyncio.Event()
        self._buffered = 0
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._started = False
        self.producer_id = -1
        self.producer_epoch = -1
        self._bump_requested = False
        self._fatal: ClientError | KafkaError | None = None
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._txn: TransactionManager | None = None
        if transactional_id is not None:
            self._txn = TransactionManager(
                self._client,
                transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                request_timeout_ms=request_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
                max_block_ms=max_block_ms,
                on_partitions_added=self._wakeup.set,
                on_error=self._txn_error,
            )

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, get a producer id if idempotent, start the sender task."""
        if self._started:
            return
        if self._closed:
            raise ClientError("producer is closed")
        await self._client.start()
        if self.idempotent and self._txn is None:  # transactional: init_transactions() does it
            await self._init_producer_id()
        self._sender = asyncio.create_task(self._run_sender(), name="odradek-producer-sender")
        # send() makes its futures on this loop: asyncio.get_running_loop() checks getpid(),
        # a system call per record.
        self._loop = asyncio.get_running_loop()
        self._started = True

    async def close(self, timeout_ms: int | None = None) -> None:
        """Send everything buffered (waiting up to ``timeout_ms``), then stop. Idempotent."""
        if self._closed:
            return
        self._closing = True
        self._wakeup.set()
        if self._sender is not None:
            try:
                await timeouts.wait_for(
                    asyncio.shield(self._sender),
                    None if timeout_ms is None else timeout_ms / 1000,
                )
            except TimeoutError:
                pass
            finally:
                # Cancel until it ends: on Python 3.11 the sender's asyncio.wait_for on its
                # wake-up event swallows a cancellation that meets the event being set.
                while not self._sender.done():
                    self._sender.cancel()
                    await asyncio.wait((self._sender,), timeout=0.1)
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sender
        for task in list(self._request_tasks):
            task.cancel()
        for task in list(self._request_tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._txn is not None:
            await self._txn.close()
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh_task
        error = ClientError("producer closed before the record was acknowledged")
        for queue in self._queues.values():
            for batch in queue:
                batch.fail(error)
        self._queues.clear()
        for batch in list(self._sent):  # their requests were cancelled above
            batch.fail(error)
        self._sent.clear()
        self._closed = True
        await self._close_client()

    # -- sending -------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves to its RecordMetadata once acked.

        Raises KafkaError MESSAGE_TOO_LARGE if the record alone exceeds ``max_request_size``,
        KafkaTimeoutError if the topic's metadata or buffer space do not come within
        ``max_block_ms``, ValueError/TypeError for malformed arguments.
        """
        self._check_open()
        if self._txn is not None:
            self._txn.check("send", State.IN_TRANSACTION)
        if (
            type(value) is bytes
            and (key is None or type(key) is bytes)
            and not headers
            and timestamp_ms is None
        ):
            # The common case, without the general path's checks and copies.
            headers, timestamp_ms = (), int(time.time() * 1000)
            size = _RECORD_OVERHEAD + len(value) + (len(key) if key is not None else 0)
        else:
            record = self._make_record(value, key, headers, timestamp_ms)
            value, key, headers = record.value, record.key, record.headers
            timestamp_ms = record.timestamp_ms
            size = _record_size(record)
        if size + _BATCH_OVERHEAD > min(self.max_request_size, self.buffer_memory):
            self._check_size(size + _BATCH_OVERHEAD)
        # _choose_partition inline while the topic's metadata is cached: a coroutine per
        # record costs as much as encoding it.
        cached = self._topic_cache.get(topic)
        if (
            cached is None
            or cached[0] != self._client.metadata_generation
            or not (
                partition is None or (type(partition) is int and 0 <= partition < len(cached[1]))
            )
        ):
            partition = await self._choose_partition(topic, key, partition)
        elif partition is None:
            partition = self.partitioner.partition(topic, key, cached[1], cached[2])
        if self._buffered + size <= self.buffer_memory:
            self._buffered += size
        else:
            await self._reserve(size, time.monotonic() + self.max_block_ms / 1000)
        future: asyncio.Future[RecordMetadata] = asyncio.Future(loop=self._loop)
        if self._append(topic, partition, value, key, headers, timestamp_ms, size, future):
            # A batch just filled up. Let the sender ship it now, while the caller goes on
            # filling the next: a caller sending in a tight loop never yields otherwise, and
            # everything would wait for flush() (aiokafka's send waits for the drain there).
            await asyncio.sleep(0)
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """:meth:`send` and wait for the acknowledgement."""
        future = await self.send(
            topic, value, key, partition=partition, headers=headers, timestamp_ms=timestamp_ms
        )
        return await future

    async def send_batch(
        self, topic: str, partition: int, records: Sequence[Record] | EncodedRecords
    ) -> RecordMetadata:
        """Send ``records`` to (topic, partition) as one batch, now; return the first record's
        metadata (its offset is the batch's base offset).

        ``records`` may come already encoded (:class:`EncodedRecords`, built in bulk by the
        Spark sink): they are then sent as they are, with their own timestamps.

        The batch is queued behind anything already buffered for that partition, so ordering
        and idempotence hold; it is never merged with other records.
        """
        self._check_open()
        if self._txn is not None:
            self._txn.check("send", State.IN_TRANSACTION)
        if not records:
            raise ValueError("send_batch needs at least one record")
        copies: list[Record] | EncodedRecords
        if isinstance(records, EncodedRecords):
            copies = records
            size = _BATCH_OVERHEAD + len(records.section)
        else:
            now_ms = int(time.time() * 1000)
            copies = [
                self._make_record(
                    r.value,
                    r.key,
                    r.headers,
                    r.timestamp_ms if r.timestamp_ms is not None else now_ms,
                )
                for r in records
            ]
            size = _BATCH_OVERHEAD + sum(_record_size(r) for r in copies)
        self._check_size(size)
        partition = await self._choose_partition(topic, None, partition)
        await self._reserve(size - _BATCH_OVERHEAD, time.monotonic() + self.max_block_ms / 1000)
        tp = (topic, partition)
        queue = self._queues.setdefault(tp, collections.deque())
        if queue and not queue[-1].closed:
            self._close_batch(queue[-1])
        batch = _Batch(tp, time.monotonic())
        loop = asyncio.get_running_loop()
        batch.records = copies
        first: asyncio.Future[RecordMetadata] = loop.create_future()
        batch.futures = [first, *([None] * (len(copies) - 1))]
        batch.size = size
        batch.closed = True
        queue.append(batch)
        self._wakeup.set()
        return await first

    async def flush(self) -> None:
        """Send every buffered record now and wait until each is acknowledged or failed."""
        self._check_open()
        futures = [b.done for queue in self._queues.values() for b in queue]
        futures += [b.done for b in self._sent]
        if not futures:
            return
        self._flushing += 1
        self._wakeup.set()
        try:
            await asyncio.gather(*futures, return_exceptions=True)
        finally:
            self._flushing -= 1

    # -- transactions --------------------------------------------------------------------------

    def _need_txn(self, what: str) -> TransactionManager:
        self._check_open()
        if self._txn is None:
            raise TransactionStateError(f"cannot {what}: the producer has no transactional_id")
        return self._txn

    async def init_transactions(self) -> None:
        """Get the producer id and epoch for ``transactional_id`` (InitProducerId): fences
        any older producer with the same id and completes (aborts) what it left open. Call
        once, before the first transaction; may be called again after a KafkaTimeoutError."""
        txn = self._need_txn("init_transactions")
        txn.check("init_transactions", State.UNINITIALIZED, State.INITIALIZING)
        txn.state = State.INITIALIZING
        try:
            self.producer_id, self.producer_epoch = await txn.init()
        except TransactionError as exc:
            # Nothing to abort yet: any error but a timeout leaves the producer unusable.
            fatal = exc if not exc.abortable else TransactionFatalError(exc.code, exc.message)
            txn.fail(fatal)
            raise fatal from None
        txn.state = State.READY
        self._wakeup.set()

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        txn = self._need_txn("begin_transaction")
        txn.check("begin_transaction", State.READY)
        txn.begin()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: GroupMetadata | str,
    ) -> None:
        """Commit a consumer group's ``offsets`` (the next offset to read) as part of the
        transaction: they count only if it commits. Pass the consumer's
        ``group_metadata()`` so the group coordinator can fence a consumer that lost its
        partitions in a rebalance (KIP-447); a bare group id commits without that check."""
        txn = self._need_txn("send_offsets_to_transaction")
        txn.check("send_offsets_to_transaction", State.IN_TRANSACTION)
        if isinstance(group_metadata, str):
            from odradek.client.assignors import GroupMetadata as Metadata

            group_metadata = Metadata(group_metadata, -1, "", None)
        if group_metadata is None or not group_metadata.group_id:
            raise ValueError("send_offsets_to_transaction needs the consumer's group metadata")
        if not offsets:
            return
        try:
            await txn.send_offsets(offsets, group_metadata)
        except TransactionError as exc:
            txn.fail(exc)
            raise

    async def commit_transaction(self) -> None:
        """Send everything buffered, then commit (EndTxn). Raises the pending error if a
        record or an offset commit failed: a :class:`TransactionAbortableError` means
        ``abort_transaction()`` and try again, a :class:`TransactionFatalError` (such as
        :class:`ProducerFencedError`) means close the producer. After a KafkaTimeoutError
        the call may be repeated."""
        txn = self._need_txn("commit_transaction")
        txn.check("commit_transaction", State.IN_TRANSACTION, State.COMMITTING)
        await self.flush()
        await txn.wait_for_partitions()
        txn.check("commit_transaction", State.IN_TRANSACTION, State.COMMITTING)
        txn.state = State.COMMITTING
        try:
            await txn.end(commit=True)
        except TransactionError as exc:
            txn.fail(exc)
            raise

    async def abort_transaction(self) -> None:
        """Drop what is still buffered, wait for what is in flight, then abort (EndTxn):
        ``read_committed`` consumers never see the transaction's records. Also the way
        out of a :class:`TransactionAbortableError`."""
        txn = self._need_txn("abort_transaction")
        txn.check(
            "abort_transaction", State.IN_TRANSACTION, State.ABORTING, State.ABORTABLE_ERROR
        )
        txn.state = State.ABORTING
        self._fail_queued(
            TransactionAbortableError(
                ErrorCode.operation_not_attempted, "the transaction was aborted"
            )
        )
        in_flight = [b.done for b in self._sent]
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
        await txn.wait_for_partitions()
        try:
            await txn.end(commit=False)
            if txn.bump_needed:
                # Sequences of failed batches may be in any state: restart from 0 under a new
                # epoch the coordinator hands out (KIP-360).
                self.producer_id, self.producer_epoch = await txn.init()
        except TransactionError as exc:
            if not exc.abortable:
                txn.fail(exc)
            raise
        self._wakeup.set()

    def _txn_error(self, error: TransactionError) -> None:
        """The transaction entered an error state: nothing queued may go out now."""
        if not error.abortable:
            self._fatal = error
        self._fail_queued(error)
        self._wakeup.set()

    def _fail_queued(self, error: BaseException) -> None:
        for tp, queue in self._queues.items():
            for batch in queue:
                if batch.has_sequence:
                    self._request_epoch_bump(self._state(tp))
                batch.fail(error)
                self._release(batch)
            queue.clear()

    def _produce_error(self, code: int, message: str) -> KafkaError:
        """A failed batch's exception; in a transaction typed as the Java client does."""
        if self._txn is None:
            return KafkaError(code, message)
        if code == ErrorCode.producer_fenced:
            return ProducerFencedError(code, message)
        if code == ErrorCode.invalid_producer_epoch:
            return InvalidProducerEpochError(code, message)
        if code in FATAL_CODES:
            return TransactionFatalError(code, message)
        if code in BUMP_CODES:
            self._txn.bump_needed = True
        return TransactionAbortableError(code, message)

    # -- accumulator ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closing or self._closed:
            raise ClientError("producer is closed")
        if not self._started:
            raise ClientError("producer not started: call 'await producer.start()' first")

    @staticmethod
    def _make_record(
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp_ms: int | None,
    ) -> Record:
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"record value must be bytes or None, not {type(value).__name__}")
        if key is not None and not isinstance(key, bytes | bytearray | memoryview):
            raise TypeError(f"record key must be bytes or None, not {type(key).__name__}")
        checked = []
        for item in headers:
            if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str):
                raise TypeError(f"a header must be a (str, bytes | None) pair, not {item!r}")
            if item[1] is not None and not isinstance(item[1], bytes | bytearray):
                raise TypeError(f"header {item[0]!r} value must be bytes or None")
            checked.append((item[0], None if item[1] is None else bytes(item[1])))
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        elif not isinstance(timestamp_ms, int) or timestamp_ms < 0:
            raise ValueError(f"timestamp_ms must be a non-negative int, not {timestamp_ms!r}")
        return Record(
            value=None if value is None else bytes(value),
            key=None if key is None else bytes(key),
            headers=tuple(checked),
            timestamp_ms=timestamp_ms,
        )

    def _check_size(self, size: int) -> None:
        if size <= self.max_request_size and size <= self.buffer_memory:
            return
        if size > self.max_request_size:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"the record is {size} bytes, more than max_request_size={self.max_request_size}",
            )
        if size > self.buffer_memory:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"the record is {size} bytes, more than buffer_memory={self.buffer_memory}",
            )

    async def _choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        cached = self._topic_cache.get(topic)
        if cached is not None and cached[0] == self._client.metadata_generation:
            _, all_partitions, available = cached
        else:
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"topic must be a non-empty string, not {topic!r}")
            deadline = time.monotonic() + self.max_block_ms / 1000
            all_partitions, available = await self._partitions_of(topic, deadline)
        if partition is not None:
            if not isinstance(partition, int) or not 0 <= partition < len(all_partitions):
                raise ValueError(
                    f"partition {partition!r} is not in the range [0, {len(all_partitions)}) "
                    f"of topic {topic!r}"
                )
            return partition
        return self.partitioner.partition(topic, key, all_partitions, available)

    async def _partitions_of(self, topic: str, deadline: float) -> tuple[list[int], list[int]]:
        """(all partitions, partitions with a leader) of ``topic``, waiting for its metadata."""
        generation = self._client.metadata_generation
        info = self._client.cached_topic(topic)
        while info is None:
            try:
                info = await self._client.topic(topic, allow_auto_create=True)
            except (KafkaError, ClientError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable:
                    raise
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(
                        f"topic {topic!r} not present in metadata after "
                        f"{self.max_block_ms} ms ({exc})"
                    ) from None
                await asyncio.sleep(self.retry_backoff_ms / 1000)
            generation = self._client.metadata_generation
        all_partitions = sorted(info.partitions)
        available = info.available_partitions()
        self._topic_cache[topic] = (generation, all_partitions, available)
        return all_partitions, available

    async def _reserve(self, size: int, deadline: float) -> None:
        """Back-pressure: wait (up to max_block_ms) until buffer_memory has room for ``size``."""
        while self._buffered + size > self.buffer_memory:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"no buffer space for a {size}-byte record after {self.max_block_ms} ms"
                )
            self._space_freed.clear()
            with contextlib.suppress(TimeoutError):
                await timeouts.wait_for(self._space_freed.wait(), remaining)
        self._buffered += size

    def _release(self, batch: _Batch) -> None:
        self._buffered -= batch.size - _BATCH_OVERHEAD
        self._space_freed.set()

    def _append(
        self,
        topic: str,
        partition: int,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp_ms: int,
        size: int,
        future: asyncio.Future[RecordMetadata],
    ) -> bool:
        """Add the record to the partition's open batch; True if that closed a batch."""
        tp = (topic, partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = collections.deque()
        batch = queue[-1] if queue and not queue[-1].closed else None
        closed = False
        if batch is not None and batch.records and batch.size + size > self.batch_size:
            self._close_batch(batch)
            batch, closed = None, True
        if batch is None:
            batch = _Batch(tp, time.monotonic())
            queue.append(batch)
            self._wakeup.set()  # a new batch starts a linger timer the sender must know about
        batch.records.append(value, key, headers, timestamp_ms)  # type: ignore[call-arg,union-attr]
        batch.futures.append(future)
        batch.size += size
        if batch.size >= self.batch_size:
            self._close_batch(batch)
            self._wakeup.set()
            closed = True
        return closed

    def _close_batch(self, batch: _Batch) -> None:
        if batch.closed:
            return
        batch.closed = True
        topic, partition = batch.tp
        info = self._client.cluster.topics.get(topic)
        if info is not None:
            self.partitioner.batch_closed(topic, partition, info.available_partitions())

    # -- idempotence ---------------------------------------------------------------------------

    async def _init_producer_id(self) -> None:
        deadline = time.monotonic() + self.max_block_ms / 1000
        while True:
            try:
                response = await self._client.request(
                    None,
                    INIT_PRODUCER_ID,
                    lambda v: build_request(
                        INIT_PRODUCER_ID,
                        v,
                        transactional_id=None,
                        transaction_timeout=60000,
                        producer_id=-1,
                        producer_epoch=-1,
                    ),
                )
                if response.error_code:
                    raise KafkaError(response.error_code, "InitProducerId")
            except (KafkaError, ClientError) as exc:
                retriable = isinstance(exc, ClientError) or exc.retriable
                if not retriable or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            self.producer_id = int(response.producer_id)
            self.producer_epoch = int(response.producer_epoch)
            log.debug("producer id %d epoch %d", self.producer_id, self.producer_epoch)
            return

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get(tp)
        if state is None:
            state = self._states[tp] = _PartitionState()
        return state

    def _request_epoch_bump(self, state: _PartitionState) -> None:
        state.needs_rewrite = True
        if self._txn is not None:
            # Only the coordinator hands out epochs of a transactional id: the next abort
            # asks for a bump (InitProducerId with the current id and epoch).
            self._txn.bump_needed = True
            return
        if (state.producer_id, state.producer_epoch) == (self.producer_id, self.producer_epoch):
            self._bump_requested = True

    async def _maybe_bump_epoch(self) -> None:
        if not self._bump_requested:
            return
        self._bump_requested = False
        if 0 <= self.producer_epoch < MAX_EPOCH:
            # Brokers accept a higher epoch of the same producer id starting at sequence 0.
            self.producer_epoch += 1
            log.info("bumped producer epoch to %d", self.producer_epoch)
        else:
            self.producer_id = self.producer_epoch = -1  # nothing is sent until a new id comes
            await self._init_producer_id()

    @staticmethod
    def _stamp(batch: _Batch, producer_id: int, epoch: int, base_sequence: int) -> None:
        batch.producer_id = producer_id
        batch.producer_epoch = epoch
        batch.base_sequence = base_sequence
        if batch.encoded is not None:
            _PRODUCER_FIELDS.pack_into(
                batch.encoded, _PRODUCER_FIELDS_POS, producer_id, epoch, base_sequence
            )
            struct.pack_into(
                ">I", batch.encoded, _CRC_POS, compute_crc(batch.encoded, 0, len(batch.encoded))
            )

    def _rewrite_sequences(self, tp: TopicPartition, state: _PartitionState) -> None:
        """Renumber the queued (retrying) batches of ``tp`` from 0 under the current epoch."""
        sequence = 0
        for batch in self._queues.get(tp, ()):
            if not batch.has_sequence:
                break
            self._stamp(batch, self.producer_id, self.producer_epoch, sequence)
            batch.sequence_reset = True
            sequence = (sequence + len(batch.records)) % MAX_SEQUENCE
        state.producer_id = self.producer_id
        state.producer_epoch = self.producer_epoch
        state.next_sequence = sequence
        state.last_acked_sequence = -1
        state.needs_rewrite = False

    # -- sender --------------------------------------------------------------------------------

    def _pending_work(self) -> bool:
        return any(self._queues.values()) or bool(self._request_tasks)

    async def _run_sender(self) -> None:
        try:
            await self._sender_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug or an unrecoverable state: fail loudly instead of leaving futures pending.
            log.exception("producer sender task failed")
            self._fatal = ClientError(f"the producer failed and cannot send any more: {exc}")
            for queue in self._queues.values():
                for batch in queue:
                    batch.fail(self._fatal)
                    self._release(batch)
            self._queues.clear()

    async def _sender_loop(self) -> None:
        while True:
            self._wakeup.clear()
            now = time.monotonic()
            self._expire_batches(now)
            if self.idempotent and self._txn is None:
                try:
                    await self._maybe_bump_epoch()
                except (KafkaError, ClientError) as exc:
                    # InitProducerId failed after an epoch overflow: try again shortly.
                    log.warning("could not get a new producer id: %s", exc)
                    self._bump_requested = True
                    await asyncio.sleep(self.retry_backoff_ms / 1000)
                    continue
            wait, sent = self._drain(now)
            if self._closing and not self._pending_work():
                return
            if sent:
                # More batches of the same partitions may be sendable now (one batch per
                # partition per request): drain again once the loop has run other tasks.
                await asyncio.sleep(0)
                continue
            with contextlib.suppress(TimeoutError):
                await timeouts.wait_for(self._wakeup.wait(), wait)

    def _drain(self, now: float) -> tuple[float | None, bool]:
        """Send what is ready; return (how long the sender may sleep (None: until woken),
        whether anything was sent)."""
        linger = self.linger_ms / 1000
        urgent = self._flushing > 0 or self._closing
        next_wake: float | None = None
        by_node: dict[int, list[_Batch]] = {}
        missing_leaders: set[str] = set()
        cluster = self._client.cluster
        for tp, queue in self._queues.items():
            if not queue:
                continue
            batch = queue[0]
            if batch.closed or urgent:
                ready_at = batch.retry_after
            else:
                ready_at = max(batch.retry_after, batch.created + linger)
            if ready_at > now:
                next_wake = ready_at if next_wake is None else min(next_wake, ready_at)
                continue
            if self._txn is not None and not self._txn.may_send(tp):
                continue  # AddPartitionsToTxn first (started by may_send)
            leader = cluster.leader(*tp)
            if leader is None or leader not in cluster.brokers or self._client.is_stale(tp[0]):
                missing_leaders.add(tp[0])
                continue
            if self._in_flight_per_node[leader] >= self.max_in_flight:
                continue
            if self.idempotent and not self._may_send(tp, batch):
                continue
            by_node.setdefault(leader, []).append(batch)
        if missing_leaders:
            self._schedule_refresh(missing_leaders)
            retry = now + self.retry_backoff_ms / 1000
            next_wake = retry if next_wake is None else min(next_wake, retry)
        for node, batches in by_node.items():
            self._send_to(node, batches)
        if next_wake is None:
            return None, bool(by_node)
        return max(0.0, next_wake - now), bool(by_node)

    def _may_send(self, tp: TopicPartition, batch: _Batch) -> bool:
        """Apply the idempotent ordering rules to the head batch of ``tp``."""
        if self.producer_id < 0:
            return False
        state = self._state(tp)
        if state.needs_rewrite:
            if state.in_flight:
                return False
            self._rewrite_sequences(tp, state)
        if batch.has_sequence:
            # A retry goes out alone, once everything before it has come back.
            return not state.in_flight
        if (state.producer_id, state.producer_epoch) != (self.producer_id, self.producer_epoch):
            if state.in_flight:
                return False
            state.producer_id, state.producer_epoch = self.producer_id, self.producer_epoch
            state.next_sequence = 0
            state.last_acked_sequence = -1
        return len(state.in_flight) < MAX_IN_FLIGHT_PER_PARTITION

    def _send_to(self, node: int, candidates: list[_Batch]) -> None:
        chosen: list[_Batch] = []
        total = 0
        for batch in candidates:
            if chosen and total + batch.size > self.max_request_size:
                break  # the rest waits for the next request
            queue = self._queues[batch.tp]
            queue.popleft()
            self._close_batch(batch)
            self._prepare(batch)
            total += len(batch.encoded or b"")
            chosen.append(batch)
            self._sent.add(batch)
        self._in_flight_per_node[node] += 1
        task = asyncio.get_running_loop().create_task(self._produce(node, chosen))
        self._request_tasks.add(task)
        task.add_done_callback(self._request_done)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._request_tasks.discard(task)
        self._wakeup.set()  # a slot is free, batches may have come back, close may finish
        if not task.cancelled() and task.exception() is not None:
            log.error("produce request task failed", exc_info=task.exception())

    def _prepare(self, batch: _Batch) -> None:
        batch.attempts += 1
        if self.idempotent and not batch.has_sequence:
            state = self._state(batch.tp)
            sequence = state.next_sequence
            state.next_sequence = (sequence + len(batch.records)) % MAX_SEQUENCE
            self._stamp(batch, self.producer_id, self.producer_epoch, sequence)
        if batch.encoded is None and isinstance(batch.records, EncodedRecords | RecordsAppender):
            records = batch.records
            batch.encoded = build_encoded_batch(
                records if isinstance(records, EncodedRecords) else records.encoded(),
                compression=self.compression,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                transactional=self._txn is not None,
            )
        if batch.encoded is None:
            batch.encoded = build_batch(
                batch.records,  # type: ignore[arg-type]
                compression=self.compression,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                transactional=self._txn is not None,
            )
        if self.idempotent:
            state = self._state(batch.tp)
            state.in_flight.append(batch)
            state.in_flight.sort(key=lambda b: b.base_sequence)

    async def _produce(self, node: int, batches: list[_Batch]) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for batch in batches:
            topic, partition = batch.tp
            topics.setdefault(topic, []).append(
                {"index": partition, "records": bytes(batch.encoded or b"")}
            )
        topic_data = [{"name": t, "partition_data": parts} for t, parts in topics.items()]
        try:
            response = await self._client.request(
                node,
                PRODUCE,
                lambda v: build_request(
                    PRODUCE,
                    v,
                    transactional_id=self.transactional_id,
                    acks=self.acks,
                    timeout=self.request_timeout_ms,
                    topic_data=topic_data,
                ),
                timeout_ms=self.request_timeout_ms,
                expect_response=self.acks != 0,
            )
        except ClientError as exc:
            for batch in batches:
                self._failed(batch, ErrorCode.network_exception, str(exc), -1, retriable=True)
            return
        except KafkaError as exc:  # e.g. UNSUPPORTED_VERSION: no Produce version in common
            for batch in batches:
                self._failed(batch, exc.code, exc.message, -1, retriable=False)
            return
        finally:
            self._in_flight_per_node[node] -= 1
            self._wakeup.set()
        if response is None:  # acks=0
            for batch in batches:
                self._succeeded(batch, -1, -1)
            return
        answered: dict[TopicPartition, Any] = {}
        for topic_response in response.responses:
            for part in topic_response.partition_responses:
                answered[(str(topic_response.name), int(part.index))] = part
        for batch in batches:
            part = answered.get(batch.tp)
            if part is None:
                self._failed(
                    batch, ErrorCode.unknown_server_error, "no response for partition", -1, True
                )
            elif part.error_code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                offset = int(part.base_offset) if part.error_code == ErrorCode.none else -1
                self._succeeded(batch, offset, epoch_ms(getattr(part, "log_append_time", None)))
            else:
                message = getattr(part, "error_message", None)
                if getattr(part, "record_errors", ()):
                    details = "; ".join(
                        f"record {e.batch_index}: {e.batch_index_error_message}"
                        for e in part.record_errors
                    )
                    message = f"{message or ''} ({details})".strip()
                log_start = int(getattr(part, "log_start_offset", -1))
                self._failed(batch, int(part.error_code), message, log_start, None)

    def _succeeded(self, batch: _Batch, base_offset: int, log_append_time_ms: int) -> None:
        self._sent.discard(batch)
        if self.idempotent:
            state = self._state(batch.tp)
            with contextlib.suppress(ValueError):
                state.in_flight.remove(batch)
            if batch.producer_epoch == state.producer_epoch and batch.has_sequence:
                last = (batch.base_sequence + len(batch.records) - 1) % MAX_SEQUENCE
                state.last_acked_sequence = last
            if base_offset >= 0:
                state.last_acked_offset = max(
                    state.last_acked_offset, base_offset + len(batch.records) - 1
                )
        batch.complete(base_offset, log_append_time_ms)
        self._release(batch)

    def _can_retry(self, batch: _Batch, error: int, log_start_offset: int) -> bool | None:
        """The Java client's TransactionManager.canRetry for an idempotent producer.

        Returns True/False when idempotence decides, None to fall back on retriability.
        """
        state = self._state(batch.tp)
        if error == ErrorCode.unknown_producer_id:
            if self._txn is not None:
                return False  # abortable; the abort bumps the epoch (KIP-360), as in Java
            if log_start_offset < 0 or batch.sequence_reset:
                return True
            # Either the log head holding our state was deleted (retention) or the broker lost
            # it: in both cases start again under a new epoch, from sequence 0.
            self._request_epoch_bump(state)
            return True
        if error == ErrorCode.out_of_order_sequence_number:
            expected = (state.last_acked_sequence + 1) % MAX_SEQUENCE
            if batch.producer_epoch != state.producer_epoch or batch.base_sequence != expected:
                return True  # a batch before it failed: retry once that one is resolved
            if self._txn is not None:
                return False  # a real gap dooms the transaction: abort, new epoch
            self._request_epoch_bump(state)  # a real gap
            return True
        return None

    def _failed(
        self,
        batch: _Batch,
        error: int,
        message: str | None,
        log_start_offset: int,
        retriable: bool | None,
    ) -> None:
        self._sent.discard(batch)
        topic, partition = batch.tp
        state = self._state(batch.tp) if self.idempotent else None
        if state is not None:
            with contextlib.suppress(ValueError):
                state.in_flight.remove(batch)
        if error in METADATA_REFRESH_ERRORS:
            self._client.mark_stale(topic)
        decided = self._can_retry(batch, error, log_start_offset) if state is not None else None
        if retriable is None:
            retriable = decided if decided is not None else KafkaError(error).retriable
        elif decided is not None:
            retriable = decided
        age_ms = (time.monotonic() - batch.created) * 1000
        if (
            retriable
            and self.acks != 0
            and batch.attempts <= self.retries
            and age_ms < self.delivery_timeout_ms
            and not self._closed
        ):
            log.debug(
                "retrying batch for %s-%d (attempt %d): %s",
                topic,
                partition,
                batch.attempts,
                KafkaError(error).name,
            )
            batch.retry_after = time.monotonic() + self.retry_backoff_ms / 1000
            self._requeue(batch)
            return
        if state is not None and batch.has_sequence:
            # Its sequence numbers may or may not be in the log: start over under a new epoch.
            self._request_epoch_bump(state)
        name = f"{topic}-{partition}"
        exc = self._produce_error(error, f"{message or 'produce failed'} ({name})")
        batch.fail(exc)
        self._release(batch)
        if self._txn is not None and isinstance(exc, TransactionError):
            self._txn.fail(exc)

    def _requeue(self, batch: _Batch) -> None:
        queue = self._queues.setdefault(batch.tp, collections.deque())
        if not batch.has_sequence:
            queue.appendleft(batch)
            return
        # Keep retries in sequence order ahead of the batches that never got a sequence.
        index = 0
        for index, queued in enumerate(queue):  # noqa: B007
            if not queued.has_sequence or queued.base_sequence > batch.base_sequence:
                break
        else:
            index = len(queue)
        queue.insert(index, batch)

    def _expire_batches(self, now: float) -> None:
        limit = self.delivery_timeout_ms / 1000
        for tp, queue in self._queues.items():
            while queue and now - queue[0].created >= limit:
                batch = queue.popleft()
                age_ms = (now - batch.created) * 1000
                if self.idempotent and batch.has_sequence:
                    self._request_epoch_bump(self._state(tp))
                message = (
                    f"expiring {len(batch.records)} record(s) for {tp[0]}-{tp[1]}: "
                    f"{age_ms:.0f} ms has passed since batch creation"
                )
                batch.fail(KafkaTimeoutError(message))
                self._release(batch)
                if self._txn is not None:
                    self._txn.fail(TransactionAbortableError(ErrorCode.request_timed_out, message))

    def _schedule_refresh(self, topics: set[str]) -> None:
        if self._refresh_task is not None and not self._refresh_task.done():
            return

        async def refresh() -> None:
            try:
                await self._client.metadata(sorted(topics), allow_auto_create=True)
            except (KafkaError, ClientError) as exc:
                log.debug("metadata refresh for %s failed: %s", sorted(topics), exc)
            self._wakeup.set()

        self._refresh_task = asyncio.get_running_loop().create_task(refresh())
