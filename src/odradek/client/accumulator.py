"""The record accumulator: per-partition queues of batches and the buffer memory they hold.

:meth:`Producer.send` appends each record to the open batch of its partition; a batch closes
when the next record would push it past ``batch_size`` bytes. The sender takes batches from
the head of the queues (:meth:`RecordAccumulator.ready`) and puts failed ones back in front
(:meth:`RecordAccumulator.requeue`). Records count against ``buffer_memory`` from
:meth:`RecordAccumulator.reserve` until their batch is acknowledged or fails
(:meth:`RecordAccumulator.release`): a producer faster than the cluster waits for room, up to
``max_block_ms``. As the Java client's RecordAccumulator (with its BufferPool), in asyncio.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence

from odradek import timeouts
from odradek.client.errors import KafkaTimeoutError
from odradek.client.producer_batch import (
    BATCH_OVERHEAD,
    ProducerBatch,
    RecordMetadata,
    TopicPartition,
)
from odradek.client.producer_config import ProducerConfig
from odradek.records.batch import EncodedRecords, Record

__all__ = ["RecordAccumulator"]


class RecordAccumulator:
    """Batches waiting to be sent, one queue per partition, oldest first.

    ``wakeup`` is the sender's: set when a batch starts (its linger timer must be known) or
    fills up. ``on_batch_closed(topic, partition)`` lets the sticky partitioner move on.
    """

    def __init__(
        self,
        config: ProducerConfig,
        wakeup: asyncio.Event,
        on_batch_closed: Callable[[str, int], None],
    ) -> None:
        self._config = config
        self._wakeup = wakeup
        self._on_batch_closed = on_batch_closed
        self.queues: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self.buffered = 0  # bytes of records reserved and not yet released
        self._space_freed = asyncio.Event()
        self.flushing = 0  # flush() calls in progress: every batch is ready now

    # -- buffer memory -------------------------------------------------------------------------

    def try_reserve(self, size: int) -> bool:
        """Take ``size`` bytes of buffer_memory if they are free now (send()'s fast path)."""
        if self.buffered + size <= self._config.buffer_memory:
            self.buffered += size
            return True
        return False

    async def reserve(self, size: int, deadline: float) -> None:
        """Back-pressure: wait (up to max_block_ms) until buffer_memory has room for ``size``."""
        while self.buffered + size > self._config.buffer_memory:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"no buffer space for a {size}-byte record after "
                    f"{self._config.max_block_ms} ms"
                )
            self._space_freed.clear()
            with contextlib.suppress(TimeoutError):
                await timeouts.wait_for(self._space_freed.wait(), remaining)
        self.buffered += size

    def release(self, batch: ProducerBatch) -> None:
        """Give back the memory of a batch that was acknowledged or failed for good."""
        self.buffered -= batch.size - BATCH_OVERHEAD
        self._space_freed.set()

    # -- appending -----------------------------------------------------------------------------

    def append(
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
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = collections.deque()
        batch = queue[-1] if queue and not queue[-1].closed else None
        closed = False
        if batch is not None and batch.records and batch.size + size > self._config.batch_size:
            self.close_batch(batch)
            batch, closed = None, True
        if batch is None:
            batch = ProducerBatch(tp, time.monotonic())
            queue.append(batch)
            self._wakeup.set()  # a new batch starts a linger timer the sender must know about
        batch.records.append(value, key, headers, timestamp_ms)  # type: ignore[call-arg,union-attr]
        batch.futures.append(future)
        batch.size += size
        if batch.size >= self._config.batch_size:
            self.close_batch(batch)
            self._wakeup.set()
            closed = True
        return closed

    def append_batch(
        self, tp: TopicPartition, records: list[Record] | EncodedRecords, size: int
    ) -> asyncio.Future[RecordMetadata]:
        """Queue ``records`` as a batch of their own, closed, behind what ``tp`` already has;
        return the future of its first record."""
        queue = self.queues.setdefault(tp, collections.deque())
        if queue and not queue[-1].closed:
            self.close_batch(queue[-1])
        batch = ProducerBatch(tp, time.monotonic())
        loop = asyncio.get_running_loop()
        batch.records = records
        first: asyncio.Future[RecordMetadata] = loop.create_future()
        batch.futures = [first, *([None] * (len(records) - 1))]
        batch.size = size
        batch.closed = True
        queue.append(batch)
        self._wakeup.set()
        return first

    def close_batch(self, batch: ProducerBatch) -> None:
        if batch.closed:
            return
        batch.closed = True
        self._on_batch_closed(*batch.tp)

    # -- the sender's side ---------------------------------------------------------------------

    def ready(self, now: float, urgent: bool) -> tuple[list[ProducerBatch], float | None]:
        """The head batches whose linger (unless ``urgent`` or full) and retry backoff are
        over, oldest partition first, and when the next one will be (None: none waits)."""
        linger = self._config.linger_ms / 1000
        next_wake: float | None = None
        heads: list[ProducerBatch] = []
        for queue in self.queues.values():
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
            heads.append(batch)
        return heads, next_wake

    def pop_head(self, batch: ProducerBatch) -> None:
        """Take ``batch`` (the head of its queue, from :meth:`ready`) out to be sent."""
        self.queues[batch.tp].popleft()
        self.close_batch(batch)

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a batch to retry back at the front of its partition's queue."""
        queue = self.queues.setdefault(batch.tp, collections.deque())
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

    def expired(self, now: float) -> Iterator[ProducerBatch]:
        """Take out the batches older than delivery_timeout_ms, one at a time: the caller may
        empty the queues (a failed transaction) between two of them."""
        limit = self._config.delivery_timeout_ms / 1000
        for queue in self.queues.values():
            while queue and now - queue[0].created >= limit:
                yield queue.popleft()

    def has_queued(self) -> bool:
        return any(self.queues.values())

    def queued(self) -> list[ProducerBatch]:
        """Every batch not yet sent (or back for a retry), queue by queue."""
        return [b for queue in self.queues.values() for b in queue]

    def take_all(self) -> list[ProducerBatch]:
        """Empty every queue, keeping the partitions' places, and return what they held."""
        batches = self.queued()
        for queue in self.queues.values():
            queue.clear()
        return batches
