"""Leader epoch cache: which leader epoch wrote which range of a partition's log.

Each entry ``(epoch, start_offset)`` says that the leader of ``epoch`` wrote its first
record at ``start_offset``; the epoch's records end where the next entry starts (or at
the log end for the latest epoch). Followers truncate by asking the leader for the end
offset of their latest epoch (OffsetForLeaderEpoch, KIP-101/KIP-279) instead of trusting
the high watermark, and consumers use the same lookup to detect log truncation (KIP-320).

On-disk format, file ``<partition dir>/leader-epoch-checkpoint`` (Kafka's text checkpoint)::

    0                   <- format version
    2                   <- number of entries
    0 0                 <- "<epoch> <start offset>", ascending in both
    3 1500

The file is rewritten whole: written to ``leader-epoch-checkpoint.tmp``, fsynced, renamed
over the old one and the directory fsynced, so a crash leaves either the old or the new
list, never a torn one. When that happens depends on the change:

- truncations (``truncate_from_end``/``truncate_from_start``/``clear``) write at once,
  except the log start offset moving on a running log (DeleteRecords, retention):
  ``truncate_from_start(sync=False)`` changes the entries under the log's lock and the
  flush job writes and fsyncs them off it, as Kafka does since KAFKA-16541 (KAFKA-15046
  had found the fsync under ``UnifiedLog.lock`` stalling appends). A crash before that
  leaves the older entries: a superset, whose extra entries below the log start offset
  the reopen cuts again;
- ``assign`` from the append and become-leader paths passes ``sync=False``: the entry is
  kept in memory only and the cache remembers the file is behind, so that a leader
  change costs each partition no file write on the event loop (the write alone, a
  rename over an existing file, took ~0.4 ms on ext4 here; with its two fsyncs a few
  ms). ``Log.flush`` calls :meth:`sync` before it advances the recovery point, and
  ``Log.close`` before a clean shutdown, so the file on disk always holds every entry of
  the data below the recovery point (between flushes the flush job writes it without
  fsync, :meth:`write_unsynced`, so that it follows leader changes); what follows the
  recovery point is rebuilt from the batches' leader epochs by the recovery after a
  crash, which also checks the entries below it against the batches (see
  ``log_loader.check_epochs_below``).

Kafka (3.8, KAFKA-16541) still fsyncs ``assign`` on the caller's thread and moves only
the truncations' writes to its scheduler; odradek defers the assign's fsync instead and
pays for it with that check on an unclean start.
"""

from __future__ import annotations

import threading
from pathlib import Path

from odradek.storage.checkpoint import atomic_write
from odradek.storage.errors import CorruptCheckpointError

CHECKPOINT_FILE_NAME = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0

UNDEFINED_EPOCH = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET


def parse_epoch_checkpoint(text: str, source: str) -> list[tuple[int, int]]:
    """Parse the checkpoint text; raise CorruptCheckpointError naming ``source`` if malformed."""
    lines = text.splitlines()
    if not lines:
        return []  # an empty file carries no entries (never produced by atomic_write)
    try:
        version = int(lines[0])
    except ValueError:
        raise CorruptCheckpointError(
            f"{source}: first line {lines[0]!r} is not a version number"
        ) from None
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"{source}: unsupported checkpoint version {version}")
    try:
        count = int(lines[1]) if len(lines) > 1 else -1
    except ValueError:
        count = -1
    if count < 0:
        raise CorruptCheckpointError(f"{source}: second line must be the entry count")
    body = lines[2:]
    if len(body) != count:
        raise CorruptCheckpointError(
            f"{source}: header says {count} entries but the file has {len(body)}"
        )
    entries: list[tuple[int, int]] = []
    for number, line in enumerate(body, start=3):
        fields = line.split()
        try:
            if len(fields) != 2:
                raise ValueError
            epoch, start_offset = int(fields[0]), int(fields[1])
        except ValueError:
            raise CorruptCheckpointError(
                f"{source}: line {number} {line!r} is not '<epoch> <start offset>'"
            ) from None
        if epoch < 0 or start_offset < 0:
            raise CorruptCheckpointError(f"{source}: line {number} has a negative value")
        entries.append((epoch, start_offset))
    return entries


