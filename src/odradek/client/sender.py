"""The sender: one task that ships the accumulator's batches in Produce requests.

It drains batches that are full, older than ``linger_ms``, or wanted now (``flush()``,
``close()``). It groups them by partition leader into one Produce request per broker (one batch
per partition per request, at most ``max_request_size`` bytes) with at most
``max_in_flight_requests_per_connection`` requests outstanding per broker. A response resolves
each record's future with its offset, or sends the batch back to the front of its partition's
queue for a retry (retriable error, lost connection), after ``retry_backoff_ms`` and within
``delivery_timeout_ms`` of the batch's creation. The ordering rules of an idempotent producer
are :mod:`odradek.client.idempotence`'s.

``acks=0`` writes requests the broker never answers: futures resolve with offset -1 as soon as
the bytes are written. As the Java client's Sender, in asyncio.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from odradek import timeouts
from odradek.client.accumulator import RecordAccumulator
from odradek.client.core import METADATA_REFRESH_ERRORS, KafkaClient
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
)
from odradek.client.idempotence import IdempotenceManager
from odradek.client.producer_batch import ProducerBatch, TopicPartition
from odradek.client.producer_config import ProducerConfig
from odradek.client.transactions import BUMP_CODES, FATAL_CODES, TransactionManager
from odradek.client.versions import PRODUCE
from odradek.records.appender import RecordsAppender
from odradek.records.batch import EncodedRecords, build_batch, build_encoded_batch

__all__ = ["Sender"]

log = logging.getLogger("odradek.client.producer")  # the producer's parts log under its name


class Sender:
    """Sends what ``accumulator`` holds; completes, retries or fails each batch.

    ``wakeup`` is set by whoever has news for the loop (a new or full batch, a flush, a
    free request slot); ``on_fatal`` is told when the loop dies of an unexpected error.
    """

    def __init__(
        self,
        config: ProducerConfig,
        client: KafkaClient,
        accumulator: RecordAccumulator,
        idempotence: IdempotenceManager,
        txn: TransactionManager | None,
        wakeup: asyncio.Event,
        on_fatal: Callable[[ClientError], None],
    ) -> None:
        self._config = config
        self._client = client
        self._accumulator = accumulator
        self._idempotence = idempotence
        self._txn = txn
        self._wakeup = wakeup
        self._on_fatal = on_fatal
        self._in_flight_per_node: collections.Counter[int] = collections.Counter()
        self.sent: set[ProducerBatch] = set()  # batches on the wire, idempotent or not
        self._task: asyncio.Task[None] | None = None  # the loop's
        self._request_tasks: set[asyncio.Task[None]] = set()
        self._refresh_task: asyncio.Task[None] | None = None
        self.closing = False  # close() began: send everything now, then end the loop
        self.closed = False  # close() ended: no more retries

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="odradek-producer-sender")

    async def stop(self, timeout_ms: int | None) -> None:
        """close()'s first half: send everything buffered, waiting up to ``timeout_ms``, then
        end the loop and cancel the Produce requests still out."""
        self.closing = True
        self._wakeup.set()
        if self._task is not None:
            try:
                await timeouts.wait_for(
                    asyncio.shield(self._task),
                    None if timeout_ms is None else timeout_ms / 1000,
                )
            except TimeoutError:
                pass
            finally:
                # Cancel until it ends: on Python 3.11 the sender's asyncio.wait_for on its
                # wake-up event swallows a cancellation that meets the event being set.
                while not self._task.done():
                    self._task.cancel()
                    await asyncio.wait((self._task,), timeout=0.1)
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        for task in list(self._request_tasks):
            task.cancel()
        for task in list(self._request_tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def cancel_refresh(self) -> None:
        """close()'s second half (after the transaction manager's close)."""
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh_task

    def fail_all(self, error: BaseException) -> None:
        """Fail every batch still queued or sent (whose requests :meth:`stop` cancelled)."""
        for batch in self._accumulator.queued():
            batch.fail(error)
        self._accumulator.queues.clear()
        for batch in list(self.sent):
            batch.fail(error)
        self.sent.clear()
        self.closed = True

    def _pending_work(self) -> bool:
        return self._accumulator.has_queued() or bool(self._request_tasks)

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug or an unrecoverable state: fail loudly instead of leaving futures pending.
            log.exception("producer sender task failed")
            fatal = ClientError(f"the producer failed and cannot send any more: {exc}")
            self._on_fatal(fatal)
            accumulator = self._accumulator
            for batch in accumulator.queued():
                batch.fail(fatal)
                accumulator.release(batch)
            accumulator.queues.clear()

    async def _loop(self) -> None:
        config = self._config
        idempotence = self._idempotence
        while True:
            self._wakeup.clear()
            now = time.monotonic()
            self._expire_batches(now)
            if config.idempotent and self._txn is None:
                try:
                    await idempotence.maybe_bump_epoch()
                except (KafkaError, ClientError) as exc:
                    # InitProducerId failed after an epoch overflow: try again shortly.
                    log.warning("could not get a new producer id: %s", exc)
                    idempotence.bump_requested = True
                    await asyncio.sleep(config.retry_backoff_ms / 1000)
                    continue
            wait, sent = self._drain(now)
            if self.closing and not self._pending_work():
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
        config = self._config
        urgent = self._accumulator.flushing > 0 or self.closing
        heads, next_wake = self._accumulator.ready(now, urgent)
        by_node: dict[int, list[ProducerBatch]] = {}
        missing_leaders: set[str] = set()
        cluster = self._client.cluster
        queues = self._accumulator.queues
        for batch in heads:
            tp = batch.tp
            if self._txn is not None and not self._txn.may_send(tp):
                continue  # AddPartitionsToTxn first (started by may_send)
            leader = cluster.leader(*tp)
            if leader is None or leader not in cluster.brokers or self._client.is_stale(tp[0]):
                missing_leaders.add(tp[0])
                continue
            if self._in_flight_per_node[leader] >= config.max_in_flight:
                continue
            if config.idempotent and not self._idempotence.may_send(tp, batch, queues[tp]):
                continue
            by_node.setdefault(leader, []).append(batch)
        if missing_leaders:
            self._schedule_refresh(missing_leaders)
            retry = now + config.retry_backoff_ms / 1000
            next_wake = retry if next_wake is None else min(next_wake, retry)
        for node, batches in by_node.items():
            self._send_to(node, batches)
        if next_wake is None:
            return None, bool(by_node)
        return max(0.0, next_wake - now), bool(by_node)

    def _expire_batches(self, now: float) -> None:
        for batch in self._accumulator.expired(now):
            tp = batch.tp
            age_ms = (now - batch.created) * 1000
            if self._config.idempotent and batch.has_sequence:
                self._idempotence.request_epoch_bump(self._idempotence.state(tp))
            message = (
                f"expiring {len(batch.records)} record(s) for {tp[0]}-{tp[1]}: "
                f"{age_ms:.0f} ms has passed since batch creation"
            )
            batch.fail(KafkaTimeoutError(message))
            self._accumulator.release(batch)
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

    # -- requests ------------------------------------------------------------------------------

    def _send_to(self, node: int, candidates: list[ProducerBatch]) -> None:
        chosen: list[ProducerBatch] = []
        total = 0
        for batch in candidates:
            if chosen and total + batch.size > self._config.max_request_size:
                break  # the rest waits for the next request
            self._accumulator.pop_head(batch)
            self._prepare(batch)
            total += len(batch.encoded or b"")
            chosen.append(batch)
            self.sent.add(batch)
        self._in_flight_per_node[node] += 1
        task = asyncio.get_running_loop().create_task(self._produce(node, chosen))
        self._request_tasks.add(task)
        task.add_done_callback(self._request_done)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._request_tasks.discard(task)
        self._wakeup.set()  # a slot is free, batches may have come back, close may finish
        if not task.cancelled() and task.exception() is not None:
            log.error("produce request task failed", exc_info=task.exception())

    def _prepare(self, batch: ProducerBatch) -> None:
        config = self._config
        batch.attempts += 1
        if config.idempotent and not batch.has_sequence:
            self._idempotence.assign_sequence(batch)
        if batch.encoded is None and isinstance(batch.records, EncodedRecords | RecordsAppender):
            records = batch.records
            batch.encoded = build_encoded_batch(
                records if isinstance(records, EncodedRecords) else records.encoded(),
                compression=config.compression,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                transactional=self._txn is not None,
            )
        if batch.encoded is None:
            batch.encoded = build_batch(
                batch.records,  # type: ignore[arg-type]
                compression=config.compression,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                transactional=self._txn is not None,
            )
        if config.idempotent:
            self._idempotence.sent(batch)

    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        config = self._config
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
                    transactional_id=config.transactional_id,
                    acks=config.acks,
                    timeout=config.request_timeout_ms,
                    topic_data=topic_data,
                ),
                timeout_ms=config.request_timeout_ms,
                expect_response=config.acks != 0,
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

    # -- outcomes ------------------------------------------------------------------------------

    def _succeeded(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        self.sent.discard(batch)
        if self._config.idempotent:
            self._idempotence.acked(batch, base_offset)
        batch.complete(base_offset, log_append_time_ms)
        self._accumulator.release(batch)

    def _failed(
        self,
        batch: ProducerBatch,
        error: int,
        message: str | None,
        log_start_offset: int,
        retriable: bool | None,
    ) -> None:
        config = self._config
        self.sent.discard(batch)
        topic, partition = batch.tp
        state = self._idempotence.returned(batch) if config.idempotent else None
        if error in METADATA_REFRESH_ERRORS:
            self._client.mark_stale(topic)
        decided = (
            self._idempotence.can_retry(batch, error, log_start_offset)
            if state is not None
            else None
        )
        if retriable is None:
            retriable = decided if decided is not None else KafkaError(error).retriable
        elif decided is not None:
            retriable = decided
        age_ms = (time.monotonic() - batch.created) * 1000
        if (
            retriable
            and config.acks != 0
            and batch.attempts <= config.retries
            and age_ms < config.delivery_timeout_ms
            and not self.closed
        ):
            log.debug(
                "retrying batch for %s-%d (attempt %d): %s",
                topic,
                partition,
                batch.attempts,
                KafkaError(error).name,
            )
            batch.retry_after = time.monotonic() + config.retry_backoff_ms / 1000
            self._accumulator.requeue(batch)
            return
        if state is not None and batch.has_sequence:
            # Its sequence numbers may or may not be in the log: start over under a new epoch.
            self._idempotence.request_epoch_bump(state)
        name = f"{topic}-{partition}"
        exc = self._produce_error(error, f"{message or 'produce failed'} ({name})")
        batch.fail(exc)
        self._accumulator.release(batch)
        if self._txn is not None and isinstance(exc, TransactionError):
            self._txn.fail(exc)

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
