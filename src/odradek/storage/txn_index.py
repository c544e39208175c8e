"""Aborted-transaction index of one segment (``<20-digit base offset>.txnindex``).

A ``read_committed`` consumer must skip the records of aborted transactions. The fetch
response tells it which: the list of aborted transactions (producer id, first offset)
that overlap the fetched range. This index answers that without reading the log.

An entry is appended to the index of the segment that receives the ABORT marker. The
file is a plain sequence of fixed 34-byte entries (Kafka's format, big-endian)::

    0   version             int16   always 0
    2   producer_id         int64
    10  first_offset        int64   offset of the transaction's first record
    18  last_offset         int64   offset of the ABORT marker
    26  last_stable_offset  int64   the partition's LSO once this transaction completed

Entries are appended in increasing ``last_offset`` order. The file is created on the
first append (most segments never see an abort), read whole on first use and cached;
a size that is not a multiple of 34, an unknown version or an entry that ends before the
segment starts is a :class:`~odradek.storage.errors.CorruptIndexError`.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from odradek.storage.errors import CorruptIndexError

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
CURRENT_VERSION = 0


@dataclass(frozen=True)
class AbortedTxn:
    """One aborted transaction of one producer."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return ENTRY.pack(
            CURRENT_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


class TransactionIndex:
    """The ``.txnindex`` of the segment starting at ``start_offset``."""

    def __init__(self, path: Path, start_offset: int) -> None:
        self.path = Path(path)
        self.start_offset = start_offset
        self._lock = threading.RLock()
        self._fd: int | None = None
        self._entries: list[AbortedTxn] | None = None  # loaded on first use
        self._closed = False

    # -- reading ---------------------------------------------------------------------

    def _load(self) -> list[AbortedTxn]:
        if self._entries is not None:
            return self._entries
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        if len(data) % ENTRY_SIZE:
            raise CorruptIndexError(
                f"{self.path}: size {len(data)} is not a multiple of the {ENTRY_SIZE}-byte entry"
            )
        entries: list[AbortedTxn] = []
        for position in range(0, len(data), ENTRY_SIZE):
            version, producer_id, first, last, lso = ENTRY.unpack_from(data, position)
            if version != CURRENT_VERSION:
                raise CorruptIndexError(
                    f"{self.path}: entry at byte {position} has unknown version {version}"
                )
            entries.append(AbortedTxn(producer_id, first, last, lso))
        self._entries = entries
        return entries

    def all_entries(self) -> list[AbortedTxn]:
        """Every entry, in file order."""
        with self._lock:
            return list(self._load())

    @property
    def is_empty(self) -> bool:
        with self._lock:
            return not self._load()

    @property
    def last_offset(self) -> int | None:
        """``last_offset`` of the newest entry, or None."""
        with self._lock:
            entries = self._load()
            return entries[-1].last_offset if entries else None

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)``.

        An entry overlaps when its marker is at or after ``fetch_offset`` and its first
        record is before ``upper_bound``.
        """
        with self._lock:
            return [
                txn
                for txn in self._load()
                if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound
            ]

    def collect_until(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Like :meth:`collect`, plus whether the search is complete.

        Complete means an entry's ``last_stable_offset`` reached ``upper_bound``: no later
        segment's index can then hold a transaction that starts before the bound, so a
        caller walking segments forward can stop (Kafka's TxnIndexSearchResult).
        """
        with self._lock:
            found: list[AbortedTxn] = []
            for txn in self._load():
                if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                    found.append(txn)
                if txn.last_stable_offset >= upper_bound:
                    return found, True
            return found, False

    # -- writing ---------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; its ``last_offset`` must be above the previous entry's."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path}: append to a closed transaction index")
            entries = self._load()
            if entries and txn.last_offset <= entries[-1].last_offset:
                raise ValueError(
                    f"{self.path}: aborted transaction ending at {txn.last_offset} is not after "
                    f"the last indexed one ({entries[-1].last_offset})"
                )
            if txn.last_offset < self.start_offset:
                raise ValueError(
                    f"{self.path}: aborted transaction ending at {txn.last_offset} is before "
                    f"the segment start {self.start_offset}"
                )
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(self._fd, txn.pack())
            entries.append(txn)

    def flush(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (log truncated to it)."""
        with self._lock:
            entries = self._load()
            keep = 0
            while keep < len(entries) and entries[keep].last_offset < offset:
                keep += 1
            if keep == len(entries):
                return
            del entries[keep:]
            if self.path.exists():
                os.truncate(self.path, keep * ENTRY_SIZE)

    def reset(self) -> None:
        """Remove every entry (the segment was emptied)."""
        self.truncate_to(-(2**63))

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if the file is malformed or an entry ends before the start."""
        with self._lock:
            self._entries = None  # re-read the file: this is the recovery-time check
            for txn in self._load():
                if txn.last_offset < self.start_offset:
                    raise CorruptIndexError(
                        f"{self.path}: entry {txn} ends before the segment start "
                        f"{self.start_offset}"
                    )

    # -- lifecycle -------------------------------------------------------------------

    def rename_to(self, path: Path) -> None:
        """Rename the file (segment deletion, compaction swap); the index stays usable."""
        with self._lock:
            path = Path(path)
            if self.path.exists():
                os.replace(self.path, path)
            self.path = path

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._closed = True

    def delete(self) -> None:
        """Close and remove the file (missing is fine)."""
        with self._lock:
            self.close()
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            self._entries = []

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path}, start={self.start_offset})"
