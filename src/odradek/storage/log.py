"""The log of one partition: an ordered list of segments with an end, a start and a
recovery point, plus the partition's leader-epoch cache and producer state.

This module holds the Log itself: its state, opening and creating it, appends and
rolls, the topic id, configuration and closing. The rest is one module per concept,
each a set of plain functions of the Log:

    log_loader.py       opening a partition directory (its layout), recovery
    log_append.py       the per-batch checks and rewrites of an append; AppendInfo
    log_read.py         reads for Fetch, ListOffsets, aborted transactions; FetchInfo
    log_flush.py        flush and the flush.messages / flush.ms policy
    log_retention.py    retention, DeleteRecords' log start offset, deleting segments
    log_truncation.py   a follower's truncation and restart

The public ones are bound as Log's methods (``read = log_read.read``), not wrapped, so
a call costs what it did when they were written here; they take the Log's lock as its
own methods do and use its private state as such.

Offsets: ``log_start_offset`` <= every readable offset < ``log_end_offset`` (LEO, the
offset the next appended record gets). ``recovery_point``: everything below it has been
fsynced, so after a crash only what follows it is scanned and validated.

Hot paths do per-batch work only. An append parses each 61-byte batch header, checks
the CRC32C over the bytes in place, rewrites the base offset and leader epoch (not
CRC-covered) and writes the buffer with one ``write``; a read finds the start position
with the sparse offset index and a short header scan and returns file regions for
``sendfile``. Records are decoded only to recompress for a topic whose
``compression.type`` differs from the producer's codec, and to answer ListOffsets by
timestamp or MAX_TIMESTAMP (one batch each).

Thread safety: one re-entrant lock per Log. Appends and reads (event loop) and
retention, truncation and flush bookkeeping (other threads) hold it; the fsyncs of a
flush run outside it so an append never waits for the disk.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from odradek.records.header import assigned, set_base_offset_and_epoch
from odradek.records.validation import NO_TIMESTAMP
from odradek.storage import log_flush, log_loader, log_read, log_retention, log_truncation
from odradek.storage.checkpoint import fsync_dir
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptCheckpointError,
    InconsistentTopicIdError,
    RecordBatchTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from odradek.storage.leader_epoch import CHECKPOINT_FILE_NAME, LeaderEpochFileCache
from odradek.storage.log_append import (
    AppendInfo,
    ParsedBatch,
    check_producers,
    is_writable,
    maybe_recompress,
    parse_batches,
    stamp_timestamp,
)
from odradek.storage.log_loader import parse_partition_dir_name
from odradek.storage.log_retention import delete_segments, remove_due_deletes
from odradek.storage.partition_metadata import PartitionMetadataFile
from odradek.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ORIGIN_CLIENT,
    ORIGIN_REPLICATION,
    ORIGINS,
    ProducerStateManager,
)
from odradek.storage.segment import SWAP_SUFFIX, BatchEntry, LogSegment
from odradek.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)


class Log:
    """The append-only log of one partition. Create with :meth:`Log.open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock: Callable[[], float],
        producer_id_expiration_ms: int,
        new: bool = False,
        listing: list[str] | None = None,
    ) -> None:
        # Not Path(directory) when it is one: each Path() parses the whole path again,
        # which adds up when a broker opens 10,000 logs.
        self.directory = directory if isinstance(directory, Path) else Path(directory)
        self.topic, self.partition = parse_partition_dir_name(self.directory.name)
        self.config = config
        self._clock = clock
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []  # base offsets of _segments, for bisect
        self.log_start_offset = 0
        self._log_end_offset = 0
        self.recovery_point = 0
        # Set by the replica manager when it tracks one: retention and DeleteRecords never
        # go beyond it (None: bounded by the log end offset only).
        self.high_watermark: int | None = None
        epoch_path = f"{self.directory}{os.sep}{CHECKPOINT_FILE_NAME}"  # no Path parse
        try:
            load = not new and (listing is None or CHECKPOINT_FILE_NAME in listing)
            self.leader_epoch_cache = LeaderEpochFileCache(epoch_path, load=load)
            self._epoch_cache_lost = False
        except CorruptCheckpointError as exc:
            # Rebuilt from the batches' leader epochs by a full recovery (see log_loader.load).
            logger.warning("%s; rebuilding it from the log", exc)
            os.unlink(epoch_path)
            self.leader_epoch_cache = LeaderEpochFileCache(epoch_path)
            self._epoch_cache_lost = True
        self.producer_state = ProducerStateManager(
            self.directory, producer_id_expiration_ms=producer_id_expiration_ms, clock=clock
        )
        self._partition_metadata = PartitionMetadataFile(self.directory)
        self._topic_id: uuid.UUID | None = None
        self._pending_deletes: list[tuple[int, LogSegment]] = []  # (due ms, segment)
        self._rolled_unflushed: list[LogSegment] = []
        self._dir_dirty = False
        # partition.metadata written without fsync (create_new): synced by the first flush.
        self._metadata_unsynced = False
        # A new log's topic id not in partition.metadata yet (create_new): written by
        # write_pending_metadata (the flush job), the first flush or close, as Kafka
        # leaves the file to its scheduler thread.
        self._metadata_pending = False
        # Made by create_new and still empty: flushing has nothing to keep, so the
        # directory's fsyncs wait for the first data (a clean shutdown of 10,000 idle
        # new partitions would otherwise cost 20,000 fsyncs).
        self._created_unsynced = False
        self._last_flush_ms = 0
        self._closed = False
        self._listing = listing  # the directory's files when opened, until loaded
        self._uses = 0  # see release_idle_handles
        self._uses_seen = -1
        # Segments whose data the last open read and validated (0: a clean open); the
        # log manager's start-up progress lines use it.
        self.segments_recovered = 0

    # -- opening (the directory and recovery: log_loader.py) ---------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        segment_sizes: Sequence[tuple[int, int]] | None = None,
        clock: Callable[[], float] = time.time,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        topic_id: uuid.UUID | None = None,
    ) -> Log:
        """Open (or create) the log in ``directory``.

        ``topic_id``: the id in ``partition.metadata`` as recorded by the clean shutdown
        (LogManager); given, the file is not read again.

        After a clean shutdown nothing is read from the segments: the recovery point
        checkpointed at shutdown is the log end offset, provided every segment file
        still has the ``(base offset, size)`` recorded at shutdown (``segment_sizes``,
        see :meth:`segment_sizes`). Otherwise -- no clean shutdown, or a file that
        changed since (truncated, extended, missing, added), or no sizes recorded --
        every segment from the one holding ``recovery_point`` (or the first changed
        one) is validated batch by batch and cut at the first bad byte (later segments
        are then deleted), and indexes are rebuilt.
        """
        directory = directory if isinstance(directory, Path) else Path(directory)
        try:
            # Listed once: cleaning, the segment list, the epoch file and the producer
            # snapshots all come from this listing.
            listing = os.listdir(directory)
        except FileNotFoundError:
            directory.mkdir(parents=True, exist_ok=True)
            listing = []
        log = cls(
            directory, config, clock=clock, producer_id_expiration_ms=producer_id_expiration_ms,
            listing=listing,
        )  # fmt: skip
        with log._lock:
            log_loader.load(log, recovery_point, log_start_offset, clean_shutdown, segment_sizes)
            if topic_id is not None:
                log._topic_id = topic_id
        return log

    @classmethod
    def create_new(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        topic_id: uuid.UUID | None = None,
        clock: Callable[[], float] = time.time,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> Log:
        """A new, empty log in ``directory``, which must not exist (FileExistsError).

        The cheap path for creating many partitions (LogManager.create_logs): nothing
        is read and only the directory is made: the first segment's ``.log`` is created by
        its first append or read (LogSegment), nothing is fsynced.
        The topic id is kept in memory: ``partition.metadata`` is written later by
        :meth:`write_pending_metadata` (LogManager.run_flush, on the flush thread), as
        Kafka writes it from its scheduler, or by the first flush or the close, whichever
        comes first. The caller fsyncs the parent directory (the new directory's entry);
        the log's first flush fsyncs the directory itself and ``partition.metadata``, as
        Kafka leaves a new log's files to its first flush. After a crash before that, a
        missing or empty file is recreated when the broker hosts the partition again.
        """
        directory = directory if isinstance(directory, Path) else Path(directory)
        os.mkdir(directory)
        log = cls(
            directory, config, clock=clock, producer_id_expiration_ms=producer_id_expiration_ms,
            new=True,
        )  # fmt: skip
        now_ms = log._now_ms()
        log._last_flush_ms = now_ms
        log._add_segment(
            LogSegment.create(directory, 0, config, now_ms=now_ms, keep_open=False)
        )
        if topic_id is not None:
            log._topic_id = topic_id
            log._metadata_pending = True
        log._created_unsynced = True
        return log

    @property
    def metadata_pending(self) -> bool:
        """True while the topic id of a new log is not in ``partition.metadata`` yet."""
        return self._metadata_pending

    def drop_pending_metadata(self) -> None:
        """The log is about to be deleted: its close need not write partition.metadata."""
        with self._lock:
            self._metadata_pending = False

    def write_pending_metadata(self) -> None:
        """Write the ``partition.metadata`` that create_new left for later (no fsync: the
        first flush does it). A no-op once written, or for a closed or deleted log."""
        with self._lock:
            if not self._metadata_pending or self._closed or self._topic_id is None:
                return
            self._write_pending_metadata_locked()

    def _write_pending_metadata_locked(self) -> None:
        topic_id = self._topic_id
        assert topic_id is not None
        try:
            self._partition_metadata.write_new(topic_id)
        except FileExistsError:
            # Left by an earlier life of the directory (an interrupted create): replace it.
            self._partition_metadata.write(topic_id)
        except FileNotFoundError:
            return  # the directory was deleted meanwhile
        self._metadata_pending = False
        self._metadata_unsynced = True

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- properties --------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def segment_sizes(self) -> list[tuple[int, int]]:
        """``(base offset, bytes)`` of every segment, oldest first: recorded at a clean
        shutdown so that the next :meth:`open` can tell whether a file changed since."""
        with self._lock:
            return [(segment.base_offset, segment.size) for segment in self._segments]

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(segment.size for segment in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def lock(self) -> threading.RLock:
        """The lock every append, read and change of this log takes. A caller that must
        check something and append with nothing changing the log in between (the broker's
        append thread checking leadership) holds it around both; it is reentrant."""
        return self._lock

    def _add_segment(self, segment: LogSegment) -> None:
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._dir_dirty = True

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.directory.name} is closed")
        self._uses += 1  # every append, read and change passes here

    def release_idle_handles(self) -> int:
        """Close the descriptors of a log unused since the previous call (appends, reads
        and changes count as use); the next use opens them again. A log whose data is
        not fsynced yet is flushed first, since a descriptor with unsynced writes must
        stay until its fsync. Returns the descriptors closed. Lets a broker host more
        partitions than its open-file limit would allow three descriptors each."""
        with self._lock:
            if self._closed:
                return 0
            if self._uses != self._uses_seen:
                self._uses_seen = self._uses
                return 0
            if not any(segment.holds_handles for segment in self._segments):
                return 0
            dirty = self.recovery_point < self._log_end_offset or bool(self._rolled_unflushed)
        if dirty:
            self.flush()
        with self._lock:
            if self._closed or self._uses != self._uses_seen:
                return 0
            return sum(segment.release_handles() for segment in self._segments)

    # -- appends -----------------------------------------------------------------------

    def append_as_leader(
        self,
        batches: bytearray | bytes | memoryview,
        *,
        leader_epoch: int = 0,
        validate: bool = True,
        origin: str = ORIGIN_CLIENT,
    ) -> AppendInfo:
        """Validate produced batches, assign offsets in place and append them.

        Raises InvalidRecordError (CorruptBatchError for a bad CRC or framing,
        InvalidTimestampError for a timestamp out of bounds), RecordTooLargeError,
        RecordBatchTooLargeError, and the producer-state errors (out of order sequence,
        fenced epoch, ...). A duplicate of one of the producer's last 5 batches writes
        nothing and returns the original's offsets with ``duplicate=True``.
        """
        if origin not in ORIGINS or origin == ORIGIN_REPLICATION:
            raise ValueError(f"append_as_leader: unsupported origin {origin!r}")
        buf = batches if is_writable(batches) else bytearray(batches)
        config = self.config
        with self._lock:
            self._check_open()
            now_ms = self._now_ms()
            parsed = parse_batches(buf, config, leader=True, validate=validate, origin=origin,
                                   now_ms=now_ms)  # fmt: skip
            if not parsed:
                return AppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0)
            # Idempotence and fencing concern batches with a producer id only: a lone
            # batch without one (a plain producer's commonest append) skips the call.
            duplicate = None
            if len(parsed) > 1 or parsed[0].header.producer_id >= 0:
                duplicate = check_producers(self.producer_state, buf, parsed, origin)
            if duplicate is not None:
                return AppendInfo(
                    first_offset=duplicate.first_offset,
                    last_offset=duplicate.last_offset,
                    max_timestamp_ms=duplicate.timestamp,
                    offset_of_max_timestamp=duplicate.last_offset,
                    log_append_time_ms=duplicate.timestamp if config.log_append_time else -1,
                    log_start_offset=self.log_start_offset,
                    records_count=duplicate.offset_delta + 1,
                    duplicate=True,
                )
            if config.compression_type != "producer":
                buf, parsed = maybe_recompress(buf, parsed, config)
            if len(buf) > config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"append of {len(buf)} bytes exceeds segment.bytes {config.segment_bytes} "
                    f"of {self.topic}-{self.partition}"
                )
            next_offset = self._log_end_offset
            log_append_time = config.log_append_time
            entries: list[BatchEntry] = []
            max_timestamp = NO_TIMESTAMP
            offset_of_max = -1
            records = 0
            for batch in parsed:
                pos, header = batch.position, batch.header
                set_base_offset_and_epoch(buf, pos, header, next_offset, leader_epoch)
                batch_max = header.max_timestamp
                if log_append_time:
                    stamp_timestamp(buf, pos, header, log_append_time=True, max_timestamp=now_ms)
                    batch_max = now_ms
                elif header.is_log_append_time:
                    # A client cannot choose LogAppendTime on a CreateTime topic.
                    stamp_timestamp(buf, pos, header, log_append_time=False,
                                    max_timestamp=batch_max)  # fmt: skip
                last = next_offset + header.last_offset_delta
                header = assigned(header, next_offset, leader_epoch, batch_max)
                batch.header = header
                entries.append((pos, header.size, next_offset, last, batch_max))
                if batch_max > max_timestamp:
                    max_timestamp, offset_of_max = batch_max, last
                records += header.records_count
                next_offset = last + 1
            first_offset = entries[0][2]
            last_offset = next_offset - 1
            self._write(buf, entries, max_timestamp, first_offset, last_offset, now_ms)
            if leader_epoch >= 0:
                # In memory only (the event loop appends): flush() writes and syncs the
                # checkpoint before the recovery point passes this batch.
                self.leader_epoch_cache.assign(leader_epoch, first_offset, sync=False)
            self._update_producer_state(buf, parsed, now_ms if log_append_time else -1)
            return AppendInfo(
                first_offset=first_offset,
                last_offset=last_offset,
                max_timestamp_ms=max_timestamp,
                offset_of_max_timestamp=offset_of_max,
                log_append_time_ms=now_ms if log_append_time else -1,
                log_start_offset=self.log_start_offset,
                records_count=records,
            )

    def append_as_follower(self, batches: bytearray | bytes) -> AppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs.

        Checks framing and CRC, and that offsets only grow from the log end offset
        (UnexpectedAppendOffsetError otherwise). A trailing partial batch (a fetch
        response may end with one) is ignored.
        """
        buf = batches if isinstance(batches, bytearray) else bytearray(batches)
        with self._lock:
            self._check_open()
            now_ms = self._now_ms()
            parsed = parse_batches(buf, self.config, leader=False, validate=True,
                                   origin=ORIGIN_REPLICATION, now_ms=now_ms)  # fmt: skip
            if not parsed:
                return AppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0)
            end = parsed[-1].position + parsed[-1].header.size
            if end < len(buf):
                buf = buf[:end]
            if len(buf) > self.config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"follower append of {len(buf)} bytes exceeds segment.bytes "
                    f"{self.config.segment_bytes} of {self.topic}-{self.partition}"
                )
            expected = self._log_end_offset
            entries: list[BatchEntry] = []
            max_timestamp = NO_TIMESTAMP
            offset_of_max = -1
            records = 0
            for batch in parsed:
                header = batch.header
                if header.base_offset < expected:
                    raise UnexpectedAppendOffsetError(
                        f"{self.topic}-{self.partition}: follower batch at offset "
                        f"{header.base_offset} is below the next expected offset {expected}",
                        first_offset=parsed[0].header.base_offset,
                        log_end_offset=self._log_end_offset,
                    )
                entries.append((batch.position, header.size, header.base_offset,
                                header.last_offset, header.max_timestamp))  # fmt: skip
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
                records += header.records_count
                expected = header.next_offset
            first_offset = parsed[0].header.base_offset
            last_offset = parsed[-1].header.last_offset
            self._write(buf, entries, max_timestamp, first_offset, last_offset, now_ms)
            for batch in parsed:
                epoch = batch.header.partition_leader_epoch
                if epoch >= 0:
                    self.leader_epoch_cache.assign(epoch, batch.header.base_offset, sync=False)
            self._update_producer_state(buf, parsed, -1)
            return AppendInfo(
                first_offset=first_offset,
                last_offset=last_offset,
                max_timestamp_ms=max_timestamp,
                offset_of_max_timestamp=offset_of_max,
                log_append_time_ms=-1,
                log_start_offset=self.log_start_offset,
                records_count=records,
            )

    def _write(
        self,
        buf: bytearray,
        entries: list[BatchEntry],
        max_timestamp: int,
        first_offset: int,
        last_offset: int,
        now_ms: int,
    ) -> None:
        """Roll if needed, write to the active segment, advance the log end offset."""
        segment = self._segments[-1]
        if segment.should_roll(len(buf), max_timestamp, first_offset, last_offset, now_ms):
            segment = self._roll(first_offset, now_ms)
        segment.append(buf, entries)
        self._log_end_offset = last_offset + 1

    def _update_producer_state(
        self, buf: bytearray, parsed: list[ParsedBatch], append_time: int
    ) -> None:
        state = self.producer_state
        for batch in parsed:
            header = batch.header
            view = None
            if header.is_control:
                view = memoryview(buf)[batch.position : batch.position + header.size]
            completed = state.update(header, header.base_offset, append_time, view)
            if completed is not None and completed.is_aborted:
                self._segments[-1].txn_index.append(
                    AbortedTxn(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        completed.last_stable_offset,
                    )
                )

    # -- rolling -----------------------------------------------------------------------

    def roll(self) -> None:
        """Start a new segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            if self._segments[-1].size > 0:
                self._roll(self._log_end_offset, self._now_ms())

    def _roll(self, expected_next_offset: int, now_ms: int) -> LogSegment:
        new_base = max(expected_next_offset, self._log_end_offset)
        active = self._segments[-1]
        if active.base_offset == new_base:
            if active.size == 0:
                return active  # already rolled to exactly here
            raise StorageError(
                f"{self.topic}-{self.partition}: cannot roll to {new_base}, a non-empty "
                f"segment starts there"
            )
        if active.size == 0:
            # An empty active segment below the new base (a follower append jumped ahead):
            # replace it rather than keep an empty segment.
            self._segments.pop()
            self._bases.pop()
            active.delete_files()
            if not self._segments:
                self.log_start_offset = max(self.log_start_offset, new_base)
        else:
            active.on_become_inactive()
            self._rolled_unflushed.append(active)
        # Kafka snapshots producer state at every roll, bounding the replay on recovery.
        self.producer_state.take_snapshot(self._log_end_offset)
        segment = LogSegment.create(self.directory, new_base, self.config, now_ms=now_ms)
        self._add_segment(segment)
        return segment

    # -- reads (log_read.py) -----------------------------------------------------------
    # Bound, not wrapped: Log.read is called once per partition of every Fetch.

    read = log_read.read
    readable_bytes = log_read.readable_bytes
    offset_for_timestamp = log_read.offset_for_timestamp
    collect_aborted_transactions = log_read.collect_aborted_transactions

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction (bounds the LSO), or None."""
        return self.producer_state.first_unstable_offset()

    # -- durability (log_flush.py) -----------------------------------------------------

    flush = log_flush.flush
    maybe_flush = log_flush.maybe_flush

    # -- retention and log start offset (log_retention.py) -----------------------------

    delete_retained_segments = log_retention.delete_retained_segments
    maybe_increment_log_start_offset = log_retention.maybe_increment_log_start_offset

    # -- truncation (log_truncation.py) ------------------------------------------------

    truncate_to = log_truncation.truncate_to
    truncate_fully_and_start_at = log_truncation.truncate_fully_and_start_at

    # -- compaction support ------------------------------------------------------------

    def replace_segments(self, new_segment: LogSegment, old_segments: list[LogSegment]) -> None:
        """Swap a compacted segment in for ``old_segments`` (consecutive, oldest first).

        ``new_segment`` was written with suffix ``.cleaned`` and has the base offset of
        the first old segment. Crash-safe in Kafka's way: ``.cleaned`` -> ``.swap``, old
        segments -> ``.deleted``, ``.swap`` -> final names; a crash before the swap
        rename leaves the old segments, after it :meth:`open` finishes the swap.
        """
        with self._lock:
            self._check_open()
            if not old_segments or new_segment.base_offset != old_segments[0].base_offset:
                raise ValueError("the compacted segment must start where the first old one does")
            try:
                first = self._segments.index(old_segments[0])
            except ValueError:
                raise ValueError("the segments to replace are no longer in the log") from None
            if self._segments[first : first + len(old_segments)] != old_segments:
                raise ValueError("the segments to replace are not consecutive in the log")
            if first + len(old_segments) == len(self._segments):
                raise ValueError("the active segment cannot be replaced")
            new_segment.flush()
            new_segment.change_file_suffix(SWAP_SUFFIX)
            fsync_dir(self.directory)
            delete_segments(self, old_segments, self._now_ms())
            new_segment.change_file_suffix("")
            new_segment.config = self.config
            self._segments[first : first + len(old_segments)] = [new_segment]
            self._bases[first : first + len(old_segments)] = [new_segment.base_offset]
            fsync_dir(self.directory)

    # -- topic id ----------------------------------------------------------------------

    @property
    def known_topic_id(self) -> uuid.UUID | None:
        """The topic id if already known, without reading ``partition.metadata``."""
        return self._topic_id

    @property
    def topic_id(self) -> uuid.UUID | None:
        """The topic id from ``partition.metadata``, None if never assigned."""
        with self._lock:
            if self._topic_id is None:
                self._topic_id = self._partition_metadata.read()
            return self._topic_id

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Record the topic id; InconsistentTopicIdError if another one is recorded."""
        with self._lock:
            current = self.topic_id
            if current == topic_id:
                return
            if current is not None:
                raise InconsistentTopicIdError(
                    f"{self.topic}-{self.partition} belongs to topic id {current}, not {topic_id}"
                )
            self._partition_metadata.write(topic_id)
            self._topic_id = topic_id

    # -- configuration and lifecycle ---------------------------------------------------

    def update_config(self, config: LogConfig) -> None:
        """New topic config; index sizes apply to segments created from now on."""
        with self._lock:
            self.config = config
            for segment in self._segments:
                segment.config = config

    def close(self) -> None:
        """Snapshot producer state at the end, release every file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._log_end_offset >= self.producer_state.map_end_offset:
                    # An empty log needs none: with 10,000 idle partitions a snapshot each
                    # would make every clean shutdown write (and fsync) 10,000 files.
                    self.producer_state.take_snapshot(
                        self._log_end_offset, skip_if_empty_at=self.log_start_offset
                    )
            except OSError as exc:
                logger.warning("%s: producer snapshot at close failed: %s", self.directory, exc)
            if self._metadata_pending:
                try:
                    self._write_pending_metadata_locked()
                except OSError as exc:  # written again when the partition is hosted
                    logger.warning("%s: writing partition.metadata failed: %s",
                                   self.directory, exc)  # fmt: skip
            try:  # a clean shutdown skips recovery: the entries must be on disk
                if self._log_end_offset > self.log_start_offset:
                    self.leader_epoch_cache.sync()
                else:
                    self.leader_epoch_cache.write_unsynced()
            except OSError as exc:
                logger.warning("%s: leader epoch checkpoint at close failed: %s",
                               self.directory, exc)  # fmt: skip
            for segment in self._segments:
                segment.close()
            remove_due_deletes(self, 0, force=True)
            self._closed = True

    def delete(self) -> None:
        """Close the log and remove its whole directory."""
        with self._lock:
            self._metadata_pending = False  # nothing to write into a directory that goes
            self.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )

