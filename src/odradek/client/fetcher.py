"""An assign-based consumer: fetch, decode, filter and position-tracking for chosen partitions.

Consumer groups (subscribe, rebalancing, committed offsets) build on this in another module;
this one reads the partitions it is told to read, like the Java consumer after ``assign()``.

* Positions: each assigned partition has a position, the offset of the next record
  :meth:`Consumer.poll` returns. A partition without one (just assigned) is reset by
  ``auto_offset_reset`` ("earliest", "latest", or "none": raise) with ListOffsets, and so is
  one whose position the broker answers OFFSET_OUT_OF_RANGE for.
* Fetching: one Fetch request per partition leader, in parallel, with ``fetch_min_bytes`` /
  ``fetch_max_wait_ms`` as the broker's long-poll knobs; a partition with records still
  buffered is not fetched again until they are consumed. No fetch sessions (KIP-227): every
  request is a full one (session id 0, epoch -1), which every broker accepts.
* Decoding: batches are decoded with :mod:`odradek.records.fast_decode` (in C when the
  extension is built) straight into ConsumerRecords; records before the position
  (a compressed batch is returned whole) are dropped; control batches (transaction markers)
  are never returned. With ``isolation_level="read_committed"`` the broker stops at the last
  stable offset and lists the aborted transactions in range; batches of those transactions
  are skipped exactly as the Java consumer does: an aborted transaction starts at its
  ``first_offset`` and ends at its producer's ABORT marker.
* :meth:`Consumer.fetch_raw` returns one partition's record bytes undecoded, for readers that
  decode batches themselves (the Spark source decodes straight into Arrow columns).
* Leader changes: NOT_LEADER_OR_FOLLOWER and friends mark the topic's metadata stale; the next
  poll asks the cluster again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.core import METADATA_REFRESH_ERRORS, ClientUser, KafkaClient
from odradek.client.entities import build_request
from odradek.client.errors import ClientError, KafkaError
from odradek.client.security import ClientSecurity
from odradek.client.versions import FETCH, LIST_OFFSETS
from odradek.records.batch import decode_batch
from odradek.records.control import ControlType, peek_control_type
from odradek.records.errors import CorruptRecordError
from odradek.records.fast_decode import NO_HEADERS, decode_batch_into
from odradek.records.header import BatchHeader, iter_headers

log = logging.getLogger(__name__)

__all__ = [
    "AbortedTransaction",
    "Consumer",
    "ConsumerRecord",
    "FetchedPartition",
    "filter_batches",
    "isolation_level_id",
    "list_offsets",
]

TopicPartition = tuple[str, int]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
CREATE_TIME = 0
LOG_APPEND_TIME = 1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


def isolation_level_id(isolation_level: str | int) -> int:
    """'read_uncommitted' -> 0, 'read_committed' -> 1 (ValueError for anything else)."""
    if isolation_level in ("read_uncommitted", READ_UNCOMMITTED):
        return READ_UNCOMMITTED
    if isolation_level in ("read_committed", READ_COMMITTED):
        return READ_COMMITTED
    raise ValueError(
        f"isolation_level must be 'read_uncommitted' or 'read_committed', not {isolation_level!r}"
    )


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime (Java's TimestampType ids)
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    leader_epoch: int = -1  # the batch's partition leader epoch; -1 when unknown


# The consumer builds ConsumerRecords with odradek.records.fast_decode, through their slot
# descriptors: the generated frozen __init__ (object.__setattr__ per field) cost ~3 us a record.


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a Fetch response, records left as raw record-batch bytes."""

    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes
    aborted_transactions: list[AbortedTransaction] | None
    error_code: int


