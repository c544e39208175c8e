"""Idempotence: the producer id and epoch, and sequence numbers counted per partition.

With ``enable_idempotence`` (the default with ``acks="all"``) the producer gets a producer id
and epoch from InitProducerId; every batch carries them plus the sequence number of its first
record, counted per partition. The broker drops duplicates and rejects gaps, so retries
neither duplicate nor reorder records. Ordering rules, as in the Java client's
TransactionManager (whose idempotent half this is):

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

Producer id, epoch and base sequence are stamped into an encoded batch in place
(:meth:`ProducerBatch.stamp`), so a retried compressed batch is never re-compressed. A
transactional producer gets its id and epoch from the :class:`TransactionManager` instead, and
leaves epoch bumps to the coordinator (on the next abort).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from odradek.client.core import KafkaClient
from odradek.client.entities import build_request
from odradek.client.errors import ClientError, KafkaError
from odradek.client.producer_batch import ProducerBatch, TopicPartition
from odradek.client.producer_config import MAX_IN_FLIGHT_PER_PARTITION, ProducerConfig
from odradek.client.transactions import TransactionManager
from odradek.client.versions import INIT_PRODUCER_ID

__all__ = ["MAX_EPOCH", "MAX_SEQUENCE", "IdempotenceManager", "PartitionState"]

log = logging.getLogger("odradek.client.producer")  # the producer's parts log under its name

MAX_SEQUENCE = 2**31  # sequences wrap at int32 max, as in Kafka
MAX_EPOCH = 32767


class PartitionState:
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
        self.in_flight: list[ProducerBatch] = []  # on the wire, in sequence order
        self.needs_rewrite = False


class IdempotenceManager:
    """The producer id and epoch, and each partition's sequences and batches in flight."""

    def __init__(
        self, client: KafkaClient, config: ProducerConfig, txn: TransactionManager | None
    ) -> None:
        self._client = client
        self._config = config
        self._txn = txn
        self.producer_id = -1
        self.producer_epoch = -1
        self.bump_requested = False
        self._states: dict[TopicPartition, PartitionState] = {}

    # -- producer id and epoch -----------------------------------------------------------------

    async def init_producer_id(self) -> None:
        deadline = time.monotonic() + self._config.max_block_ms / 1000
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
                await asyncio.sleep(self._config.retry_backoff_ms / 1000)
                continue
            self.producer_id = int(response.producer_id)
            self.producer_epoch = int(response.producer_epoch)
            log.debug("producer id %d epoch %d", self.producer_id, self.producer_epoch)
            return

    def request_epoch_bump(self, state: PartitionState) -> None:
        state.needs_rewrite = True
        if self._txn is not None:
            # Only the coordinator hands out epochs of a transactional id: the next abort
            # asks for a bump (InitProducerId with the current id and epoch).
            self._txn.bump_needed = True
            return
        if (state.producer_id, state.producer_epoch) == (self.producer_id, self.producer_epoch):
            self.bump_requested = True

    async def maybe_bump_epoch(self) -> None:
        if not self.bump_requested:
            return
        self.bump_requested = False
        if 0 <= self.producer_epoch < MAX_EPOCH:
            # Brokers accept a higher epoch of the same producer id starting at sequence 0.
            self.producer_epoch += 1
            log.info("bumped producer epoch to %d", self.producer_epoch)
        else:
            self.producer_id = self.producer_epoch = -1  # nothing is sent until a new id comes
            await self.init_producer_id()

    # -- sequences -----------------------------------------------------------------------------

    def state(self, tp: TopicPartition) -> PartitionState:
        state = self._states.get(tp)
        if state is None:
            state = self._states[tp] = PartitionState()
        return state

    def may_send(
        self, tp: TopicPartition, batch: ProducerBatch, queue: Iterable[ProducerBatch]
    ) -> bool:
        """Apply the ordering rules to ``batch``, the head of ``tp``'s ``queue``."""
        if self.producer_id < 0:
            return False
        state = self.state(tp)
        if state.needs_rewrite:
            if state.in_flight:
                return False
            self._rewrite_sequences(state, queue)
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

    def _rewrite_sequences(self, state: PartitionState, queue: Iterable[ProducerBatch]) -> None:
        """Renumber the queued (retrying) batches from 0 under the current epoch."""
        sequence = 0
        for batch in queue:
            if not batch.has_sequence:
                break
            batch.stamp(self.producer_id, self.producer_epoch, sequence)
            batch.sequence_reset = True
            sequence = (sequence + len(batch.records)) % MAX_SEQUENCE
        state.producer_id = self.producer_id
        state.producer_epoch = self.producer_epoch
        state.next_sequence = sequence
        state.last_acked_sequence = -1
        state.needs_rewrite = False

    def assign_sequence(self, batch: ProducerBatch) -> None:
        """Give a batch sent for the first time the partition's next sequence."""
        state = self.state(batch.tp)
        sequence = state.next_sequence
        state.next_sequence = (sequence + len(batch.records)) % MAX_SEQUENCE
        batch.stamp(self.producer_id, self.producer_epoch, sequence)

    def sent(self, batch: ProducerBatch) -> None:
        state = self.state(batch.tp)
        state.in_flight.append(batch)
        state.in_flight.sort(key=lambda b: b.base_sequence)

    def returned(self, batch: ProducerBatch) -> PartitionState:
        """``batch`` is no longer in flight (answered or lost); its partition's state."""
        state = self.state(batch.tp)
        with contextlib.suppress(ValueError):
            state.in_flight.remove(batch)
        return state

    def acked(self, batch: ProducerBatch, base_offset: int) -> None:
        state = self.returned(batch)
        if batch.producer_epoch == state.producer_epoch and batch.has_sequence:
            last = (batch.base_sequence + len(batch.records) - 1) % MAX_SEQUENCE
            state.last_acked_sequence = last
        if base_offset >= 0:
            state.last_acked_offset = max(
                state.last_acked_offset, base_offset + len(batch.records) - 1
            )

    def can_retry(self, batch: ProducerBatch, error: int, log_start_offset: int) -> bool | None:
        """The Java client's TransactionManager.canRetry for an idempotent producer.

        Returns True/False when idempotence decides, None to fall back on retriability.
        """
        state = self.state(batch.tp)
        if error == ErrorCode.unknown_producer_id:
            if self._txn is not None:
                return False  # abortable; the abort bumps the epoch (KIP-360), as in Java
            if log_start_offset < 0 or batch.sequence_reset:
                return True
            # Either the log head holding our state was deleted (retention) or the broker lost
            # it: in both cases start again under a new epoch, from sequence 0.
            self.request_epoch_bump(state)
            return True
        if error == ErrorCode.out_of_order_sequence_number:
            expected = (state.last_acked_sequence + 1) % MAX_SEQUENCE
            if batch.producer_epoch != state.producer_epoch or batch.base_sequence != expected:
                return True  # a batch before it failed: retry once that one is resolved
            if self._txn is not None:
                return False  # a real gap dooms the transaction: abort, new epoch
            self.request_epoch_bump(state)  # a real gap
            return True
        return None
