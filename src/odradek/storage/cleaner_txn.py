"""Transaction bookkeeping of a cleaning pass (Kafka's CleanedTransactionMetadata).

Both walks of a pass use it in offset order: building the offset map (so the data of
aborted transactions never hides a committed value) and filtering batches (so that data
is dropped and markers that guard nothing any more can go). The rules are in
:mod:`odradek.storage.cleaner`'s "Transactions" paragraph.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from odradek.records.control import ControlType
from odradek.records.header import BatchHeader
from odradek.storage.txn_index import AbortedTxn


@dataclass
class _AbortedTxnState:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """Transaction state while walking the log in offset order (Kafka's class of this name).

    Decides which transactional batches are aborted data (removable) and which markers may
    be removed, and collects the aborted transactions the new segment's txn index keeps.
    """

    def __init__(self) -> None:
        self._pending: list[AbortedTxn] = []  # sorted by first offset, consumed from the front
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self._ongoing_committed: set[int] = set()
        self.retained_aborted: list[AbortedTxn] = []

    def add_aborted_transactions(self, txns: Iterable[AbortedTxn]) -> None:
        known = set(self._pending)
        merged = self._pending + [txn for txn in txns if txn not in known]
        merged.sort(key=lambda txn: txn.first_offset)
        self._pending = merged

    def _consume_up_to(self, offset: int) -> None:
        taken = 0
        for txn in self._pending:
            if txn.first_offset > offset:
                break
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))
            taken += 1
        if taken:
            del self._pending[:taken]

    def on_control_batch(self, header: BatchHeader, control_type: int | None) -> bool:
        """A marker was read; True if it may be discarded (it guards no data any more).

        ``control_type`` is None for a control batch whose records were already removed.
        """
        self._consume_up_to(header.last_offset)
        if control_type is None:
            return True
        producer_id = header.producer_id
        if control_type == ControlType.ABORT:
            state = self._ongoing_aborted.pop(producer_id, None)
            if state is not None and state.last_observed_batch_offset is not None:
                # Data of this transaction was seen (and dropped) in this pass: keep the
                # marker and its index entry one more round.
                self.retained_aborted.append(state.txn)
                return False
            return True
        if control_type == ControlType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False  # some other control record: never ours to remove

    def on_data_batch(self, header: BatchHeader) -> bool:
        """A data batch was read; True if it belongs to an aborted transaction."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self._ongoing_aborted.get(header.producer_id)
        if state is not None:
            state.last_observed_batch_offset = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False