def filter_batches(
    records: bytes | bytearray | memoryview,
    *,
    isolation_level: int = READ_UNCOMMITTED,
    aborted_transactions: Iterable[AbortedTransaction] | None = None,
    verify_crc: bool = True,
) -> tuple[list[tuple[int, BatchHeader]], int | None]:
    """Which whole batches of ``records`` a consumer should return, by position.

    Returns ``([(position, header), ...], next_offset)`` where ``next_offset`` follows the last
    whole batch (None if there is none). Control batches are dropped; with READ_COMMITTED so
    are the batches of aborted transactions (Java's ``CompletedFetch`` algorithm). Raises
    CorruptRecordError for a malformed batch.
    """
    # Sorted descending so pop() yields the transaction that starts first.
    aborted = sorted(
        ((a.first_offset, a.producer_id) for a in aborted_transactions or ()), reverse=True
    )
    aborted_producers: set[int] = set()
    kept: list[tuple[int, BatchHeader]] = []
    next_offset: int | None = None
    for position, header in iter_headers(records, verify_crc=verify_crc):
        next_offset = header.next_offset
        if isolation_level == READ_COMMITTED and header.has_producer_id:
            while aborted and aborted[-1][0] <= header.last_offset:
                aborted_producers.add(aborted.pop()[1])
            if header.is_control:
                if header.producer_id in aborted_producers and _is_abort_marker(records, position):
                    aborted_producers.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted_producers:
                continue
        if header.is_control:
            continue
        kept.append((position, header))
    return kept, next_offset


def _is_abort_marker(records: bytes | bytearray | memoryview, position: int) -> bool:
    batch = decode_batch(records, position, verify_crc=False)
    if not batch.records:
        return False
    return peek_control_type(batch.records[0].key) == ControlType.ABORT


class _PartitionState:
    __slots__ = ("buffer", "fetch_next", "high_watermark", "paused", "position")

    def __init__(self) -> None:
        self.position: int | None = None
        self.buffer: collections.deque[ConsumerRecord] = collections.deque()
        self.fetch_next: int | None = None  # where the fetch after the buffer resumes
        self.paused = False
        self.high_watermark: int | None = None


