"""The transactional producer's conversation with its transaction coordinator.

:class:`TransactionManager` is the wire side of the Java client's ``TransactionManager``: it
finds the coordinator of a ``transactional.id`` (FindCoordinator, key type TRANSACTION),
gets the producer id and epoch (InitProducerId with the transactional id, which fences older
instances and aborts what they left open), adds partitions as they are first written
(AddPartitionsToTxn, several at once), puts a consumer group's offsets in the transaction
(AddOffsetsToTxn, then TxnOffsetCommit to the *group* coordinator with the consumer's
generation, member id and group instance id: KIP-447) and ends it (EndTxn).

Errors, as the Java client handles them:

* retried: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and lost connections (after finding
  the coordinator again), COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS (the previous
  transaction's markers are still being written), UNKNOWN_TOPIC_OR_PARTITION, timeouts;
* fatal (:class:`~odradek.client.errors.TransactionFatalError`): PRODUCER_FENCED and, from a
  coordinator, INVALID_PRODUCER_EPOCH (:class:`~odradek.client.errors.ProducerFencedError`),
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, TRANSACTION_COORDINATOR_FENCED,
  INVALID_TRANSACTION_TIMEOUT, UNSUPPORTED_VERSION, CLUSTER_AUTHORIZATION_FAILED;
* everything else abortable (:class:`~odradek.client.errors.TransactionAbortableError`):
  the transaction must be aborted, the producer stays usable. UNKNOWN_PRODUCER_ID and
  INVALID_PRODUCER_ID_MAPPING also ask for an epoch bump (KIP-360), done after the abort.

The state machine (``State``) lives here; the producer asks it what it may do.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.client.assignors import GroupMetadata
from odradek.client.core import KafkaClient
from odradek.client.entities import build_request
from odradek.client.errors import (
    ClientError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionError,
    TransactionFatalError,
    TransactionStateError,
)
from odradek.client.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
)

if TYPE_CHECKING:  # group_admin imports the producer (via sync): no import at run time
    from odradek.client.group_admin import OffsetAndMetadata

log = logging.getLogger(__name__)

__all__ = ["State", "TransactionManager", "classify"]

TopicPartition = tuple[str, int]
_GROUP_KEY_TYPE = 0
_TRANSACTION_KEY_TYPE = 1
# Java retries AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS after 20 ms rather than
# retry.backoff.ms: the previous transaction usually completes within milliseconds.
_CONCURRENT_BACKOFF_S = 0.02

_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
_RETRY = frozenset(
    {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.request_timed_out,
        ErrorCode.unstable_offset_commit,
    }
)
_FENCED = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})
FATAL_CODES = frozenset(
    {
        ErrorCode.transactional_id_authorization_failed,
        ErrorCode.invalid_txn_state,
        ErrorCode.transaction_coordinator_fenced,
        ErrorCode.invalid_transaction_timeout,
        ErrorCode.unsupported_version,
        ErrorCode.unsupported_for_message_format,
        ErrorCode.cluster_authorization_failed,
    }
)
# The coordinator or a leader forgot this producer id: abort, then bump the epoch (KIP-360).
BUMP_CODES = frozenset({ErrorCode.unknown_producer_id, ErrorCode.invalid_producer_id_mapping})


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING_TRANSACTION"
    ABORTING = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


def classify(code: int, message: str) -> TransactionError:
    """The typed exception for an error code answered to a transactional request."""
    if code in _FENCED:
        return ProducerFencedError(code, message)
    if code in FATAL_CODES:
        return TransactionFatalError(code, message)
    return TransactionAbortableError(code, message)


class _Retry(Exception):
    """Internal: try the request again (after finding the coordinator again if ``moved``)."""

    def __init__(self, code: int, moved: bool = False) -> None:
        super().__init__(code)
        self.code = code
        self.moved = moved


class TransactionManager:
    """Transactional state of one producer. Borrows ``client``."""

    def __init__(
        self,
        client: KafkaClient,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        max_block_ms: int,
        on_partitions_added: Callable[[], None],
        on_error: Callable[[TransactionError], None],
    ) -> None:
        if not transactional_id:
            raise ValueError("transactional_id must not be empty")
        self.client = client
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_block_ms = max_block_ms
        self._on_partitions_added = on_partitions_added
        self._on_error = on_error
        self.state = State.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.last_error: TransactionError | None = None
        self.bump_needed = False
        self.partitions: set[TopicPartition] = set()  # in the transaction, per the coordinator
        self._new_partitions: set[TopicPartition] = set()  # written to, not added yet
        self._adding: asyncio.Task[None] | None = None
        self._started = False  # the coordinator knows of this transaction (Ongoing)
        self._coordinator: int | None = None
        self._group_coordinators: dict[str, int] = {}

    # -- state ---------------------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        return self.state is State.IN_TRANSACTION

    def check(self, what: str, *allowed: State) -> None:
        """Raise unless the state is one of ``allowed``: the pending error if there is one,
        else :class:`TransactionStateError` naming the call and the state."""
        if self.state in allowed:
            return
        if self.state in (State.FATAL_ERROR, State.ABORTABLE_ERROR) and self.last_error:
            raise self.last_error
        if self.state is State.UNINITIALIZED:
            raise TransactionStateError(f"cannot {what} before init_transactions()")
        raise TransactionStateError(f"cannot {what} in state {self.state.value}")

    def fail(self, error: TransactionError) -> None:
        """Enter ABORTABLE_ERROR or FATAL_ERROR (fatal wins) and tell the producer."""
        if self.state is State.FATAL_ERROR:
            return
        if error.abortable and self.state is State.ABORTABLE_ERROR:
            return  # keep the first error: it is the cause
        if error.abortable and self.state in (State.READY, State.UNINITIALIZED, State.ABORTING):
            return  # nothing left to doom (a late answer during or after an abort)
        self.last_error = error
        self.state = State.ABORTABLE_ERROR if error.abortable else State.FATAL_ERROR
        log.info("transactional id %r: %s", self.transactional_id, error)
        self._on_error(error)

    # -- partitions ----------------------------------------------------------------------------

    def may_send(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may go out; if not yet in the transaction, start adding
        it (batched with the other new partitions)."""
        if tp in self.partitions:
            return True
        if self.state is State.IN_TRANSACTION or self.state is State.COMMITTING:
            self._new_partitions.add(tp)
            if self._adding is None or self._adding.done():
                self._adding = asyncio.get_running_loop().create_task(self._add_partitions())
        return False

    async def _add_partitions(self) -> None:
        while self._new_partitions and self.state in (State.IN_TRANSACTION, State.COMMITTING):
            wanted = sorted(self._new_partitions)
            by_topic: dict[str, list[int]] = {}
            for topic, partition in wanted:
                by_topic.setdefault(topic, []).append(partition)
            topics = [{"name": t, "partitions": p} for t, p in by_topic.items()]

            def error_of(response: Any) -> int:
                worst = 0
                for topic in response.results_by_topic_v3_and_below:
                    for part in topic.results_by_partition:
                        code = int(part.partition_error_code)
                        if code and code != ErrorCode.operation_not_attempted:
                            worst = code if worst == 0 or worst in _RETRY else worst
                return worst

            try:
                await self._call(
                    ADD_PARTITIONS_TO_TXN,
                    lambda v, topics=topics: build_request(
                        ADD_PARTITIONS_TO_TXN,
                        v,
                        v3_and_below_transactional_id=self.transactional_id,
                        v3_and_below_producer_id=self.producer_id,
                        v3_and_below_producer_epoch=self.producer_epoch,
                        v3_and_below_topics=topics,
                    ),
                    error_of,
                    "AddPartitionsToTxn",
                )
            except TransactionError as exc:
                self.fail(exc)
                return
            except (KafkaError, ClientError) as exc:  # timed out retrying
                self.fail(TransactionAbortableError(ErrorCode.request_timed_out, str(exc)))
                return
            except Exception as exc:  # a bug: never leave the batches waiting for ever
                log.exception("AddPartitionsToTxn failed")
                self.fail(TransactionFatalError(ErrorCode.unknown_server_error, repr(exc)))
                return
            self._started = True
            self.partitions.update(wanted)
            self._new_partitions.difference_update(wanted)
            self._on_partitions_added()

    async def wait_for_partitions(self) -> None:
        """Until no AddPartitionsToTxn is pending (commit waits for this before flushing)."""
        while self._adding is not None and not self._adding.done():
            await asyncio.shield(self._adding)

    # -- the calls -----------------------------------------------------------------------------

    async def init(self) -> tuple[int, int]:
        """InitProducerId with the transactional id: (producer id, epoch). With a known id and
        epoch (after an abortable error that needs it) this bumps the epoch (KIP-360)."""
        bump = self.producer_id >= 0

        def error_of(response: Any) -> int:
            return int(response.error_code)

        response = await self._call(
            INIT_PRODUCER_ID,
            lambda v: build_request(
                INIT_PRODUCER_ID,
                v,
                transactional_id=self.transactional_id,
                transaction_timeout=self.transaction_timeout_ms,
                producer_id=self.producer_id if bump and v >= 3 else -1,
                producer_epoch=self.producer_epoch if bump and v >= 3 else -1,
            ),
            error_of,
            "InitProducerId",
        )
        self.producer_id = int(response.producer_id)
        self.producer_epoch = int(response.producer_epoch)
        self.bump_needed = False
        log.debug(
            "transactional id %r: producer id %d epoch %d",
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
        )
        return self.producer_id, self.producer_epoch

    def begin(self) -> None:
        self.partitions.clear()
        self._new_partitions.clear()
        self._started = False
        self.state = State.IN_TRANSACTION

    async def send_offsets(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], group: GroupMetadata
    ) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator (KIP-447)."""

        def top_error(response: Any) -> int:
            return int(response.error_code)

        await self._call(
            ADD_OFFSETS_TO_TXN,
            lambda v: build_request(
                ADD_OFFSETS_TO_TXN,
                v,
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                group_id=group.group_id,
            ),
            top_error,
            "AddOffsetsToTxn",
        )
        self._started = True
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), value in sorted(offsets.items()):
            if isinstance(value, int):
                offset, leader_epoch, metadata = value, -1, ""
            else:
                offset, leader_epoch, metadata = value.offset, value.leader_epoch, value.metadata
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": leader_epoch,
                    "committed_metadata": metadata,
                }
            )
        topics = [{"name": t, "partitions": parts} for t, parts in by_topic.items()]

        def part_error(response: Any) -> int:
            worst = 0
            for topic in response.topics:
                for part in topic.partitions:
                    code = int(part.error_code)
                    if code:
                        worst = code if worst == 0 or worst in _RETRY else worst
            return worst

        await self._call(
            TXN_OFFSET_COMMIT,
            lambda v: build_request(
                TXN_OFFSET_COMMIT,
                v,
                transactional_id=self.transactional_id,
                group_id=group.group_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=topics,
            ),
            part_error,
            f"TxnOffsetCommit for group {group.group_id!r}",
            group=group.group_id,
        )

    async def end(self, commit: bool) -> None:
        """EndTxn, if the coordinator knows of a transaction (else there is nothing to end)."""
        if self._started:

            def error_of(response: Any) -> int:
                return int(response.error_code)

            await self._call(
                END_TXN,
                lambda v: build_request(
                    END_TXN,
                    v,
                    transactional_id=self.transactional_id,
                    producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    committed=commit,
                ),
                error_of,
                "EndTxn(COMMIT)" if commit else "EndTxn(ABORT)",
            )
        self.partitions.clear()
        self._new_partitions.clear()
        self._started = False
        self.last_error = None
        self.state = State.READY

    async def close(self) -> None:
        if self._adding is not None and not self._adding.done():
            self._adding.cancel()
            try:
                await self._adding
            except asyncio.CancelledError:
                pass

    # -- plumbing ------------------------------------------------------------------------------

    async def _find(self, key: str, key_type: int) -> int:
        response = await self.client.request(
            None,
            FIND_COORDINATOR,
            lambda v: build_request(
                FIND_COORDINATOR, v, key=key, key_type=key_type, coordinator_keys=[key]
            ),
            timeout_ms=self.request_timeout_ms,
        )
        answer = response.coordinators[0] if hasattr(response, "coordinators") else response
        code = int(answer.error_code)
        if code:
            if code in _COORDINATOR_MOVED or code in _RETRY:
                raise _Retry(code, moved=True)
            raise classify(code, f"FindCoordinator for {key!r}")
        node = int(answer.node_id)
        if node not in self.client.cluster.brokers:
            await self.client.metadata([], refresh=True)
        return node

    async def _call(
        self,
        api_key: int,
        build: Callable[[int], object],
        error_of: Callable[[Any], int],
        what: str,
        *,
        group: str | None = None,
    ) -> Any:
        """Send to the transaction coordinator (or ``group``'s coordinator), retrying what
        Kafka retries, for up to ``max_block_ms``; raise a typed error otherwise."""
        deadline = time.monotonic() + self.max_block_ms / 1000
        last: str = ""
        while True:
            try:
                if group is None:
                    if self._coordinator is None:
                        self._coordinator = await self._find(
                            self.transactional_id, _TRANSACTION_KEY_TYPE
                        )
                    node = self._coordinator
                else:
                    if group not in self._group_coordinators:
                        self._group_coordinators[group] = await self._find(group, _GROUP_KEY_TYPE)
                    node = self._group_coordinators[group]
                response = await self.client.request(
                    node, api_key, build, timeout_ms=self.request_timeout_ms
                )
                code = error_of(response)
                if code in _COORDINATOR_MOVED:
                    raise _Retry(code, moved=True)
                if code in _RETRY:
                    raise _Retry(code)
                if code:
                    error = classify(code, f"{what} for {self.transactional_id!r}")
                    if code in BUMP_CODES:
                        self.bump_needed = True
                    raise error
                return response
            except _Retry as retry:
                last = KafkaError(retry.code).name
                if retry.moved:
                    self._forget(group)
                backoff = (
                    _CONCURRENT_BACKOFF_S
                    if retry.code == ErrorCode.concurrent_transactions
                    else self.retry_backoff_ms / 1000
                )
            except KafkaError as exc:
                if isinstance(exc, TransactionError) or not exc.retriable:
                    if not isinstance(exc, TransactionError):
                        exc = classify(exc.code, f"{what}: {exc.message or exc.name}")
                    raise exc from None
                last = exc.name
                backoff = self.retry_backoff_ms / 1000
            except ClientError as exc:  # lost connection, request timeout: find it again
                last = str(exc)
                self._forget(group)
                backoff = self.retry_backoff_ms / 1000
            if time.monotonic() + backoff >= deadline:
                raise KafkaTimeoutError(
                    f"{what} for {self.transactional_id!r} did not complete within "
                    f"{self.max_block_ms} ms (last: {last})"
                )
            log.debug("%s: retrying after %s", what, last)
            await asyncio.sleep(backoff)

    def _forget(self, group: str | None) -> None:
        if group is None:
            self._coordinator = None
        else:
            self._group_coordinators.pop(group, None)
