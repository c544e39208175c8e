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
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import pyarrow as pa
from kio.schema.errors import ErrorCode

from odradek.client.errors import ClientError, KafkaError
from odradek.records.batch import Record
from odradek.spark.columnar import AbortedTransaction, decode_fetch
from odradek.spark.options import SinkOptions, SourceOptions
from odradek.spark.planning import DataLossError, report_data_loss
from odradek.spark.schema import SinkColumns
from odradek.spark.source import WriteSummary

log = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]

OFFSET_RETRIES = 3
RETRY_INTERVAL_S = 0.1
# Batches of one write task in flight at once: enough to keep the broker busy while the next
# Arrow batch is converted, few enough to bound memory.
MAX_PENDING_BATCHES = 32
# Fetches wait at most this long for data that should already be there.
FETCH_MAX_WAIT_MS = 100


class _Loop:
    """A private asyncio loop for synchronous callers (Spark's Python workers)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.close()


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) or (isinstance(exc, KafkaError) and exc.retriable)


class ClusterOffsets:
    """The :class:`odradek.spark.planning.ClusterView` of one query, backed by the client."""

    def __init__(self, options: SourceOptions) -> None:
        from odradek.client.admin import Admin
        from odradek.client.core import KafkaClient

        self.options = options
        self._loop = _Loop()
        self._client = KafkaClient(
            options.bootstrap_servers,
            client_id=options.client_id,
            request_timeout_ms=options.request_timeout_ms,
        )
        self._admin = Admin(self._client)
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
        for attempt in range(OFFSET_RETRIES + 1):
            try:
                return self._loop.run(make())
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
        self, specs: Mapping[TopicPartition, str | int], what: str
    ) -> dict[TopicPartition, tuple[int, int]]:
        if not specs:
            return {}
        return self._call(
            lambda: self._admin.list_offsets(
                dict(specs), isolation_level=self.options.isolation_level
            ),
            what,
        )

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = self._list_offsets(dict.fromkeys(partitions, "earliest"), "list earliest offsets")
        return {tp: offset for tp, (offset, _) in found.items()}

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = self._list_offsets(dict.fromkeys(partitions, "latest"), "list latest offsets")
        return {tp: offset for tp, (offset, _) in found.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        found = self._list_offsets(dict(timestamps), "look up offsets by timestamp")
        return {tp: (offset if offset >= 0 else None) for tp, (offset, _) in found.items()}


# --- executor side: reading ---------------------------------------------------------------------


def read_range(
    options: SourceOptions, topic: str, partition: int, from_offset: int, until_offset: int
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records at offsets ``[from_offset, until_offset)`` of one partition."""
    if from_offset >= until_offset:
        return
    from odradek.client.fetcher import Consumer

    loop = _Loop()
    consumer = Consumer(
        options.bootstrap_servers,
        fetch_max_bytes=options.fetch_max_bytes,
        max_partition_fetch_bytes=options.max_partition_fetch_bytes,
        isolation_level=options.isolation_level,
    )
    read_committed = options.isolation_level == "read_committed"
    where = f"{topic}-{partition}"
    try:
        position = from_offset
        deadline = time.monotonic() + options.poll_timeout_ms / 1000
        while position < until_offset:
            try:
                fetched = loop.run(
                    consumer.fetch_raw(
                        topic,
                        partition,
                        position,
                        options.max_partition_fetch_bytes,
                        max_wait_ms=FETCH_MAX_WAIT_MS,
                        isolation_level=options.isolation_level,
                    )
                )
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
                return
            if error:
                exc = KafkaError(error, f"fetching {where} at offset {position}")
                if not exc.retriable or time.monotonic() > deadline:
                    raise exc
                time.sleep(RETRY_INTERVAL_S)
                continue
            aborted = None
            if read_committed:
                aborted = [
                    AbortedTransaction(int(a.producer_id), int(a.first_offset))
                    for a in fetched.aborted_transactions or ()
                ]
            chunk = decode_fetch(
                fetched.records or b"",
                topic=topic,
                partition=partition,
                start_offset=position,
                end_offset=until_offset,
                include_headers=options.include_headers,
                aborted_transactions=aborted,
            )
            if chunk.batch is not None:
                yield chunk.batch
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
                return
            if readable_end <= position:
                time.sleep(FETCH_MAX_WAIT_MS / 1000)
    finally:
        try:
            loop.run(consumer.close())
        finally:
            loop.close()


# --- executor side: writing ---------------------------------------------------------------------


def _binary_list(batch: pa.RecordBatch, name: str | None) -> list[bytes | None] | None:
    if name is None:
        return None
    column = batch.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())  # zero-copy: same bytes, UTF-8 as written
    return column.to_pylist()


def _record_size(record: Record) -> int:
    size = 24 + len(record.key or b"") + len(record.value or b"")
    for key, value in record.headers:
        size += 10 + len(key) + len(value or b"")
    return size


