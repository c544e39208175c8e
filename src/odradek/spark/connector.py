"""How the Spark side talks to odradek: offsets on the driver, fetches and produces on executors.

Spark calls the data source synchronously, from processes it starts; odradek's client is
asyncio. Each object here owns a private event loop (:class:`_Loop`) and runs the client's
coroutines on it, so nothing is shared between Spark tasks and nothing outlives its task.

* :class:`ClusterOffsets` (driver) lists the partitions of a subscription and their offsets with
  Metadata and ListOffsets requests, retrying transient errors as Spark's KafkaOffsetReader does
  (``fetchOffset.numRetries`` = 3 by default).
* :func:`read_range` (executor) fetches ``[from, until)`` of one partition as raw record batches
  and yields Arrow batches (:mod:`odradek.spark.columnar`); offsets deleted under it follow
  ``failOnDataLoss``.
* :func:`write_batches` (executor) turns Arrow batches into records, groups them per partition
  (explicit ``partition`` column, else the Java client's murmur2 of the key, else one partition
  per batch, rotating), and sends whole batches with the producer (compressed as
  ``kafka.compression.type`` says), keeping several batches in flight.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kio.schema.errors import ErrorCode

from odradek.client.errors import ClientError, KafkaError
from odradek.records.batch import EncodedRecords
from odradek.records.errors import CorruptRecordError
from odradek.records.header import iter_headers
from odradek.spark.columnar import AbortedTransaction, decode_fetch
from odradek.spark.encoding import encode_chunks, encode_headers
from odradek.spark.options import EARLIEST, LATEST, SinkOptions, SourceOptions
from odradek.spark.partitioning import partitions_for_keys
from odradek.spark.planning import DataLossError, report_data_loss
from odradek.spark.schema import SinkColumns
from odradek.spark.source import WriteSummary
from odradek.spark.transactional import TaskTransaction

log = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]

OFFSET_RETRIES = 3
RETRY_INTERVAL_S = 0.1
# Batches of one write task in flight at once: enough to keep the broker busy while the next
# Arrow batch is converted, few enough to bound memory.
MAX_PENDING_BATCHES = 32
# Arrow bytes collected from consecutive fetches before they go to Spark as one batch.
YIELD_BYTES = 4 * 1024 * 1024
# Fetches wait at most this long for data that should already be there.
FETCH_MAX_WAIT_MS = 100


class _Loop:
    """A private asyncio loop for synchronous callers (Spark's Python workers)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, awaitable: Coroutine[Any, Any, T] | asyncio.Future[T]) -> T:
        return self._loop.run_until_complete(awaitable)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Start ``coro`` as a task; it progresses whenever :meth:`run` runs the loop."""
        return self._loop.create_task(coro)

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.close()


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) or (isinstance(exc, KafkaError) and exc.retriable)


class ClusterOffsets:
    """The :class:`odradek.spark.planning.ClusterView` of one query, backed by the client."""

    def __init__(self, options: SourceOptions) -> None:
        from odradek.client.core import KafkaClient
        from odradek.client.fetcher import Consumer

        self.options = options
        self._loop = _Loop()
        self._client = KafkaClient(
            options.bootstrap_servers,
            client_id=options.client_id,
            request_timeout_ms=options.request_timeout_ms,
        )
        # ListOffsets is a consumer's request (Spark's KafkaOffsetReader used a consumer too).
        self._consumer = Consumer(self._client, isolation_level=options.isolation_level)
        self._closed = False

    def __enter__(self) -> ClusterOffsets:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._client.close())
        finally:
            self._loop.close()

    def _call(self, make: Any, what: str) -> Any:
        """Run ``make()`` (a coroutine factory), retrying transient errors a few times."""

        async def started() -> Any:
            await self._consumer.start()  # connects once; a no-op afterwards
            return await make()

        for attempt in range(OFFSET_RETRIES + 1):
            try:
                return self._loop.run(started())
            except (ClientError, KafkaError) as exc:
                if attempt == OFFSET_RETRIES or not _retriable(exc):
                    raise ClientError(
                        f"could not {what} from {self.options.bootstrap_servers}: {exc}"
                    ) from exc
                self._client.mark_stale()
                time.sleep(RETRY_INTERVAL_S * (attempt + 1))
        raise AssertionError("unreachable")

    def partitions(self) -> list[TopicPartition]:
        sub = self.options.subscription
        if sub.kind == "subscribe":
            cluster = self._call(lambda: self._client.metadata(list(sub.topics)), "list topics")
        else:
            cluster = self._call(lambda: self._client.metadata(None), "list topics")
        result = []
        for name, info in cluster.topics.items():
            if not info.partitions or not sub.matches(name):
                continue
            if sub.kind == "subscribePattern" and info.is_internal:
                continue  # as Kafka's consumer with exclude.internal.topics=true
            result.extend((name, p) for p in info.partitions)
        if sub.kind == "assign":
            present = set(result)
            missing = [tp for tp in sub.assignment if tp not in present]
            if missing:
                log.warning("assigned partitions do not exist (yet): %s", missing)
            result = [tp for tp in sub.assignment if tp in present]
        return sorted(result)

    def _list_offsets(
        self, specs: Mapping[TopicPartition, int], what: str
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets; a spec is -2 (earliest), -1 (latest) or a timestamp in ms."""
        if not specs:
            return {}
        return self._call(lambda: self._consumer.list_offsets(dict(specs)), what)

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = self._list_offsets(dict.fromkeys(partitions, EARLIEST), "list earliest offsets")
        return {tp: offset for tp, (offset, _) in found.items()}

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        # With read_committed the broker answers the last stable offset.
        found = self._list_offsets(dict.fromkeys(partitions, LATEST), "list latest offsets")
        return {tp: offset for tp, (offset, _) in found.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        found = self._list_offsets(dict(timestamps), "look up offsets by timestamp")
        return {tp: (offset if offset >= 0 else None) for tp, (offset, _) in found.items()}


# --- executor side: reading ---------------------------------------------------------------------


def _offset_after(records: bytes, end_offset: int) -> int | None:
    """Where the fetch after this one starts: past the last whole batch (headers only)."""
    following = None
    try:
        for _, header in iter_headers(records, verify_crc=False):
            if header.base_offset >= end_offset:
                return end_offset
            following = header.next_offset
    except CorruptRecordError:
        return None  # the decoder reports it properly
    return following


class _RangeFetcher:
    """Fetches of one partition, one request ahead of the decoding (as Kafka's consumer pipelines
    its fetches): the broker reads and sends the next chunk while this process decodes."""

    def __init__(self, options: SourceOptions, topic: str, partition: int) -> None:
        from odradek.client.fetcher import Consumer

        self.options = options
        self.topic = topic
        self.partition = partition
        self.loop = _Loop()
        self.consumer = Consumer(
            options.bootstrap_servers,
            fetch_max_bytes=options.fetch_max_bytes,
            max_partition_fetch_bytes=options.max_partition_fetch_bytes,
            isolation_level=options.isolation_level,
            request_timeout_ms=options.request_timeout_ms,
            client_id=options.client_id,
        )
        self._ahead: tuple[int, asyncio.Task[Any]] | None = None

    def start(self) -> None:
        self.loop.run(self.consumer.start())

    def _request(self, offset: int) -> asyncio.Task[Any]:
        task = self.loop.spawn(
            self.consumer.fetch_raw(
                self.topic,
                self.partition,
                offset,
                self.options.max_partition_fetch_bytes,
                max_wait_ms=FETCH_MAX_WAIT_MS,
                isolation_level=self.options.isolation_level,
            )
        )
        self.loop.run(asyncio.sleep(0))  # runs the task until the request is on the wire
        return task

    def prefetch(self, offset: int) -> None:
        if self._ahead is None:
            self._ahead = (offset, self._request(offset))

    def _settle_ahead(self) -> None:
        if self._ahead is not None:
            _, task = self._ahead
            self._ahead = None
            # Let it finish rather than cancel it mid-request: the connection stays in step.
            self.loop.run(asyncio.gather(task, return_exceptions=True))

    def fetch(self, offset: int) -> Any:
        if self._ahead is not None and self._ahead[0] == offset:
            task = self._ahead[1]
            self._ahead = None
        else:
            self._settle_ahead()
            task = self._request(offset)
        return self.loop.run(task)

    def close(self) -> None:
        try:
            self._settle_ahead()
            self.loop.run(self.consumer.close())
        finally:
            self.loop.close()


def _combined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def read_range(
    options: SourceOptions, topic: str, partition: int, from_offset: int, until_offset: int
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records at offsets ``[from_offset, until_offset)`` of one partition."""
    if from_offset >= until_offset:
        return
    fetcher = _RangeFetcher(options, topic, partition)
    read_committed = options.isolation_level == "read_committed"
    where = f"{topic}-{partition}"
    try:
        fetcher.start()
        # Decoded fetches are handed to Spark a few at a time: fewer, larger Arrow batches
        # cost Spark less per row.
        pending: list[pa.RecordBatch] = []
        pending_bytes = 0
        position = from_offset
        deadline = time.monotonic() + options.poll_timeout_ms / 1000
        while position < until_offset:
            try:
                fetched = fetcher.fetch(position)
            except (ClientError, KafkaError) as exc:
                if not _retriable(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(RETRY_INTERVAL_S)
                continue
            error = int(fetched.error_code)
            log_start = int(fetched.log_start_offset)
            if error == ErrorCode.offset_out_of_range or (0 <= position < log_start):
                if log_start > position:
                    report_data_loss(
                        f"Cannot fetch offset {position} of {where}: the earliest offset "
                        f"available is {log_start}",
                        options.fail_on_data_loss,
                    )
                    position = log_start
                    continue
                report_data_loss(
                    f"Cannot fetch offset {position} of {where}: the log ends at "
                    f"{fetched.high_watermark}, before the {until_offset} this read was "
                    "planned for",
                    options.fail_on_data_loss,
                )
                break
            if error:
                exc = KafkaError(error, f"fetching {where} at offset {position}")
                if not exc.retriable or time.monotonic() > deadline:
                    raise exc
                time.sleep(RETRY_INTERVAL_S)
                continue
            records = fetched.records or b""
            following = _offset_after(records, until_offset)
            if following is not None and position < following < until_offset:
                fetcher.prefetch(following)
            aborted = None
            if read_committed:
                aborted = [
                    AbortedTransaction(int(a.producer_id), int(a.first_offset))
                    for a in fetched.aborted_transactions or ()
                ]
            chunk = decode_fetch(
                records,
                topic=topic,
                partition=partition,
                start_offset=position,
                end_offset=until_offset,
                include_headers=options.include_headers,
                aborted_transactions=aborted,
            )
            if chunk.batch is not None:
                pending.append(chunk.batch)
                pending_bytes += chunk.batch.nbytes
                if pending_bytes >= YIELD_BYTES:
                    yield _combined(pending)
                    pending = []
                    pending_bytes = 0
            if chunk.next_offset > position:
                position = chunk.next_offset
                deadline = time.monotonic() + options.poll_timeout_ms / 1000
                continue
            # Nothing at or after `position` below the end: either it is not readable yet or
            # it is gone (the log was truncated or the topic recreated).
            readable_end = int(
                fetched.last_stable_offset
                if read_committed and fetched.last_stable_offset >= 0
                else fetched.high_watermark
            )
            if time.monotonic() > deadline:
                report_data_loss(
                    f"Offsets {position} to {until_offset} of {where} could not be read within "
                    f"kafkaConsumer.pollTimeoutMs ({options.poll_timeout_ms} ms); the log's "
                    f"readable end is {readable_end}",
                    options.fail_on_data_loss,
                )
                break
            if readable_end <= position:
                time.sleep(FETCH_MAX_WAIT_MS / 1000)
        if pending:
            yield _combined(pending)
    finally:
        fetcher.close()


# --- executor side: writing ---------------------------------------------------------------------


_RECORD_OVERHEAD = 24  # length, attributes, deltas, key/value lengths, header count: worst case


def _as_binary(column: pa.Array) -> pa.Array:
    if pa.types.is_string(column.type):
        return column.cast(pa.binary())  # zero-copy: the UTF-8 bytes as they are
    return column


def _lengths(column: pa.Array | None, count: int) -> np.ndarray:
    if column is None:
        return np.zeros(count, dtype=np.int64)
    lengths = pc.binary_length(column).fill_null(0)
    return lengths.to_numpy(zero_copy_only=False).astype(np.int64)


class RowRouter:
    """Places the rows of Arrow batches into per-partition chunks of records, ready to send.

    A row goes to its ``partition`` column if set, else to the murmur2 partition of its key
    (vectorised, :mod:`odradek.spark.partitioning`), else, without key, to the partition
    whose turn it is: each chunk of such rows goes to the next partition, starting at a
    random one. Chunks hold at most ``batch_size`` bytes of records (at least one record).
    """

    def __init__(
        self, options: SinkOptions, columns: SinkColumns, partition_count: Callable[[str], int]
    ) -> None:
        self.options = options
        self.columns = columns
        self._partition_count = partition_count
        self._rotation: dict[str, int] = {}

    def topics(self, batch: pa.RecordBatch) -> set[str]:
        """Topics the rows of ``batch`` go to (raises for a null topic, as Spark's sink does)."""
        if self.options.topic is not None:
            return {self.options.topic}
        assert self.columns.topic is not None
        column = batch.column(self.columns.topic)
        if column.null_count:
            raise ValueError(
                "null topic present in the data. Use the topic option for setting a topic."
            )
        return {str(t) for t in pc.unique(column).to_pylist()}

    def route(self, batch: pa.RecordBatch) -> Iterator[tuple[str, int, EncodedRecords]]:
        """(topic, partition, records) chunks covering every row of ``batch``.

        Rows are placed first (numpy over whole columns), then every chunk is encoded in one
        pass over the Arrow columns (:func:`odradek.spark.encoding.encode_chunks`).
        """
        count = batch.num_rows
        if count == 0:
            return
        values = _as_binary(batch.column(self.columns.value))
        keys = _as_binary(batch.column(self.columns.key)) if self.columns.key else None
        sizes = _lengths(values, count) + _lengths(keys, count) + _RECORD_OVERHEAD
        header_lists: list[list[tuple[str, bytes | None]]] | None = None
        if self.columns.headers:
            header_lists = []
            for i, row in enumerate(batch.column(self.columns.headers).to_pylist()):
                pairs = []
                for header in row or ():
                    if header is None or header["key"] is None:
                        raise ValueError("a header in the 'headers' column has a null key")
                    pairs.append((header["key"], header["value"]))
                    sizes[i] += 10 + len(header["key"]) + len(header["value"] or b"")
                header_lists.append(pairs)

        if self.options.topic is not None:
            by_topic = {self.options.topic: np.arange(count)}
        else:
            self.topics(batch)  # null check
            assert self.columns.topic is not None
            names = np.array(batch.column(self.columns.topic).to_pylist(), dtype=object)
            by_topic = {str(t): np.flatnonzero(names == t) for t in dict.fromkeys(names)}

        explicit = (
            batch.column(self.columns.partition).fill_null(-1).to_numpy(zero_copy_only=False)
            if self.columns.partition is not None
            else np.full(count, -1)
        ).astype(np.int64)
        targets: list[tuple[str, int]] = []
        chunks: list[np.ndarray] = []
        for topic, rows in by_topic.items():
            partitions_count = self._partition_count(topic)
            placed = explicit[rows]
            bad = placed >= partitions_count
            if bad.any():
                raise ValueError(
                    f"Invalid partition {int(placed[bad][0])} for topic '{topic}': it has "
                    f"partitions 0 to {partitions_count - 1}"
                )
            if keys is not None and (placed < 0).any():
                hashed = partitions_for_keys(keys.take(pa.array(rows)), partitions_count)
                placed = np.where(placed < 0, hashed, placed)
            order = np.argsort(placed, kind="stable")
            placed_sorted = placed[order]
            starts = np.flatnonzero(np.r_[True, placed_sorted[1:] != placed_sorted[:-1]])
            ends = np.r_[starts[1:], len(order)]
            for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
                partition = int(placed_sorted[start])
                group = rows[order[start:end]]
                for chunk in _chunk_rows(group, sizes[group], self.options.batch_size):
                    target = partition if partition >= 0 else self._next_partition(topic)
                    targets.append((topic, target))
                    chunks.append(chunk)
        encoded = encode_chunks(
            keys, values, encode_headers(header_lists, count), chunks, int(time.time() * 1000)
        )
        for (topic, target), records in zip(targets, encoded, strict=True):
            yield topic, target, records

    def _next_partition(self, topic: str) -> int:
        count = self._partition_count(topic)
        current = self._rotation.get(topic)
        current = random.randrange(count) if current is None else (current + 1) % count
        self._rotation[topic] = current
        return current


def _chunk_rows(rows: np.ndarray, sizes: np.ndarray, max_bytes: int) -> Iterator[np.ndarray]:
    """Consecutive pieces of ``rows`` of at most ``max_bytes`` each (at least one row)."""
    total = np.cumsum(sizes)
    start = 0
    while start < len(rows):
        base = total[start - 1] if start else 0
        end = int(np.searchsorted(total, base + max_bytes, side="right"))
        end = max(end, start + 1)
        yield rows[start:end]
        start = end


def write_batches(
    options: SinkOptions,
    columns: SinkColumns,
    batches: Iterator[pa.RecordBatch],
    task: TaskTransaction | None = None,
) -> WriteSummary:
    """Write the rows of one Spark task; returns once every record is acknowledged (with
    ``task``: once its transaction committed, see :mod:`odradek.spark.transactional`)."""
    loop = _Loop()
    try:
        return loop.run(_write(options, columns, batches, task))
    finally:
        loop.close()


async def _write(
    options: SinkOptions,
    columns: SinkColumns,
    batches: Iterator[pa.RecordBatch],
    task: TaskTransaction | None = None,
) -> WriteSummary:
    from odradek.client.producer import Producer
    from odradek.spark.transactional import batch_already_written, commit_batch

    producer = Producer(
        options.bootstrap_servers,
        acks=options.acks,
        compression_type=options.compression_type,
        linger_ms=options.linger_ms,
        batch_size=options.batch_size,
        max_request_size=options.max_request_size,
        enable_idempotence=options.enable_idempotence,
        request_timeout_ms=options.request_timeout_ms,
        delivery_timeout_ms=max(
            options.delivery_timeout_ms, options.linger_ms + options.request_timeout_ms
        ),
        client_id=options.client_id,
        transactional_id=None if task is None else task.transactional_id,
        transaction_timeout_ms=options.transaction_timeout_ms,
    )
    counts: dict[str, int] = {}
    pending: set[asyncio.Task[Any]] = set()
    last_offsets: dict[str, int] = {}
    rows = 0

    def collect(done: Iterable[asyncio.Task[Any]]) -> None:
        for task in done:
            metadata, size = task.result()
            key = f"{metadata.topic}-{metadata.partition}"
            last_offsets[key] = max(last_offsets.get(key, -1), metadata.offset + size - 1)

    async def send(topic: str, partition: int, chunk: EncodedRecords) -> tuple[Any, int]:
        return await producer.send_batch(topic, partition, chunk), len(chunk)

    await producer.start()
    in_transaction = False
    try:
        if task is not None:
            await producer.init_transactions()  # fences older attempts of this task
            if await batch_already_written(producer, task):
                log.info("%s: batch %d is already in the topic", task.transactional_id,
                         task.batch_id)  # fmt: skip
                for _ in batches:  # Spark's worker expects its input read
                    pass
                return WriteSummary(rows=0, last_offsets={})
            producer.begin_transaction()
            in_transaction = True
        router = RowRouter(options, columns, counts.__getitem__)
        for batch in batches:
            for topic in router.topics(batch) - counts.keys():
                counts[topic] = len((await producer.client.topic(topic)).partitions)
            for topic, partition, records in router.route(batch):
                pending.add(asyncio.ensure_future(send(topic, partition, records)))
                rows += len(records)
                if len(pending) >= MAX_PENDING_BATCHES:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    collect(done)
        if pending:
            done, pending = await asyncio.wait(pending)
            collect(done)
        if task is not None:
            await commit_batch(producer, task)
            in_transaction = False
    except BaseException:
        if in_transaction:
            try:
                await producer.abort_transaction()
            except (KafkaError, ClientError) as exc:  # fenced, or the broker is gone
                log.info("could not abort the write's transaction: %s", exc)
        raise
    finally:
        for waiting in pending:
            waiting.cancel()
        await producer.close()
    return WriteSummary(rows=rows, last_offsets=last_offsets)


__all__ = ["ClusterOffsets", "DataLossError", "RowRouter", "read_range", "write_batches"]
