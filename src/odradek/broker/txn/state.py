"""Transaction states and the metadata of one transactional id (Kafka's TransactionMetadata).

Every change is a *transition*: the coordinator computes the next state, writes it to
``__transaction_state``, and only once the write succeeded makes it current. While a write
is in flight the id has a ``pending_state`` and other requests get CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue: an epoch that cannot be bumped again needs a new id

TopicPartition = tuple[str, int]


class TxnState(enum.IntEnum):
    """The byte stored in TransactionLogValue.TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (DescribeTransactions / ListTransactions)."""
        return _NAMES[self]


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATE_BY_NAME = {name: state for state, name in _NAMES.items()}

# state -> the states it may be entered from (TransactionState.validPreviousStates).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset(
        {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

# Transactions whose markers are (or must be) on their way to the partitions.
PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
COMPLETED = frozenset({TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


class IllegalTransitionError(Exception):
    """A transition the state machine forbids: a coordinator bug, never a client error."""


@dataclass(frozen=True, slots=True)
class TxnSnapshot:
    """What one TransactionLogValue record holds (an immutable "transit" state)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_timestamp_ms: int  # -1 when no transaction is open
    last_update_timestamp_ms: int
    # Not in the v0 record: the id/epoch before the last bump, to recognise a retry.
    last_producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass
class TransactionMetadata:
    """The coordinator's view of one transactional id."""

    transactional_id: str
    current: TxnSnapshot
    pending_state: TxnState | None = None
    # The leader epoch of its __transaction_state partition when this coordinator took it
    # over; written into every marker so partitions can tell a stale coordinator's apart.
    coordinator_epoch: int = 0

    @property
    def state(self) -> TxnState:
        return self.current.state

    @property
    def producer_id(self) -> int:
        return self.current.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.current.producer_epoch

    def prepare(self, target: TxnState, **changes: object) -> TxnSnapshot:
        """The snapshot after moving to ``target``; marks it pending until :meth:`complete`.

        Raises IllegalTransitionError when ``target`` may not follow the current state.
        """
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: transition to {target.kafka_name} while "
                f"{self.pending_state.kafka_name} is pending"
            )
        check_transition(self.state, target)
        nxt = replace(self.current, state=target, **changes)  # type: ignore[arg-type]
        self.pending_state = target
        return nxt

    def complete(self, snapshot: TxnSnapshot) -> None:
        """The write of ``snapshot`` succeeded: it becomes current."""
        self.current = snapshot
        self.pending_state = None

    def abandon(self) -> None:
        """The write failed: stay where we were."""
        self.pending_state = None


def check_transition(current: TxnState, target: TxnState) -> None:
    if current not in VALID_PREVIOUS[target]:
        raise IllegalTransitionError(
            f"transition from {current.kafka_name} to {target.kafka_name} is not allowed"
        )