class Consumer(ClientUser):
    """Assign-based async consumer. ``assign([("t", 0)])`` then ``await poll()``."""

    def __init__(
        self,
        client_or_bootstrap: KafkaClient | str | Sequence[str],
        *,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52428800,
        max_partition_fetch_bytes: int = 1048576,
        isolation_level: str = "read_uncommitted",
        auto_offset_reset: str = "latest",
        check_crcs: bool = True,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        client_id: str = "odradek-consumer",
        security: ClientSecurity | None = None,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', "
                f"not {auto_offset_reset!r}"
            )
        if min(fetch_max_bytes, max_partition_fetch_bytes) <= 0 or fetch_min_bytes < 0:
            raise ValueError("fetch sizes must be positive")
        self.isolation_level = isolation_level_id(isolation_level)
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.auto_offset_reset = auto_offset_reset
        self.check_crcs = check_crcs
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._attach_client(
            client_or_bootstrap,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        # The next Fetch, sent when poll() hands records out so the broker's answer comes in
        # while the caller works on them (aiokafka and the Java client fetch ahead too).
        self._prefetch: asyncio.Task[bool] | None = None
        self._started = False
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ClientError("consumer is closed")
        if not self._started:
            await self._client.start()
            self._started = True

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._cancel_prefetch()
        await self._close_client()

    async def _cancel_prefetch(self) -> None:
        task, self._prefetch = self._prefetch, None
        if task is not None:
            task.cancel()
            # Whatever it raised belongs to a poll that will not come.
            await asyncio.gather(task, return_exceptions=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientError("consumer is closed")
        if not self._started:
            raise ClientError("consumer not started: call 'await consumer.start()' first")

    # -- assignment and positions --------------------------------------------------------------

    def assign(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Read exactly these partitions from now on (positions of kept ones are kept)."""
        wanted: dict[TopicPartition, _PartitionState] = {}
        for item in partitions:
            if (
                not isinstance(item, tuple)
                or len(item) != 2
                or not isinstance(item[0], str)
                or not isinstance(item[1], int)
                or item[1] < 0
            ):
                raise ValueError(f"a partition is a (topic, partition >= 0) pair, not {item!r}")
            wanted[item] = self._partitions.get(item) or _PartitionState()
        self._partitions = wanted

    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    def _state(self, topic: str, partition: int) -> _PartitionState:
        state = self._partitions.get((topic, partition))
        if state is None:
            raise ValueError(f"partition {topic}-{partition} is not assigned to this consumer")
        return state

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """The next poll returns records of (topic, partition) from ``offset`` on."""
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, not {offset!r}")
        state = self._state(topic, partition)
        state.position = offset
        state.buffer.clear()
        state.fetch_next = None

    async def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Seek to the log start offset of ``partitions`` (default: every assigned one)."""
        await self._reset(list(partitions) or list(self._partitions), EARLIEST_TIMESTAMP)

    async def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Seek to the end (the high watermark, or the LSO for read_committed)."""
        await self._reset(list(partitions) or list(self._partitions), LATEST_TIMESTAMP)

    def position(self, topic: str, partition: int) -> int:
        """Offset of the next record poll() returns for (topic, partition).

        Raises ValueError if the partition is not assigned, ClientError if its position is not
        known yet (before the first poll or seek).
        """
        state = self._state(topic, partition)
        if state.position is None:
            raise ClientError(
                f"no position yet for {topic}-{partition}: call poll(), seek(), "
                "seek_to_beginning() or seek_to_end() first"
            )
        return state.position

    def highwater(self, topic: str, partition: int) -> int | None:
        """The high watermark the last fetch of (topic, partition) reported, if any."""
        return self._state(topic, partition).high_watermark

    def pause(self, *partitions: tuple[str, int]) -> None:
        for topic, partition in partitions:
            self._state(topic, partition).paused = True

    def resume(self, *partitions: tuple[str, int]) -> None:
        for topic, partition in partitions:
            self._state(topic, partition).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self._partitions.items() if state.paused}

    async def _reset(self, partitions: Sequence[TopicPartition], timestamp: int) -> None:
        self._check_open()
        for tp in partitions:
            self._state(*tp)
        offsets = await self.list_offsets(dict.fromkeys(partitions, timestamp))
        for tp, (offset, _) in offsets.items():
            state = self._partitions.get(tp)
            if state is not None:
                state.position = offset
                state.buffer.clear()
                state.fetch_next = None

    async def list_offsets(
        self, specs: dict[TopicPartition, int], *, isolation_level: int | None = None
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets for each (topic, partition) -> timestamp spec; see :func:`list_offsets`."""
        return await list_offsets(
            self._client,
            specs,
            isolation_level=self.isolation_level if isolation_level is None else isolation_level,
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
        )

    # -- fetching ------------------------------------------------------------------------------

    async def fetch_raw(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        *,
        max_wait_ms: int = 0,
        isolation_level: str = "read_uncommitted",
    ) -> FetchedPartition:
        """Fetch one partition from ``offset``: raw record-batch bytes plus the watermarks.

        Errors of the partition come back in ``error_code`` (OFFSET_OUT_OF_RANGE...), after a
        few retries for leader changes. ``records`` may end in a partial batch; it holds at
        least one whole batch if any exists at ``offset``, even one larger than ``max_bytes``.
        """
        self._check_open()
        level = isolation_level_id(isolation_level)
        tp = (topic, partition)
        fetched: FetchedPartition | None = None
        for attempt in range(4):
            try:
                leader = await self._client.leader_for(topic, partition)
            except KafkaError as exc:
                if not exc.retriable or attempt == 3:
                    raise
                await asyncio.sleep(self.retry_backoff_ms / 1000 * (attempt + 1))
                continue
            answers = await self._fetch_from(
                leader, {tp: offset}, max_wait_ms, max_bytes, max_bytes, level
            )
            fetched = answers.get(tp)
            if fetched is None:
                # A full (sessionless) Fetch answer lists every partition asked for, but some
                # brokers (Tansu 0.6) answer max_wait 0 with no partitions at all. As the Java
                # client does, ignore such an answer and fetch again, now letting the broker
                # wait a moment for its log.
                if attempt == 3:
                    raise ClientError(
                        f"the Fetch response from node {leader} omitted {topic}-{partition}"
                    )
                max_wait_ms = max(max_wait_ms, self.retry_backoff_ms)
                continue
            if fetched.error_code not in METADATA_REFRESH_ERRORS:
                return fetched
            self._client.mark_stale(topic)
            await asyncio.sleep(self.retry_backoff_ms / 1000 * (attempt + 1))
        if fetched is None:
            raise ClientError(f"no Fetch answer for {topic}-{partition}")
        return fetched

    async def _fetch_from(
        self,
        node: int,
        offsets: dict[TopicPartition, int],
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        isolation_level: int,
    ) -> dict[TopicPartition, FetchedPartition]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                {
                    "partition": partition,
                    "current_leader_epoch": -1,
                    "fetch_offset": offset,
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": partition_max_bytes,
                }
            )
        response = await self._client.request(
            node,
            FETCH,
            lambda v: build_request(
                FETCH,
                v,
                replica_id=-1,
                max_wait=max_wait_ms,
                min_bytes=self.fetch_min_bytes if max_wait_ms > 0 else 0,
                max_bytes=max_bytes,
                isolation_level=isolation_level,
                session_id=0,
                session_epoch=-1,
                topics=[{"topic": t, "partitions": p} for t, p in topics.items()],
                forgotten_topics_data=[],
                rack_id="",
            ),
            timeout_ms=self.request_timeout_ms + max_wait_ms,
        )
        if response.error_code:
            raise KafkaError(response.error_code, f"Fetch from node {node}")
        out: dict[TopicPartition, FetchedPartition] = {}
        for topic in response.responses:
            for part in topic.partitions:
                aborted = part.aborted_transactions
                out[(str(topic.topic), int(part.partition_index))] = FetchedPartition(
                    high_watermark=int(part.high_watermark),
                    last_stable_offset=int(getattr(part, "last_stable_offset", -1)),
                    log_start_offset=int(getattr(part, "log_start_offset", -1)),
                    records=bytes(part.records or b""),
                    aborted_transactions=None
                    if aborted is None
                    else [
                        AbortedTransaction(int(a.producer_id), int(a.first_offset)) for a in aborted
                    ],
                    error_code=int(part.error_code),
                )
        return out

    async def poll(
        self, timeout_ms: int = 1000, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        """Records of the assigned, unpaused partitions, waiting up to ``timeout_ms`` for some.

        Returns an empty list on timeout. Raises KafkaError OFFSET_OUT_OF_RANGE when a position
        is invalid and ``auto_offset_reset`` is "none", KafkaError CORRUPT_MESSAGE for a batch
        that fails its checks, other KafkaErrors the broker reports that retrying can't fix.
        """
        self._check_open()
        if max_records is not None and max_records <= 0:
            raise ValueError("max_records must be positive")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            records = self._drain_buffers(max_records)
            if records:
                self._start_prefetch()
                return records
            await self._ensure_positions()
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            fetched = await self._fetch_ahead_or_now(
                max(0, min(self.fetch_max_wait_ms, remaining_ms))
            )
            records = self._drain_buffers(max_records)
            if records:
                self._start_prefetch()
                return records
            if time.monotonic() >= deadline:
                return records
            if not fetched:
                # Nothing could be fetched (no leader, all paused): don't spin.
                await asyncio.sleep(min(self.retry_backoff_ms / 1000, max(0, remaining_ms) / 1000))

    def _start_prefetch(self) -> None:
        """Send the next Fetch now for partitions whose buffer poll() just emptied."""
        if self._prefetch is not None or self._closed:
            return
        if any(
            not s.paused and not s.buffer and s.position is not None
            for s in self._partitions.values()
        ):
            loop = asyncio.get_running_loop()
            self._prefetch = loop.create_task(self._fetch_once(self.fetch_max_wait_ms))

    async def _fetch_ahead_or_now(self, max_wait_ms: int) -> bool:
        """Use the Fetch sent ahead (waiting up to ``max_wait_ms`` for it), else fetch now.

        Answers for partitions seeked, reassigned or refilled meanwhile are dropped by
        ``_handle_fetched``; errors of the early Fetch are raised here, in the poll.
        """
        task = self._prefetch
        if task is not None:
            if not task.done():
                await asyncio.wait({task}, timeout=max_wait_ms / 1000)
                if not task.done():
                    return True  # still at the broker: a later poll collects it
            self._prefetch = None
            if task.result():
                return True
        return await self._fetch_once(max_wait_ms)

    def _drain_buffers(self, max_records: int | None) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        for state in self._partitions.values():
            if state.paused or not state.buffer:
                continue
            buffer = state.buffer
            if max_records is None or len(buffer) <= max_records - len(out):
                out += buffer  # the whole buffer: no per-record bookkeeping
                state.position = buffer[-1].offset + 1
                buffer.clear()
            else:
                popleft = buffer.popleft
                for _ in range(max_records - len(out)):
                    out.append(popleft())
                state.position = out[-1].offset + 1
            if not state.buffer and state.fetch_next is not None:
                state.position = max(state.position or 0, state.fetch_next)
                state.fetch_next = None
            if max_records is not None and len(out) >= max_records:
                break
        return out

    async def _ensure_positions(self) -> None:
        missing = [tp for tp, s in self._partitions.items() if s.position is None]
        if not missing:
            return
        if self.auto_offset_reset == "none":
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"no position for {names} and auto_offset_reset is 'none'",
            )
        spec = EARLIEST_TIMESTAMP if self.auto_offset_reset == "earliest" else LATEST_TIMESTAMP
        with contextlib.suppress(KafkaError):  # retriable trouble: the next poll tries again
            await self._reset(missing, spec)

    async def _fetch_once(self, max_wait_ms: int) -> bool:
        """One round of Fetch requests to every leader; False if nothing could be fetched."""
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, state in self._partitions.items():
            if state.paused or state.buffer or state.position is None:
                continue
            try:
                leader = await self._client.leader_for(*tp)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                log.debug("no leader for %s-%d: %s", tp[0], tp[1], exc)
                continue
            by_leader.setdefault(leader, {})[tp] = state.position
        if not by_leader:
            return False
        answers = await asyncio.gather(
            *(
                self._fetch_from(
                    node,
                    offsets,
                    max_wait_ms,
                    self.fetch_max_bytes,
                    self.max_partition_fetch_bytes,
                    self.isolation_level,
                )
                for node, offsets in by_leader.items()
            ),
            return_exceptions=True,
        )
        for (node, offsets), answer in zip(by_leader.items(), answers, strict=True):
            if isinstance(answer, ClientError):
                log.debug("fetch from node %d failed: %s", node, answer)
                continue
            if isinstance(answer, BaseException):
                raise answer
            for tp, fetched in answer.items():
                if tp in offsets:
                    await self._handle_fetched(tp, offsets[tp], fetched)
        return True

    async def _handle_fetched(
        self, tp: TopicPartition, offset: int, fetched: FetchedPartition
    ) -> None:
        state = self._partitions.get(tp)
        if state is None or state.position != offset or state.buffer:
            return  # reassigned or seeked while the fetch was in flight
        error = fetched.error_code
        if error == ErrorCode.none:
            state.high_watermark = fetched.high_watermark
            self._buffer_records(tp, state, offset, fetched)
        elif error == ErrorCode.offset_out_of_range:
            if self.auto_offset_reset == "none":
                raise KafkaError(
                    error,
                    f"offset {offset} is out of range for {tp[0]}-{tp[1]} "
                    f"(log start {fetched.log_start_offset}, high watermark "
                    f"{fetched.high_watermark}) and auto_offset_reset is 'none'",
                )
            log.info("offset %d out of range for %s-%d: resetting", offset, tp[0], tp[1])
            state.position = None
        elif error in METADATA_REFRESH_ERRORS or KafkaError(error).retriable:
            self._client.mark_stale(tp[0])
        else:
            raise KafkaError(error, f"Fetch of {tp[0]}-{tp[1]} at offset {offset}")

    def _buffer_records(
        self, tp: TopicPartition, state: _PartitionState, offset: int, fetched: FetchedPartition
    ) -> None:
        data = fetched.records
        try:
            kept, next_offset = filter_batches(
                data,
                isolation_level=self.isolation_level,
                aborted_transactions=fetched.aborted_transactions,
                verify_crc=self.check_crcs,
            )
            topic, partition = tp
            append = state.buffer.append
            for position, header in kept:
                # Straight into ConsumerRecords: one object per record, not two.
                decode_batch_into(
                    data,
                    position,
                    ConsumerRecord,
                    {
                        "topic": topic,
                        "partition": partition,
                        "timestamp_type": (
                            LOG_APPEND_TIME if header.is_log_append_time else CREATE_TIME
                        ),
                        "leader_epoch": header.partition_leader_epoch,
                    },
                    append,
                    min_offset=offset,
                    no_headers=NO_HEADERS,
                )
        except CorruptRecordError as exc:
            state.buffer.clear()
            raise KafkaError(
                ErrorCode.corrupt_message,
                f"record batch of {tp[0]}-{tp[1]} at offset {offset} is invalid: {exc}",
            ) from None
        if next_offset is not None and next_offset > offset:
            if state.buffer:
                state.fetch_next = next_offset
            else:
                state.position = next_offset  # only skipped batches (markers, aborted)


async def list_offsets(
    client: KafkaClient,
    specs: dict[TopicPartition, int],
    *,
    isolation_level: int = READ_UNCOMMITTED,
    request_timeout_ms: int = 30000,
    retry_backoff_ms: int = 100,
) -> dict[TopicPartition, tuple[int, int]]:
    """ListOffsets: (topic, partition) -> timestamp spec (-1 latest, -2 earliest, -3 the record
    with the largest timestamp, or a timestamp: the first offset at or after it) ->
    (offset, timestamp) per partition, asking each partition's leader.

    Leader changes are retried a few times; other per-partition errors raise KafkaError.
    """
    result: dict[TopicPartition, tuple[int, int]] = {}
    pending = dict(specs)
    for attempt in range(5):
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        failures: dict[TopicPartition, KafkaError] = {}
        for tp, spec in pending.items():
            try:
                leader = await client.leader_for(*tp)
            except KafkaError as exc:
                failures[tp] = exc
                continue
            by_leader.setdefault(leader, {})[tp] = spec
        answers = await asyncio.gather(
            *(
                _list_offsets_on(client, node, part, isolation_level, request_timeout_ms)
                for node, part in by_leader.items()
            ),
            return_exceptions=True,
        )
        for part, answer in zip(by_leader.values(), answers, strict=True):
            if isinstance(answer, ClientError):
                failures.update(
                    {tp: KafkaError(ErrorCode.network_exception, str(answer)) for tp in part}
                )
                continue
            if isinstance(answer, BaseException):
                raise answer
            for tp, (error, offset, timestamp) in answer.items():
                if error:
                    if error in METADATA_REFRESH_ERRORS:
                        client.mark_stale(tp[0])
                    failures[tp] = KafkaError(error, f"ListOffsets for {tp[0]}-{tp[1]}")
                else:
                    result[tp] = (offset, timestamp)
        pending = {tp: pending[tp] for tp in failures}
        if not pending:
            return result
        fatal = [e for e in failures.values() if not e.retriable]
        if fatal or attempt == 4:
            raise (fatal or list(failures.values()))[0]
        await asyncio.sleep(retry_backoff_ms / 1000 * (attempt + 1))
    return result


async def _list_offsets_on(
    client: KafkaClient,
    node: int,
    specs: dict[TopicPartition, int],
    isolation_level: int,
    request_timeout_ms: int,
) -> dict[TopicPartition, tuple[int, int, int]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), spec in specs.items():
        topics.setdefault(topic, []).append(
            {"partition_index": partition, "timestamp": spec, "current_leader_epoch": -1}
        )
    response = await client.request(
        node,
        LIST_OFFSETS,
        lambda v: build_request(
            LIST_OFFSETS,
            v,
            replica_id=-1,
            isolation_level=isolation_level,
            topics=[{"name": t, "partitions": p} for t, p in topics.items()],
            timeout=request_timeout_ms,
        ),
    )
    out: dict[TopicPartition, tuple[int, int, int]] = {}
    for topic in response.topics:
        for part in topic.partitions:
            out[(str(topic.name), int(part.partition_index))] = (
                int(part.error_code),
                int(part.offset),
                int(part.timestamp),
            )
    return out
