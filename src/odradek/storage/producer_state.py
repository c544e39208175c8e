"""Producer state of one partition: idempotence, producer fencing and open transactions.

Kafka's ProducerStateManager. For every producer id that wrote to the partition it keeps
the producer epoch, the metadata of its last 5 batches (so a retried batch is recognised
and answered with its original offsets instead of being written twice), the epoch of
the last transaction coordinator that wrote a marker, and the first offset of the
producer's open transaction. The open transactions give the first unstable offset, from
which the broker derives the last stable offset (LSO) that bounds read_committed fetches.

Rules applied to a client batch (``check_duplicate_or_validate``), as modern Kafka does:

- an exact repeat (same epoch, same first and last sequence) of one of the producer's
  last 5 batches is a duplicate: its original :class:`BatchMetadata` is returned;
- an epoch older than the producer's current one -> InvalidProducerEpochError;
- a newer epoch must start at sequence 0 -> else OutOfOrderSequenceError;
- the same epoch must continue the sequence (last + 1, wrapping from Int32.MAX to 0)
  -> else OutOfOrderSequenceError;
- an unknown producer id is accepted with ANY sequence. Before KIP-360 (Kafka 2.5) a
  non-zero sequence from an unknown producer was UNKNOWN_PRODUCER_ID; since then the
  broker accepts it, because the producer's state can legitimately vanish (retention
  removed its batches, producer.id.expiration.ms passed) and rejecting would force the
  producer to reset. UnknownProducerIdError is therefore never raised here;
- a non-transactional batch while the producer's transaction is open ->
  InvalidTxnStateError;
- a COMMIT/ABORT marker with an older producer epoch -> InvalidProducerEpochError, with
  an older coordinator epoch -> TransactionCoordinatorFencedError.

Origin ``"coordinator"`` (offset commits written by the group coordinator) checks epochs
but not sequences and never deduplicates; ``"replication"`` checks nothing (the leader
did). The caller must call :meth:`ProducerStateManager.update` for a batch before it
checks the next one, since each check is against the state left by earlier updates.

Snapshot file ``<partition dir>/<20-digit offset>.snapshot``: the state after every
batch below ``offset``. Modelled on Kafka's, but keeping all 5 retained batches per
producer so deduplication survives a restart. Big-endian::

    0   version                   int16   = 1
    2   crc                       uint32  CRC32C of every byte after this field
    6   producer_count            int32
        per producer:
          producer_id             int64
          producer_epoch          int16
          coordinator_epoch       int32
          last_timestamp          int64
          current_txn_first_offset int64  -1 when no transaction is open
          batch_count             int8    0..5, oldest first
          per batch:
            first_sequence        int32
            last_sequence         int32
            first_offset          int64
            last_offset           int64
            timestamp             int64

Snapshots are written atomically (temp file, fsync, rename, directory fsync). A snapshot
that fails its version, CRC or length check is deleted and the next older one is tried.
After :meth:`~ProducerStateManager.load` or :meth:`~ProducerStateManager.truncate_and_reload`
the state reflects offsets below ``map_end_offset``; the Log replays the batches from
there to its end through :meth:`~ProducerStateManager.update`.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from odradek.records.batch import decode_batch
from odradek.records.control import parse_control_record
from odradek.records.errors import CorruptRecordError
from odradek.records.header import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from odradek.storage.checkpoint import atomic_write
from odradek.storage.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
INT32_MAX = 2**31 - 1

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")

ORIGIN_CLIENT = "client"
ORIGIN_COORDINATOR = "coordinator"
ORIGIN_REPLICATION = "replication"
ORIGINS = frozenset({ORIGIN_CLIENT, ORIGIN_COORDINATOR, ORIGIN_REPLICATION})

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1

Buffer = bytes | bytearray | memoryview


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


@dataclass(frozen=True)
class BatchMetadata:
    """Where one of a producer's batches went: sequences, offsets, stored max timestamp."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction closed by a marker at ``last_offset``.

    ``last_stable_offset`` is the LSO right after it completed (the first offset of the
    oldest transaction still open from another producer, else ``last_offset + 1``): the
    value Kafka stores in the aborted-transaction index entry.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