class _RowRouter:
    """Turns rows into per-(topic, partition) record lists, the way the sink must place them."""

    def __init__(self, options: SinkOptions, columns: SinkColumns, partition_counts: Any) -> None:
        self.options = options
        self.columns = columns
        self._partition_counts = partition_counts  # topic -> number of partitions
        self._rotation: dict[str, int] = {}

    def route(self, batch: pa.RecordBatch) -> dict[tuple[str, int | None], list[Record]]:
        from odradek.client.partitioner import partition_for_key

        n = batch.num_rows
        values = _binary_list(batch, self.columns.value)
        assert values is not None
        keys = _binary_list(batch, self.columns.key) or [None] * n
        if self.options.topic is not None:
            topics: list[str | None] = [self.options.topic] * n
        else:
            assert self.columns.topic is not None
            topics = batch.column(self.columns.topic).to_pylist()
        partitions = (
            batch.column(self.columns.partition).to_pylist()
            if self.columns.partition is not None
            else [None] * n
        )
        headers = (
            batch.column(self.columns.headers).to_pylist()
            if self.columns.headers is not None
            else None
        )
        groups: dict[tuple[str, int | None], list[Record]] = {}
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ValueError(
                    "null topic present in the data. Use the topic option for setting a topic."
                )
            record_headers: list[tuple[str, bytes | None]] = []
            if headers is not None and headers[i]:
                for header in headers[i]:
                    if header is None or header["key"] is None:
                        raise ValueError("a header in the 'headers' column has a null key")
                    record_headers.append((header["key"], header["value"]))
            key = keys[i]
            partition = partitions[i]
            count = self._partition_counts(topic)
            if partition is not None:
                if not 0 <= partition < count:
                    raise ValueError(
                        f"Invalid partition {partition} for topic '{topic}': it has partitions "
                        f"0 to {count - 1}"
                    )
            elif key is not None:
                partition = partition_for_key(key, count)
            record = Record(values[i], key, record_headers)
            groups.setdefault((topic, partition), []).append(record)
        return groups

    def null_key_partition(self, topic: str) -> int:
        """Rows without key or partition: each batch goes to the next partition in turn."""
        count = self._partition_counts(topic)
        current = self._rotation.get(topic)
        current = random.randrange(count) if current is None else (current + 1) % count
        self._rotation[topic] = current
        return current


def _chunks(records: Sequence[Record], max_bytes: int) -> Iterator[Sequence[Record]]:
    start = 0
    size = 0
    for i, record in enumerate(records):
        record_size = _record_size(record)
        if i > start and size + record_size > max_bytes:
            yield records[start:i]
            start = i
            size = 0
        size += record_size
    if start < len(records):
        yield records[start:]


def write_batches(
    options: SinkOptions, columns: SinkColumns, batches: Iterator[pa.RecordBatch]
) -> WriteSummary:
    """Write the rows of one Spark task; returns once every record is acknowledged."""
    loop = _Loop()
    try:
        return loop.run(_write(options, columns, batches))
    finally:
        loop.close()


async def _write(
    options: SinkOptions, columns: SinkColumns, batches: Iterator[pa.RecordBatch]
) -> WriteSummary:
    from odradek.client.producer import Producer

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
    )
    counts: dict[str, int] = {}

    async def fetch_counts(topics: set[str]) -> None:
        for topic in topics - counts.keys():
            info = await producer.client.topic(topic)
            counts[topic] = len(info.partitions)

    pending: set[asyncio.Task[Any]] = set()
    last_offsets: dict[str, int] = {}
    rows = 0

    def collect(done: Iterable[asyncio.Task[Any]]) -> None:
        for task in done:
            metadata, size = task.result()
            key = f"{metadata.topic}-{metadata.partition}"
            last_offsets[key] = max(last_offsets.get(key, -1), metadata.offset + size - 1)

    async def send(topic: str, partition: int, chunk: Sequence[Record]) -> tuple[Any, int]:
        return await producer.send_batch(topic, partition, chunk), len(chunk)

    await producer.start()
    try:
        router = _RowRouter(options, columns, lambda topic: counts[topic])
        for batch in batches:
            if batch.num_rows == 0:
                continue
            topics = (
                {options.topic}
                if options.topic is not None
                else {t for t in batch.column(columns.topic).to_pylist() if t is not None}
            )
            await fetch_counts(topics)  # type: ignore[arg-type]
            for (topic, partition), records in router.route(batch).items():
                for chunk in _chunks(records, options.batch_size):
                    target = (
                        partition if partition is not None else router.null_key_partition(topic)
                    )
                    pending.add(asyncio.ensure_future(send(topic, target, chunk)))
                    rows += len(chunk)
                    if len(pending) >= MAX_PENDING_BATCHES:
                        done, pending = await asyncio.wait(
                            pending, return_when=asyncio.FIRST_COMPLETED
                        )
                        collect(done)
        if pending:
            done, pending = await asyncio.wait(pending)
            collect(done)
    finally:
        for task in pending:
            task.cancel()
        await producer.close()
    return WriteSummary(rows=rows, last_offsets=last_offsets)


__all__ = ["ClusterOffsets", "DataLossError", "read_range", "write_batches"]
