"""The producer: ``send()`` a record, get a future of where it was written.

How a record travels (the Java producer's design, in asyncio), one module per part:
:meth:`Producer.send` checks the record, picks its partition (:mod:`~odradek.client.partitioner`)
and appends it to a batch (:mod:`~odradek.client.producer_batch`) in the
:mod:`~odradek.client.accumulator`, which also counts it against ``buffer_memory``. The
:mod:`~odradek.client.sender` task ships the ready batches in Produce requests and resolves each
record's future, or retries its batch. With idempotence (the default with ``acks="all"``)
batches carry a producer id, epoch and sequence numbers (:mod:`~odradek.client.idempotence`),
so retries neither duplicate nor reorder records; a ``transactional_id`` adds transactions
(:mod:`~odradek.client.transactions`). Idempotence needs ``acks="all"``; with other acks it
is switched off, as the Java client does when idempotence was not asked for explicitly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.client.accumulator import RecordAccumulator
from odradek.client.core import ClientUser, KafkaClient
from odradek.client.errors import (
    ClientError,
    KafkaError,
    KafkaTimeoutError,
    TransactionAbortableError,
    TransactionError,
    TransactionFatalError,
    TransactionStateError,
)
from odradek.client.idempotence import IdempotenceManager
from odradek.client.partitioner import Partitioner, PartitionerFn
from odradek.client.producer_batch import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    RecordMetadata,
    TopicPartition,
    make_record,
    record_size,
)
from odradek.client.producer_config import ProducerConfig, Setting
from odradek.client.security import ClientSecurity
from odradek.client.sender import Sender
from odradek.client.transactions import State, TransactionManager
from odradek.records.batch import EncodedRecords, Record
from odradek.records.compression import Compression

if TYPE_CHECKING:
    from odradek.client.assignors import GroupMetadata
    from odradek.client.group_admin import OffsetAndMetadata

__all__ = ["Producer", "RecordMetadata"]


class Producer(ClientUser):
    """Async Kafka producer: ``async with Producer("host:9092") as p: await p.send_and_wait(...)``.

    Configuration names and defaults are the Java producer's (``linger.ms`` -> ``linger_ms``).
    """

    # Settings live in one ProducerConfig shared with the accumulator and the sender, so
    # setting one here after construction reaches them too.
    acks: Setting[int] = Setting()
    compression: Setting[Compression] = Setting()
    idempotent: Setting[bool] = Setting()
    linger_ms: Setting[int] = Setting()
    batch_size: Setting[int] = Setting()
    max_request_size: Setting[int] = Setting()
    retries: Setting[int] = Setting()
    delivery_timeout_ms: Setting[int] = Setting()
    request_timeout_ms: Setting[int] = Setting()
    retry_backoff_ms: Setting[int] = Setting()
    max_in_flight: Setting[int] = Setting()
    buffer_memory: Setting[int] = Setting()
    max_block_ms: Setting[int] = Setting()
    transactional_id: Setting[str | None] = Setting()
    transaction_timeout_ms: Setting[int] = Setting()

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
        self._config = ProducerConfig(
            acks=acks,
            compression_type=compression_type,
            linger_ms=linger_ms,
            batch_size=batch_size,
            max_request_size=max_request_size,
            enable_idempotence=enable_idempotence,
            retries=retries,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
        )
        self.partitioner = Partitioner(partitioner)
        self._attach_client(
            client_or_bootstrap,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        # topic -> (client metadata generation, all partitions, partitions with a leader)
        self._topic_cache: dict[str, tuple[int, list[int], list[int]]] = {}
        self._wakeup = asyncio.Event()  # the sender's: news for its loop
        self._closing = False
        self._closed = False
        self._started = False
        self._fatal: ClientError | KafkaError | None = None
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
        self._accumulator = RecordAccumulator(self._config, self._wakeup, self._batch_closed)
        self._idempotence = IdempotenceManager(self._client, self._config, self._txn)
        self._sender = Sender(
            self._config,
            self._client,
            self._accumulator,
            self._idempotence,
            self._txn,
            self._wakeup,
            self._sender_failed,
        )

    @property
    def producer_id(self) -> int:
        """The producer id of an idempotent or transactional producer (-1: none yet)."""
        return self._idempotence.producer_id

    @producer_id.setter
    def producer_id(self, value: int) -> None:
        self._idempotence.producer_id = value

    @property
    def producer_epoch(self) -> int:
        return self._idempotence.producer_epoch

    @producer_epoch.setter
    def producer_epoch(self, value: int) -> None:
        self._idempotence.producer_epoch = value

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, get a producer id if idempotent, start the sender task."""
        if self._started:
            return
        if self._closed:
            raise ClientError("producer is closed")
        await self._client.start()
        if self.idempotent and self._txn is None:  # transactional: init_transactions() does it
            await self._idempotence.init_producer_id()
        self._sender.start()
        # send() makes its futures on this loop: asyncio.get_running_loop() checks getpid(),
        # a system call per record.
        self._loop = asyncio.get_running_loop()
        self._started = True

    async def close(self, timeout_ms: int | None = None) -> None:
        """Send everything buffered (waiting up to ``timeout_ms``), then stop. Idempotent."""
        if self._closed:
            return
        self._closing = True
        await self._sender.stop(timeout_ms)
        if self._txn is not None:
            await self._txn.close()
        await self._sender.cancel_refresh()
        self._sender.fail_all(ClientError("producer closed before the record was acknowledged"))
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
            size = RECORD_OVERHEAD + len(value) + (len(key) if key is not None else 0)
        else:
            record = make_record(value, key, headers, timestamp_ms)
            value, key, headers = record.value, record.key, record.headers
            timestamp_ms = record.timestamp_ms
            size = record_size(record)
        config = self._config
        if size + BATCH_OVERHEAD > min(config.max_request_size, config.buffer_memory):
            config.check_record_size(size + BATCH_OVERHEAD)
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
        accumulator = self._accumulator
        if not accumulator.try_reserve(size):
            await accumulator.reserve(size, time.monotonic() + config.max_block_ms / 1000)
        future: asyncio.Future[RecordMetadata] = asyncio.Future(loop=self._loop)
        if accumulator.append(topic, partition, value, key, headers, timestamp_ms, size, future):
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
            size = BATCH_OVERHEAD + len(records.section)
        else:
            now_ms = int(time.time() * 1000)
            copies = [
                make_record(
                    r.value,
                    r.key,
                    r.headers,
                    r.timestamp_ms if r.timestamp_ms is not None else now_ms,
                )
                for r in records
            ]
            size = BATCH_OVERHEAD + sum(record_size(r) for r in copies)
        self._config.check_record_size(size)
        partition = await self._choose_partition(topic, None, partition)
        deadline = time.monotonic() + self.max_block_ms / 1000
        await self._accumulator.reserve(size - BATCH_OVERHEAD, deadline)
        return await self._accumulator.append_batch((topic, partition), copies, size)

    async def flush(self) -> None:
        """Send every buffered record now and wait until each is acknowledged or failed."""
        self._check_open()
        futures = [b.done for b in self._accumulator.queued()]
        futures += [b.done for b in self._sender.sent]
        if not futures:
            return
        self._accumulator.flushing += 1
        self._wakeup.set()
        try:
            await asyncio.gather(*futures, return_exceptions=True)
        finally:
            self._accumulator.flushing -= 1

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
        in_flight = [b.done for b in self._sender.sent]
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
        # Nothing runs between failing one batch and the next (futures call back later), so
        # emptying the queues first changes nothing.
        for batch in self._accumulator.take_all():
            if batch.has_sequence:
                self._idempotence.request_epoch_bump(self._idempotence.state(batch.tp))
            batch.fail(error)
            self._accumulator.release(batch)

    # -- records and partitions ----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closing or self._closed:
            raise ClientError("producer is closed")
        if not self._started:
            raise ClientError("producer not started: call 'await producer.start()' first")

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

    def _batch_closed(self, topic: str, partition: int) -> None:
        """A batch of (topic, partition) closed: the sticky partitioner may move on."""
        info = self._client.cluster.topics.get(topic)
        if info is not None:
            self.partitioner.batch_closed(topic, partition, info.available_partitions())

    def _sender_failed(self, error: ClientError) -> None:
        self._fatal = error