def format_epoch_checkpoint(entries: list[tuple[int, int]]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(f"{epoch} {start_offset}" for epoch, start_offset in entries)
    return ("\n".join(lines) + "\n").encode("ascii")


class LeaderEpochFileCache:
    """Kafka's LeaderEpochFileCache: epoch -> start offset, persisted on every change.

    Thread-safe: the Log appends under its own lock, but the broker's fetch path asks for
    ``end_offset_for`` from other threads.
    """

    def __init__(self, path: Path | str, *, load: bool = True) -> None:
        # A Path only when first needed: a broker opening 10,000 logs makes one cache each.
        self._path = path if isinstance(path, Path) else None
        self._path_str = str(path)
        self._lock = threading.RLock()
        # Held by whoever writes the file, taken before _lock: sync() writes and fsyncs a
        # copy of the entries outside _lock (appends on the event loop take _lock and must
        # not wait for the disk), and writers in turn must not put an older copy over a
        # newer one.
        self._write_lock = threading.Lock()
        self._entries: list[tuple[int, int]] = []
        self._changes = 0  # counts changes of _entries: a write outside _lock checks it
        self._unsynced = False  # entries changed (sync=False) since the file was last synced
        self._unwritten = False  # ... and since it was last written at all
        self._truncation_unsynced = False  # ... and one of them a truncate_from_start
        if load and self.path.exists():  # load=False: a new partition, nothing to read
            text = self.path.read_text(encoding="ascii", errors="replace")
            # Re-apply the entries through the monotonicity rule as Kafka does on load, so a
            # hand-edited or foreign file cannot leave the cache out of order.
            for epoch, start_offset in parse_epoch_checkpoint(text, str(self.path)):
                self._assign_in_memory(epoch, start_offset)

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = Path(self._path_str)
        return self._path

    # -- queries ---------------------------------------------------------------------

    @property
    def entries(self) -> list[tuple[int, int]]:
        """A copy of the ``(epoch, start_offset)`` entries, ascending."""
        with self._lock:
            return list(self._entries)

    def latest_epoch(self) -> int | None:
        with self._lock:
            return self._entries[-1][0] if self._entries else None

    def latest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    def earliest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    def start_offset_of(self, epoch: int) -> int | None:
        """The start offset recorded for exactly ``epoch``, or None."""
        with self._lock:
            for entry_epoch, start_offset in self._entries:
                if entry_epoch == epoch:
                    return start_offset
            return None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds ``offset`` (the last entry starting at or before it)."""
        with self._lock:
            found: int | None = None
            for epoch, start_offset in self._entries:
                if start_offset > offset:
                    break
                found = epoch
            return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end_offset)`` for ``requested_epoch``.

        - the latest epoch: ``(latest, log_end_offset)``;
        - an epoch with a later entry: the largest known epoch <= requested, and the start
          offset of the first epoch above the requested one;
        - an epoch older than every entry: ``(requested, first entry's start offset)``,
          because the older data is gone and the follower must start at our beginning;
        - UNDEFINED_EPOCH requested, an epoch above all known, or no entries at all:
          ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._entries[-1][0] == requested_epoch:
                return requested_epoch, log_end_offset
            higher = next((e for e in self._entries if e[0] > requested_epoch), None)
            if higher is None:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = None
            for entry in self._entries:
                if entry[0] > requested_epoch:
                    break
                floor = entry
            if floor is None:
                return requested_epoch, higher[1]
            return floor[0], higher[1]

    # -- updates ---------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, sync: bool = True) -> None:
        """Record that ``epoch`` starts at ``start_offset``; persist if anything changed.

        A no-op when ``epoch`` is already the latest with a start at or before
        ``start_offset`` (every batch of an epoch calls this). Entries that would break
        monotonicity (epoch >= the new one, or start offset >= the new one) are dropped
        first, as Kafka does when a new leader's epoch overrides a diverged tail.
        ``sync=False`` changes the entries in memory only and leaves the file to the
        next :meth:`sync` (the log's flush or close) or truncation.
        """
        # The no-op of _assign_in_memory, decided without the lock (a leader's every append
        # calls this): only the log's own truncations and appends change the entries, and
        # those hold the log's lock, as the caller does; the last entry is read at once.
        last = self._entries[-1] if self._entries else None
        if last is not None and last[0] == epoch >= 0 and 0 <= last[1] <= start_offset:
            return
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if not sync:
            with self._lock:
                if self._assign_in_memory(epoch, start_offset):
                    self._unsynced = self._unwritten = True
            return
        with self._write_lock, self._lock:
            if self._assign_in_memory(epoch, start_offset):
                self._persist()

    def _assign_in_memory(self, epoch: int, start_offset: int) -> bool:
        if self._entries:
            latest_epoch, latest_start = self._entries[-1]
            if latest_epoch == epoch and start_offset >= latest_start:
                return False
        while self._entries and (
            self._entries[-1][0] >= epoch or self._entries[-1][1] >= start_offset
        ):
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self._changes += 1
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after ``end_offset`` (log truncated to it)."""
        with self._write_lock, self._lock:
            if end_offset < 0 or not self._entries or self._entries[-1][1] < end_offset:
                return
            while self._entries and self._entries[-1][1] >= end_offset:
                self._entries.pop()
            self._changes += 1
            self._persist_if_dir_exists()

    def truncate_from_start(self, start_offset: int, *, sync: bool = True) -> None:
        """The log now starts at ``start_offset``: drop the epochs wholly before it.

        The epoch that covers ``start_offset`` is kept with its start moved up to it, so
        ``truncate_from_start(6)`` keeps an entry at offset 6. ``sync=False`` (the log
        start offset moving under the log's lock: DeleteRecords, retention) changes the
        entries in memory only and leaves the write and its fsync to :meth:`sync`, which
        the flush job calls off that lock (:attr:`truncation_unsynced`). Until then the
        file holds the older entries, a superset whose extra ones lie below the log start
        offset: a reopen cuts them again, as Kafka's recovery does.
        """
        if not sync:
            with self._lock:
                if self._truncate_start_in_memory(start_offset):
                    self._unsynced = self._unwritten = self._truncation_unsynced = True
            return
        with self._write_lock, self._lock:
            if self._truncate_start_in_memory(start_offset):
                self._persist_if_dir_exists()

    def _truncate_start_in_memory(self, start_offset: int) -> bool:
        if not self._entries or self._entries[0][1] >= start_offset:
            return False
        removed = self._entries.pop(0)
        while self._entries and self._entries[0][1] <= start_offset:
            removed = self._entries.pop(0)
        self._entries.insert(0, (removed[0], start_offset))
        self._changes += 1
        return True

    def clear(self) -> None:
        """Delete all entries (and persist the empty list)."""
        with self._write_lock, self._lock:
            self._entries.clear()
            self._changes += 1
            self._persist_if_dir_exists()

    def replace_entries(self, entries: list[tuple[int, int]]) -> None:
        """Replace every entry (a rebuild from the log's batches) and fsync the file."""
        with self._write_lock, self._lock:
            self._entries.clear()
            self._changes += 1
            for epoch, start_offset in entries:
                self._assign_in_memory(epoch, start_offset)
            self._persist()

    @property
    def unsynced(self) -> bool:
        """True while a change made with ``sync=False`` awaits :meth:`sync`."""
        return self._unsynced

    @property
    def truncation_unsynced(self) -> bool:
        """True while a ``truncate_from_start(sync=False)`` awaits :meth:`sync`."""
        return self._truncation_unsynced

    def sync(self) -> bool:
        """Write and fsync the entries if a change was made with ``sync=False``; True if
        it did. The fsyncs run outside the lock that ``assign`` and the queries take."""
        return self._write_copy(sync=True)

    def write_unsynced(self) -> bool:
        """Write entries changed since the last write, without fsync; True if it did.

        The flush job does it between flushes, so the file of a running broker (read by
        ``dump-log``) follows leader changes within a second; an empty log's close does
        it too (its entries describe no data: kept over a restart, not worth an fsync).
        The entries stay unsynced until :meth:`sync`."""
        return self._write_copy(sync=False)

    def _write_copy(self, *, sync: bool) -> bool:
        with self._write_lock:
            with self._lock:
                if not (self._unsynced if sync else self._unwritten):
                    return False
                data = format_epoch_checkpoint(self._entries)
                changes = self._changes
            atomic_write(self.path, data, sync=sync)
            with self._lock:
                if self._changes == changes:  # else changed meanwhile: still to write
                    self._unwritten = False
                    if sync:
                        self._unsynced = self._truncation_unsynced = False
            return True

    def _persist(self) -> None:
        atomic_write(self.path, format_epoch_checkpoint(self._entries), sync=True)
        self._unsynced = self._unwritten = self._truncation_unsynced = False

    def _persist_if_dir_exists(self) -> None:
        # Truncations can race with the partition being deleted; there is nothing to keep then.
        if self.path.parent.is_dir():
            self._persist()

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.path}, {self._entries})"