@dataclass(frozen=True)
class EndTxnMarker:
    """The content of a COMMIT/ABORT control record."""

    control_type: int
    coordinator_epoch: int

    @property
    def is_abort(self) -> bool:
        return self.control_type == CONTROL_TYPE_ABORT


@dataclass
class ProducerStateEntry:
    """Everything the partition remembers about one producer id."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def _set_epoch(self, epoch: int) -> None:
        # A new epoch is a new sequence space: the old batches can no longer be repeated.
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
        )


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (sequences wrap at Int32.MAX)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


_MAX_MARKER_RECORDS = 64 * 1024


def read_end_txn_marker(batch: Buffer, header: BatchHeader) -> EndTxnMarker | None:
    """Decode the COMMIT/ABORT marker in the first record of a control batch.

    ``batch`` holds the whole batch from its first byte. Returns None for a control batch
    with no records (compaction can empty one). Raises InvalidRecordError for a batch or
    marker that cannot be read, or a control record that is not COMMIT/ABORT.
    """
    if header.records_count == 0:
        return None
    try:
        # A marker is one ~20-byte record (Kafka never compresses control batches);
        # the bound keeps a hostile one from inflating.
        decoded = decode_batch(batch, verify_crc=False, max_uncompressed=_MAX_MARKER_RECORDS)
        if not decoded.records:
            return None
        record = decoded.records[0]
        control_type, coordinator_epoch = parse_control_record(record.key, record.value)
    except CorruptRecordError as exc:
        raise InvalidRecordError(f"bad transaction marker: {exc}") from None
    return EndTxnMarker(int(control_type), coordinator_epoch)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    body = bytearray()
    entries = list(entries)
    body += _COUNT.pack(len(entries))
    for entry in entries:
        body += _PRODUCER.pack(
            entry.producer_id,
            entry.producer_epoch,
            entry.coordinator_epoch,
            entry.last_timestamp,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
            len(entry.batches),
        )
        for batch in entry.batches:
            body += _BATCH.pack(
                batch.first_seq,
                batch.last_seq,
                batch.first_offset,
                batch.last_offset,
                batch.timestamp,
            )
    return _SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes, source: str) -> list[ProducerStateEntry]:
    """Parse a snapshot; CorruptSnapshotError (naming ``source``) if anything is off."""
    if len(data) < _SNAPSHOT_HEADER.size + _COUNT.size:
        raise CorruptSnapshotError(f"{source}: {len(data)} bytes is too short for a snapshot")
    version, stored_crc = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{source}: unknown snapshot version {version}")
    computed = crc32c(memoryview(data)[_SNAPSHOT_HEADER.size :])
    if computed != stored_crc:
        raise CorruptSnapshotError(
            f"{source}: CRC32C mismatch (stored {stored_crc:#010x}, computed {computed:#010x})"
        )
    try:
        pos = _SNAPSHOT_HEADER.size
        (count,) = _COUNT.unpack_from(data, pos)
        pos += _COUNT.size
        if count < 0:
            raise CorruptSnapshotError(f"{source}: negative producer count {count}")
        entries = []
        for _ in range(count):
            pid, epoch, coordinator_epoch, last_ts, txn_first, n_batches = _PRODUCER.unpack_from(
                data, pos
            )
            pos += _PRODUCER.size
            if not 0 <= n_batches <= NUM_BATCHES_TO_RETAIN:
                raise CorruptSnapshotError(f"{source}: producer {pid} has {n_batches} batches")
            entry = ProducerStateEntry(
                pid, epoch, coordinator_epoch, last_ts, txn_first if txn_first >= 0 else None
            )
            for _ in range(n_batches):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(data, pos)))
                pos += _BATCH.size
            entries.append(entry)
    except struct.error:
        raise CorruptSnapshotError(f"{source}: truncated producer entries") from None
    if pos != len(data):
        raise CorruptSnapshotError(f"{source}: {len(data) - pos} unexpected trailing bytes")
    return entries


class ProducerStateManager:
    """Per-partition producer table with snapshots in the partition directory."""

    def __init__(
        self,
        partition_dir: Path,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.partition_dir = (
            partition_dir if isinstance(partition_dir, Path) else Path(partition_dir)
        )
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._clock = clock
        self._lock = threading.RLock()
        self._producers: dict[int, ProducerStateEntry] = {}
        # first offset of each open transaction -> its producer id
        self._ongoing: dict[int, int] = {}
        # the state reflects every batch below this offset
        self.map_end_offset = 0

    # -- snapshots on disk -----------------------------------------------------------

    def snapshot_offsets(self, names: list[str] | None = None) -> list[int]:
        """Offsets of the snapshot files present, ascending (among ``names``, the
        directory's listing, when the caller has just made one)."""
        offsets = []
        if names is None:
            try:
                names = os.listdir(self.partition_dir)
            except FileNotFoundError:
                return []
        for name in names:
            stem = name[: -len(SNAPSHOT_SUFFIX)]
            if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def last_snapshot_offset(self) -> int | None:
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    def _snapshot_path(self, offset: int) -> Path:
        return self.partition_dir / snapshot_file_name(offset)

    def _delete_snapshot(self, offset: int) -> None:
        try:
            self._snapshot_path(offset).unlink()
        except FileNotFoundError:
            pass

    def delete_snapshots_before(self, offset: int) -> None:
        """Remove snapshots below ``offset`` (their segments were deleted)."""
        with self._lock:
            for snapshot_offset in self.snapshot_offsets():
                if snapshot_offset < offset:
                    self._delete_snapshot(snapshot_offset)

    def take_snapshot(self, at_offset: int, *, skip_if_empty_at: int | None = None) -> None:
        """Persist the state as of ``at_offset`` (normally the log end offset at a roll).

        ``at_offset`` must not be below ``map_end_offset``: the state would then include
        batches the snapshot's name says it does not. No-op if that snapshot exists, and
        when the state is empty and ``at_offset`` is ``skip_if_empty_at`` (a log's start:
        loading finds no snapshot and starts empty there anyway; Kafka too writes none
        for a log that never moved).
        """
        with self._lock:
            if at_offset < self.map_end_offset:
                raise ValueError(
                    f"snapshot at {at_offset} is below the state's end offset {self.map_end_offset}"
                )
            self.map_end_offset = at_offset
            if at_offset == skip_if_empty_at and not self._producers:
                return
            path = self._snapshot_path(at_offset)
            if path.exists():
                return
            atomic_write(path, encode_snapshot(self._producers.values()))

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()

    def _load_latest_snapshot(self, log_start_offset: int, offsets: list[int]) -> None:
        """Fill the (cleared) state from the newest readable snapshot among ``offsets``
        (ascending, already in range), else start empty."""
        now_ms = self._now_ms()
        for offset in reversed(offsets):
            path = self._snapshot_path(offset)
            try:
                entries = decode_snapshot(path.read_bytes(), str(path))
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("skipping producer snapshot: %s", exc)
                self._delete_snapshot(offset)
                continue
            for entry in entries:
                if not self._is_expired(entry, now_ms):
                    self._load_entry(entry)
            self.map_end_offset = offset
            return
        self.map_end_offset = log_start_offset

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing[entry.current_txn_first_offset] = entry.producer_id

    def _drop_snapshots_outside(
        self, log_start_offset: int, log_end_offset: int, names: list[str] | None = None
    ) -> list[int]:
        """Delete snapshots outside the log's range; the ones kept, ascending. One
        directory listing: opening a log should cost the same however long it is."""
        kept = []
        for offset in self.snapshot_offsets(names):
            if offset > log_end_offset or offset < log_start_offset:
                self._delete_snapshot(offset)
            else:
                kept.append(offset)
        return kept

    def load(
        self, log_start_offset: int, log_end_offset: int, names: list[str] | None = None
    ) -> None:
        """Load the newest snapshot in ``[log_start_offset, log_end_offset]``.

        Snapshots above the log end (written before a crash lost the tail) and below the
        log start (their segments are gone) are deleted. Afterwards the Log replays its
        batches from ``map_end_offset`` to ``log_end_offset``. ``names``: the directory's
        listing if the caller has one (opening a log lists its directory once).
        """
        with self._lock:
            offsets = self._drop_snapshots_outside(log_start_offset, log_end_offset, names)
            self._clear()
            self._load_latest_snapshot(log_start_offset, offsets)

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> None:
        """The log now spans ``[log_start_offset, log_end_offset)``: drop what is outside.

        If the state is not exactly at ``log_end_offset`` it is rebuilt from the newest
        snapshot in range; the Log then replays from ``map_end_offset``.
        """
        with self._lock:
            offsets = self._drop_snapshots_outside(log_start_offset, log_end_offset)
            if log_end_offset != self.map_end_offset:
                self._clear()
                self._load_latest_snapshot(log_start_offset, offsets)
            elif self.map_end_offset < log_start_offset:
                self.map_end_offset = log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything and delete all snapshots (the log was emptied at ``offset``)."""
        with self._lock:
            self._clear()
            for snapshot_offset in self.snapshot_offsets():
                self._delete_snapshot(snapshot_offset)
            self.map_end_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords moved the log start: drop snapshots below it.

        Producer entries are kept (Kafka does the same): a producer whose batches were
        deleted may still continue its sequence.
        """
        with self._lock:
            self.delete_snapshots_before(log_start_offset)
            if self.map_end_offset < log_start_offset:
                self.map_end_offset = log_start_offset

    def remove_expired_producers(self, now_ms: int) -> None:
        """Forget producers idle for producer.id.expiration.ms with no open transaction."""
        with self._lock:
            expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now_ms)]
            for pid in expired:
                del self._producers[pid]

    # -- queries ---------------------------------------------------------------------

    def producer_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """A copy of the producer's entry, or None if unknown."""
        with self._lock:
            entry = self._producers.get(producer_id)
            return entry.copy() if entry is not None else None

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """Copies of every producer's entry (DescribeProducers)."""
        with self._lock:
            return {pid: entry.copy() for pid, entry in self._producers.items()}

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or None when none is open."""
        with self._lock:
            return min(self._ongoing) if self._ongoing else None

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``(first_offset, producer_id)`` of every open transaction, oldest first."""
        with self._lock:
            return sorted(self._ongoing.items())

    # -- append path -----------------------------------------------------------------

    def check_duplicate_or_validate(
        self, header: BatchHeader, origin: str = ORIGIN_CLIENT, batch: Buffer | None = None
    ) -> BatchMetadata | None:
        """Validate a batch about to be appended; return the original if it is a duplicate.

        ``batch`` (the batch's bytes from its first byte) is needed only for control
        batches, to check the marker and its coordinator epoch. Raises the errors listed
        in the module docstring; returns None when the batch may be appended.
        """
        if origin not in ORIGINS:
            raise ValueError(f"unknown append origin {origin!r}")
        if header.producer_id < 0:
            return None
        with self._lock:
            entry = self._producers.get(header.producer_id)
            if header.is_control:
                marker = read_end_txn_marker(batch, header) if batch is not None else None
                if origin == ORIGIN_REPLICATION or entry is None:
                    return None
                self._check_epoch(entry, header)
                if marker is not None and marker.coordinator_epoch < entry.coordinator_epoch:
                    raise TransactionCoordinatorFencedError(
                        f"marker for producer {header.producer_id} has coordinator epoch "
                        f"{marker.coordinator_epoch}, older than {entry.coordinator_epoch}"
                    )
                return None
            if origin == ORIGIN_REPLICATION:
                return None
            if origin == ORIGIN_CLIENT and entry is not None:
                duplicate = entry.find_duplicate(
                    header.producer_epoch, header.base_sequence, header.last_sequence
                )
                if duplicate is not None:
                    return duplicate
            if entry is None:
                return None  # unknown producer: any sequence is accepted (KIP-360)
            self._check_epoch(entry, header)
            if origin == ORIGIN_CLIENT:
                self._check_sequence(entry, header)
            if entry.current_txn_first_offset is not None and not header.is_transactional:
                raise InvalidTxnStateError(
                    f"producer {header.producer_id} wrote a non-transactional batch while its "
                    f"transaction from offset {entry.current_txn_first_offset} is open"
                )
            return None

    @staticmethod
    def _check_epoch(entry: ProducerStateEntry, header: BatchHeader) -> None:
        if header.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"the current epoch {entry.producer_epoch}"
            )

    @staticmethod
    def _check_sequence(entry: ProducerStateEntry, header: BatchHeader) -> None:
        first_seq = header.base_sequence
        if header.producer_epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} started epoch {header.producer_epoch} at "
                    f"sequence {first_seq}; a new epoch must start at 0"
                )
        elif not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} sent sequence {first_seq}; expected "
                f"{0 if entry.last_seq == INT32_MAX else entry.last_seq + 1}"
            )

    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        append_time_ms: int = -1,
        batch: Buffer | None = None,
    ) -> CompletedTxn | None:
        """Record a batch written at ``first_offset`` (offsets already assigned).

        ``append_time_ms`` is the LogAppendTime stamp when the topic uses it (it becomes
        the batch's stored timestamp), else -1 and the header's max timestamp is used.
        ``batch`` (the batch's bytes) is required for control batches: their marker says
        COMMIT or ABORT. Returns the completed transaction when a marker closes one.
        Batches wholly below ``map_end_offset`` are already reflected and are ignored, so
        replaying from a segment start after a snapshot is safe.
        """
        if header.producer_id < 0:
            last_offset = first_offset + header.last_offset_delta
            with self._lock:
                self.map_end_offset = max(self.map_end_offset, last_offset + 1)
            return None
        with self._lock:
            last_offset = first_offset + header.last_offset_delta
            if last_offset < self.map_end_offset:
                return None
            self.map_end_offset = last_offset + 1
            entry = self._producers.get(header.producer_id)
            if entry is None:
                entry = ProducerStateEntry(header.producer_id)
                self._producers[header.producer_id] = entry
            if header.is_control:
                return self._update_with_marker(entry, header, first_offset, batch)
            timestamp = append_time_ms if append_time_ms >= 0 else header.max_timestamp
            entry._set_epoch(header.producer_epoch)
            entry.batches.append(
                BatchMetadata(
                    header.base_sequence, header.last_sequence, first_offset, last_offset, timestamp
                )
            )
            entry.last_timestamp = timestamp
            if header.is_transactional and entry.current_txn_first_offset is None:
                entry.current_txn_first_offset = first_offset
                self._ongoing[first_offset] = header.producer_id
            return None

    def _update_with_marker(
        self,
        entry: ProducerStateEntry,
        header: BatchHeader,
        offset: int,
        batch: Buffer | None,
    ) -> CompletedTxn | None:
        if batch is None:
            raise ValueError(
                "update() needs the bytes of a control batch to tell COMMIT from ABORT"
            )
        marker = read_end_txn_marker(batch, header)
        if marker is None:
            return None  # an emptied control batch: its transaction was cleaned away
        completed = None
        txn_first = entry.current_txn_first_offset
        if txn_first is not None:
            others = [first for first, pid in self._ongoing.items() if pid != entry.producer_id]
            completed = CompletedTxn(
                producer_id=entry.producer_id,
                first_offset=txn_first,
                last_offset=offset,
                is_aborted=marker.is_abort,
                last_stable_offset=min(others) if others else offset + 1,
            )
            self._ongoing.pop(txn_first, None)
        entry._set_epoch(header.producer_epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.current_txn_first_offset = None
        entry.last_timestamp = header.max_timestamp
        return completed

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager({self.partition_dir}, producers={len(self._producers)}, "
            f"open_txns={len(self._ongoing)}, map_end_offset={self.map_end_offset})"
        )
