"""The log of one partition: an ordered list of segments with an end, a start and a
recovery point, plus the partition's leader-epoch cache and producer state.

Partition directory ``<data dir>/<topic>-<partition>/``::

    00000000000000000000.log / .index / .timeindex / .txnindex    segment files
    00000000000000368769.log / ...                                 (see segment.py)
    00000000000000368769.snapshot      producer state as of that offset (producer_state.py)
    leader-epoch-checkpoint            epoch -> start offset (leader_epoch.py)
    partition.metadata                 topic id (partition_metadata.py)

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

import bisect
import contextlib
import logging
import os
import shutil
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from odradek.records.errors import CorruptRecordError
from odradek.records.header import (
    ATTRIBUTES_POS,
    CRC_POS,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    assigned,
    check_crc,
    compute_crc,
    parse_header,
    peek_batch_size,
    set_base_offset,
    set_partition_leader_epoch,
)
from odradek.records.validation import uncompressed_limit
from odradek.storage import flush_stats
from odradek.storage.batch_validation import check_batch_records, decode_bounded
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptBatchError,
    CorruptCheckpointError,
    CorruptIndexError,
    InconsistentTopicIdError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from odradek.storage.file_region import FileRegion
from odradek.storage.leader_epoch import CHECKPOINT_FILE_NAME, LeaderEpochFileCache
from odradek.storage.partition_metadata import PartitionMetadataFile
from odradek.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ORIGIN_CLIENT,
    ORIGIN_REPLICATION,
    ORIGINS,
    BatchMetadata,
    ProducerStateManager,
)
from odradek.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    BatchEntry,
    LogSegment,
)
from odradek.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-1005: no tiered storage here, so same as earliest

NO_TIMESTAMP = -1

_INDEX_SUFFIXES = frozenset((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))
_SWAP_LOG_SUFFIX = LOG_SUFFIX + SWAP_SUFFIX
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")

_CODEC_BY_NAME = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_MAX_TIMESTAMP_FIELD = struct.Struct(">q")
_ATTRIBUTES_FIELD = struct.Struct(">h")
_CRC_FIELD = struct.Struct(">I")
_MAX_TIMESTAMP_POS = 35


@dataclass
class AppendInfo:
    """What an append did (or, for a duplicate, what the original append did)."""

    first_offset: int
    last_offset: int
    max_timestamp_ms: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records_count: int
    duplicate: bool = False


@dataclass
class FetchInfo:
    """Whole batches of a read, as regions of segment files (one per segment touched)."""

    regions: list[FileRegion] = field(default_factory=list)
    size: int = 0
    first_offset: int = -1  # base offset of the first batch returned, -1 when empty

    def read_bytes(self) -> bytes:
        return b"".join(region.read() for region in self.regions)


@dataclass
class _Batch:
    position: int  # within the append buffer
    header: BatchHeader


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``orders-3`` -> ``("orders", 3)``; ValueError if the name is not ``<topic>-<n>``."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        raise ValueError(f"{name!r} is not a partition directory name (<topic>-<partition>)")
    return topic, int(number)


def _stamp_timestamp(buf: bytearray, pos: int, header: BatchHeader, *, log_append_time: bool,
                     max_timestamp: int) -> None:  # fmt: skip
    """Set the timestamp type bit and maxTimestamp in place; both are CRC-covered, so
    the CRC is recomputed over the batch (a C-speed pass, no record decoding)."""
    attributes = header.attributes
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    _ATTRIBUTES_FIELD.pack_into(buf, pos + ATTRIBUTES_POS, attributes)
    _MAX_TIMESTAMP_FIELD.pack_into(buf, pos + _MAX_TIMESTAMP_POS, max_timestamp)
    _CRC_FIELD.pack_into(buf, pos + CRC_POS, compute_crc(buf, pos, header.size))


def _is_writable(data: bytes | bytearray | memoryview) -> bool:
    """A buffer the log may rewrite in place (base offsets, leader epochs, timestamps)."""
    return isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly)


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
            # Rebuilt from the batches' leader epochs by a full recovery (see _load).
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

    # -- opening and recovery ----------------------------------------------------------

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
            log._load(recovery_point, log_start_offset, clean_shutdown, segment_sizes)
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

    def _load(
        self,
        recovery_point: int,
        log_start_offset: int,
        clean_shutdown: bool,
        segment_sizes: Sequence[tuple[int, int]] | None,
    ) -> None:
        if self._epoch_cache_lost:
            recovery_point, clean_shutdown = 0, False
        now_ms = self._now_ms()
        self._last_flush_ms = now_ms
        listing, self._listing = self._listing, None
        bases = self._clean_directory(now_ms, listing)
        self._segments = [
            LogSegment.open(self.directory, base, self.config, now_ms=now_ms) for base in bases
        ]
        self._bases = list(bases)
        if clean_shutdown and self._segments:
            changed = self._changed_since_shutdown(segment_sizes)
            if changed is not None:
                # As in Kafka, a clean shutdown lets recovery be skipped only while the
                # log is as the shutdown left it, checked here against the sizes it
                # recorded. Otherwise recover, or the log end offset would point past a
                # torn batch: appends acknowledged after it could not be read, and a
                # later crash recovery would cut them off.
                offset, reason = changed
                logger.warning(
                    "%s: not trusting the clean shutdown: %s; recovering from offset %d",
                    self.directory.name, reason, offset,
                )  # fmt: skip
                clean_shutdown = False
                recovery_point = min(recovery_point, offset)
        if not self._segments:
            # A new log never written (its .log is made on first use, see create_new), or
            # one whose files were lost: an empty segment, again without a file yet, so a
            # restart with 10,000 idle partitions creates no file.
            start = max(log_start_offset, 0)
            self._add_segment(
                LogSegment.create(self.directory, start, self.config, now_ms=now_ms,
                                  keep_open=False)
            )  # fmt: skip
            self._created_unsynced = True
            self._log_end_offset = start
            recover_from = start
        elif clean_shutdown and self._trust_recovery_point(recovery_point):
            self._log_end_offset = recovery_point
            recover_from = recovery_point
        elif clean_shutdown:
            self._log_end_offset = self._segments[-1].read_next_offset()
            recover_from = self._log_end_offset
        else:
            recover_from = self._recover(recovery_point)
        leo = self._log_end_offset
        self.log_start_offset = min(max(log_start_offset, self._segments[0].base_offset), leo)
        self.recovery_point = min(recovery_point, leo) if not clean_shutdown else leo
        self._truncate_epochs(leo, self.log_start_offset)
        # The listing is current unless recovery changed the directory.
        self.producer_state.load(self.log_start_offset, leo, listing if clean_shutdown else None)
        if self.producer_state.map_end_offset > recover_from:
            # Crash: the transaction index of recovered segments may miss aborts, so the
            # producer state must be replayed over them from a snapshot at or below.
            self.producer_state.truncate_and_reload(self.log_start_offset, recover_from)
        self._replay_producer_state(recover_from)

    def _truncate_epochs(self, end_offset: int, start_offset: int) -> None:
        """Drop epoch entries outside the log; only when some are (each change fsyncs)."""
        cache = self.leader_epoch_cache
        latest = cache.latest_entry()
        if latest is not None and latest[1] >= end_offset:
            cache.truncate_from_end(end_offset)
        earliest = cache.earliest_entry()
        if earliest is not None and earliest[1] < start_offset:
            cache.truncate_from_start(start_offset)

    def _clean_directory(self, now_ms: int, listing: list[str] | None = None) -> list[int]:
        """Finish or undo interrupted operations; return the segment base offsets.

        Runs on every open, once per file of the directory: kept to string slicing."""
        directory = str(self.directory)
        logs: set[int] = set()
        swaps: list[int] = []
        indexes: list[tuple[int, str]] = []
        for name in os.listdir(directory) if listing is None else listing:
            stem = name[:20]
            if len(name) <= 20 or name[20] != "." or not stem.isdigit():
                continue  # not a segment file (checkpoints, partition.metadata, ...)
            suffix = name[20:]
            if suffix == LOG_SUFFIX:
                logs.add(int(stem))
            elif suffix in _INDEX_SUFFIXES:
                indexes.append((int(stem), name))
            elif suffix == _SWAP_LOG_SUFFIX:
                swaps.append(int(stem))
            elif suffix.endswith(_LEFTOVER_SUFFIXES):
                # A deletion that was pending, a compaction that never reached .swap, or
                # a temporary file of an interrupted atomic write.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))
        for base in sorted(swaps):
            self._complete_swap(base, logs, now_ms)
        for base, name in indexes:
            if base not in logs:
                (self.directory / name).unlink(missing_ok=True)  # orphan of a deleted log
        return sorted(logs)

    def _complete_swap(self, base: int, logs: set[int], now_ms: int) -> None:
        """A compaction result was ready: replace the segments it covers (crash-safe redo)."""
        swap = LogSegment.open(self.directory, base, self.config, now_ms=now_ms,
                               file_suffix=SWAP_SUFFIX)  # fmt: skip
        # Its indexes are rebuilt from the data; the txn index is kept.
        swap.offset_index.delete()
        swap.time_index.delete()
        swap.recover()
        next_offset = swap.read_next_offset()
        for old in sorted(logs):
            if base <= old < max(next_offset, base + 1):
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    (self.directory / f"{old:020d}{suffix}").unlink(missing_ok=True)
                logs.discard(old)
        swap.change_file_suffix("")
        swap.close()
        logs.add(base)

    def _changed_since_shutdown(
        self, recorded: Sequence[tuple[int, int]] | None
    ) -> tuple[int, str] | None:
        """``(offset to recover from, why)`` if the segment files are not exactly the
        ``(base offset, size)`` list recorded at the clean shutdown; None if they are.

        Costs one stat per segment and reads no data."""
        segments = self._segments
        if recorded is None:
            return segments[-1].base_offset, "no segment sizes recorded at shutdown"
        for i, segment in enumerate(segments):
            if i >= len(recorded) or recorded[i][0] != segment.base_offset:
                name = segment.log_path.name
                return segment.base_offset, f"segment files differ from {name} on"
            size, expected = segment.size, recorded[i][1]
            if size != expected:
                name = segment.log_path.name
                return segment.base_offset, f"{name} is {size} bytes, {expected} at shutdown"
        if len(recorded) > len(segments):
            name = segments[-1].log_path.name
            return segments[-1].base_offset, f"segment files after {name} are missing"
        return None

    def _trust_recovery_point(self, recovery_point: int) -> bool:
        """After a clean shutdown the recovery point is the log end offset; check it
        against what costs no log read (the active segment's base, size and last index
        entry) before trusting it."""
        active = self._segments[-1]
        if recovery_point < active.base_offset:
            return False
        if recovery_point == active.base_offset:
            return active.size == 0
        try:
            active.offset_index.sanity_check()
            if active.offset_index.last_offset >= recovery_point:
                return False
        except CorruptIndexError:
            return False
        return active.size > 0

    def _recover(self, recovery_point: int) -> int:
        """Validate everything from the recovery point on; return where that started."""
        start = max(bisect.bisect_right(self._bases, recovery_point) - 1, 0)
        recover_from = max(recovery_point, self._segments[start].base_offset)
        cache = self.leader_epoch_cache

        def on_batch(header: BatchHeader, _batch: memoryview) -> None:
            epoch = header.partition_leader_epoch
            latest = cache.latest_epoch()
            if epoch >= 0 and (latest is None or epoch > latest):
                cache.assign(epoch, header.base_offset, sync=False)  # synced by a flush

        cache.truncate_from_end(recover_from)
        self._check_epochs_below(recover_from)
        index = start
        to_recover = len(self._segments) - start
        while index < len(self._segments):
            segment = self._segments[index]
            # Kafka's LogLoader line: a big log's recovery shows which segment it is on.
            logger.info(
                "Recovering unflushed segment %d. %d/%d recovered for %s.",
                segment.base_offset, index - start, to_recover, self.directory.name,
            )  # fmt: skip
            self.segments_recovered += 1
            truncated = segment.recover(
                on_batch, from_offset=recover_from if index == start else None
            )
            try:
                segment.txn_index.truncate_to(segment.read_next_offset())
            except CorruptIndexError as exc:
                logger.warning("%s: %s; rebuilding it", self.directory.name, exc)
                segment.reset_txn_index()
            if truncated:
                logger.warning(
                    "%s: truncated %d invalid bytes at the end of %s",
                    self.directory.name, truncated, segment.log_path.name,
                )  # fmt: skip
                for later in self._segments[index + 1 :]:
                    later.delete_files()
                del self._segments[index + 1 :]
                del self._bases[index + 1 :]
                break
            index += 1
        # A segment emptied by recovery stays as the active one (its base is still the
        # log end offset), like Kafka.
        last = self._segments[-1]
        self._log_end_offset = max(last.read_next_offset(), last.base_offset)
        self._dir_dirty = True
        return recover_from

    def _check_epochs_below(self, recover_from: int) -> None:
        """Rebuild the epoch cache from the batches below ``recover_from`` unless it
        covers the last of them with its epoch.

        Entries are written without fsync on the append path and synced before the
        recovery point passes them, so after a process crash the checkpoint holds every
        entry below it; after a power cut the unsynced file may instead be the synced
        one (as good), empty or torn (a torn one fails to parse: full recovery). An empty
        or otherwise stale file is caught here by one batch's epoch and rebuilt by a scan
        of the batch headers (no record is read)."""
        if recover_from <= self._segments[0].base_offset:
            return  # nothing below (a full recovery rebuilds every entry from the batches)
        try:
            last = self._last_header_below(recover_from)
            if last is None or last.partition_leader_epoch < 0:
                return
            found = self.leader_epoch_cache.epoch_for_offset(last.base_offset)
            if found == last.partition_leader_epoch:
                return
            why = f"offset {last.base_offset} has epoch {last.partition_leader_epoch}, " \
                  f"the checkpoint says {found}"  # fmt: skip
        except (StorageError, CorruptIndexError, OSError) as exc:
            why = f"cannot check it: {exc}"
        logger.warning(
            "%s: leader epoch checkpoint is stale (%s); rebuilding it from the batches "
            "below offset %d", self.directory.name, why, recover_from,
        )  # fmt: skip
        self.leader_epoch_cache.replace_entries(self._epochs_of_batches_below(recover_from))

    def _last_header_below(self, offset: int) -> BatchHeader | None:
        """The header of the last batch based below ``offset`` (data trusted there)."""
        index = bisect.bisect_right(self._bases, offset - 1) - 1
        while index >= 0:
            segment = self._segments[index]
            # The index below the recovery point is trusted, as segment.recover does.
            segment.offset_index.sanity_check()
            _, position = segment.offset_index.lookup(offset - 1)
            last: BatchHeader | None = None
            for _pos, header in segment.iter_batches(position):
                if header.base_offset >= offset:
                    break
                last = header
                if header.next_offset >= offset:
                    break  # the bytes after it are not trusted yet
            if last is not None:
                return last
            index -= 1  # a segment emptied below the offset (compaction): look earlier
        return None

    def _epochs_of_batches_below(self, offset: int) -> list[tuple[int, int]]:
        """``(epoch, start offset)`` of every epoch change among the batches below
        ``offset``, from their headers."""
        entries: list[tuple[int, int]] = []
        for segment in self._segments:
            if segment.base_offset >= offset:
                break
            for _pos, header in segment.iter_batches():
                if header.base_offset >= offset:
                    break
                epoch = header.partition_leader_epoch
                if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                    entries.append((epoch, header.base_offset))
                if header.next_offset >= offset:
                    break  # the bytes after it are not trusted yet
        return entries

    def _iter_batches_from(self, offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """Every batch whose last offset is >= ``offset``, across segments."""
        start = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        first = True
        for segment in self._segments[start:]:
            position = 0
            if first:
                found = segment.translate_offset(offset)
                if found is None:
                    continue
                position = found[0]
                first = False
            for pos, header in segment.iter_batches(position):
                yield segment, pos, header

    def _replay_producer_state(self, index_aborts_from: int) -> None:
        """Bring producer state from its snapshot up to the log end offset.

        Aborted transactions completed at or after ``index_aborts_from`` are (re)added to
        the transaction index of the segment holding their marker.
        """
        state = self.producer_state
        if state.map_end_offset >= self._log_end_offset:
            return
        for segment, pos, header in self._iter_batches_from(state.map_end_offset):
            if header.producer_id < 0:
                state.update(header, header.base_offset)
                continue
            batch = segment.read_bytes(pos, header.size) if header.is_control else None
            completed = state.update(header, header.base_offset, -1, batch)
            if (
                completed is not None
                and completed.is_aborted
                and completed.last_offset >= index_aborts_from
            ):
                txn_index = segment.txn_index
                indexed = txn_index.last_offset
                if indexed is None or indexed < completed.last_offset:
                    txn_index.append(
                        AbortedTxn(
                            completed.producer_id,
                            completed.first_offset,
                            completed.last_offset,
                            completed.last_stable_offset,
                        )
                    )

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
        buf = batches if _is_writable(batches) else bytearray(batches)
        config = self.config
        with self._lock:
            self._check_open()
            now_ms = self._now_ms()
            parsed = self._parse_batches(buf, leader=True, validate=validate, origin=origin,
                                         now_ms=now_ms)  # fmt: skip
            if not parsed:
                return AppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self.log_start_offset, 0)
            duplicate = self._check_producers(buf, parsed, origin)
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
            buf, parsed = self._maybe_recompress(buf, parsed)
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
                set_base_offset(buf, pos, next_offset)
                set_partition_leader_epoch(buf, pos, leader_epoch)
                batch_max = header.max_timestamp
                if log_append_time:
                    _stamp_timestamp(buf, pos, header, log_append_time=True, max_timestamp=now_ms)
                    batch_max = now_ms
                elif header.is_log_append_time:
                    # A client cannot choose LogAppendTime on a CreateTime topic.
                    _stamp_timestamp(buf, pos, header, log_append_time=False,
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
            parsed = self._parse_batches(buf, leader=False, validate=True,
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

    def _parse_batches(
        self, buf: bytearray, *, leader: bool, validate: bool, origin: str, now_ms: int
    ) -> list[_Batch]:
        """Split ``buf`` into batches and apply the per-batch checks of Kafka's LogValidator."""
        config = self.config
        parsed: list[_Batch] = []
        pos = 0
        end = len(buf)
        while pos < end:
            try:
                size = peek_batch_size(buf, pos)
                if size is None or pos + size > end:
                    if not leader:
                        break  # a fetch response may end in a partial batch
                    raise CorruptBatchError(
                        f"{end - pos} trailing bytes at {pos} do not form a whole record batch"
                    )
                header = parse_header(buf, pos)
                if validate:
                    check_crc(buf, pos, header)
            except CorruptRecordError as exc:
                raise CorruptBatchError(str(exc)) from None
            if leader:
                if size > config.max_message_bytes:
                    raise RecordTooLargeError(
                        f"record batch of {size} bytes is larger than max.message.bytes "
                        f"{config.max_message_bytes}"
                    )
                if (
                    header.records_count == 0
                    or header.records_count != header.last_offset_delta + 1
                ):
                    raise InvalidRecordError(
                        f"batch at byte {pos}: inconsistent lastOffsetDelta "
                        f"{header.last_offset_delta} and record count {header.records_count}"
                    )
                if header.is_control and origin == ORIGIN_CLIENT:
                    raise InvalidRecordError("clients are not allowed to write control records")
                if validate:
                    header = check_batch_records(buf, pos, header, config, now_ms)
            parsed.append(_Batch(pos, header))
            pos += size
        return parsed

    def _check_producers(
        self, buf: bytearray, parsed: list[_Batch], origin: str
    ) -> BatchMetadata | None:
        """Idempotence and fencing checks; the original's metadata for a duplicate.

        The producer state checks the first batch of each producer; further batches of
        the same producer in this append must continue its sequence and epoch.
        """
        seen: dict[int, BatchHeader] = {}
        for batch in parsed:
            header = batch.header
            if header.producer_id < 0:
                continue
            previous = seen.get(header.producer_id)
            if previous is None or header.is_control:
                view = memoryview(buf)[batch.position : batch.position + header.size]
                duplicate = self.producer_state.check_duplicate_or_validate(header, origin, view)
                if duplicate is not None:
                    return duplicate
            elif origin == ORIGIN_CLIENT and not previous.is_control:
                expected = (previous.last_sequence + 1) % 2**31
                if header.producer_epoch != previous.producer_epoch or (
                    header.base_sequence != expected
                ):
                    raise OutOfOrderSequenceError(
                        f"producer {header.producer_id}: batch with epoch "
                        f"{header.producer_epoch} sequence {header.base_sequence} does not "
                        f"follow the previous batch of the same request"
                    )
            seen[header.producer_id] = header
        return None

    def _maybe_recompress(
        self, buf: bytearray, parsed: list[_Batch]
    ) -> tuple[bytearray, list[_Batch]]:
        """Re-encode batches whose codec differs from a topic's fixed compression.type."""
        target_name = self.config.compression_type
        if target_name == "producer":
            return buf, parsed
        target = _CODEC_BY_NAME[target_name]
        if all(b.header.compression == target or b.header.is_control for b in parsed):
            return buf, parsed
        from odradek.records.batch import rebuild_batch
        from odradek.records.compression import Compression

        out = bytearray()
        rebuilt: list[_Batch] = []
        for batch in parsed:
            pos, header = batch.position, batch.header
            if header.compression == target or header.is_control:
                data = buf[pos : pos + header.size]
            else:
                limit = uncompressed_limit(self.config.max_message_bytes)
                decoded = decode_bounded(buf, pos, limit)
                data = rebuild_batch(decoded, compression=Compression(target))
            rebuilt.append(_Batch(len(out), parse_header(data)))
            out += data
            if len(data) > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"record batch recompressed to {target_name} is {len(data)} bytes, larger "
                    f"than max.message.bytes {self.config.max_message_bytes}"
                )
        return out, rebuilt

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
        self, buf: bytearray, parsed: list[_Batch], append_time: int
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

    # -- reads -------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchInfo:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` of them.

        The first batch is returned even if larger than ``max_bytes`` when
        ``min_one_batch`` (KIP-74). No batch reaching ``max_offset`` (exclusive bound:
        the high watermark or last stable offset) is returned. A read may span segments; an
        empty one (all its records removed by the cleaner) does not end it.
        Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset].
        """
        with self._lock:
            self._check_open()
            leo = self._log_end_offset
            if offset < self.log_start_offset or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                    f"log start offset {self.log_start_offset}, log end offset {leo}"
                )
            upper = leo if max_offset is None else min(max_offset, leo)
            info = FetchInfo()
            if offset >= upper:
                return info
            remaining = max(max_bytes, 0)
            index = max(bisect.bisect_right(self._bases, offset) - 1, 0)
            for i in range(index, len(self._segments)):
                segment = self._segments[i]
                if segment.base_offset >= upper:
                    break
                if info.first_offset < 0:
                    found = segment.translate_offset(offset)
                    if found is None:
                        continue  # offset in a gap at the end of this segment
                    start, first_header = found
                else:
                    start, first_header = 0, None
                segment_end = self._bases[i + 1] if i + 1 < len(self._bases) else leo
                max_position = segment.size
                if upper < segment_end:
                    bound = segment.translate_offset(upper, start)
                    if bound is not None:
                        max_position = bound[0]
                if max_position <= start:
                    if segment.size == 0:
                        # Emptied by the cleaner (Kafka swaps in empty cleaned segments
                        # too): the offsets it covered are gone, the log goes on after it.
                        continue
                    break
                limit = min(max_position, start + remaining)
                if first_header is not None and start + first_header.size > limit:
                    end = start  # the first batch alone is over the limit: no scan needed
                else:
                    end = segment.batch_end_at_or_before(limit, start)
                if end == start:
                    if first_header is None or not min_one_batch:
                        break
                    end = start + first_header.size
                if first_header is not None:
                    info.first_offset = first_header.base_offset
                info.regions.append(segment.region(start, end - start))
                info.size += end - start
                remaining -= end - start
                if end < segment.size or remaining <= 0:
                    break
            return info

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """ListOffsets: ``(offset, timestamp)`` of the first record with a timestamp >=
        ``timestamp_ms``, or None when there is none.

        Special values: -1 latest (log end offset), -2 earliest (log start offset), -3
        the record with the largest timestamp (KIP-734), -4 earliest local (= earliest).
        """
        with self._lock:
            self._check_open()
            if timestamp_ms in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return self.log_start_offset, NO_TIMESTAMP
            if timestamp_ms == LATEST_TIMESTAMP:
                return self._log_end_offset, NO_TIMESTAMP
            if timestamp_ms == MAX_TIMESTAMP:
                latest: LogSegment | None = None
                for segment in self._segments:
                    ts = segment.max_timestamp
                    if ts >= 0 and (latest is None or ts > latest.max_timestamp):
                        latest = segment  # the first segment holding the largest
                found = (
                    None
                    if latest is None
                    else latest.find_max_timestamp_record(
                        uncompressed_limit(self.config.max_message_bytes)
                    )
                )
                if found is not None and found[0] < self.log_start_offset:
                    return self.log_start_offset, found[1]
                return found
            if timestamp_ms < 0:
                raise ValueError(f"unsupported special timestamp {timestamp_ms}")
            for i, segment in enumerate(self._segments):
                if i + 1 < len(self._bases) and self._bases[i + 1] <= self.log_start_offset:
                    continue  # wholly below the log start: awaiting deletion
                if segment.max_timestamp < timestamp_ms:
                    continue
                found = segment.find_offset_by_timestamp(
                    timestamp_ms,
                    self.log_start_offset,
                    uncompressed_limit(self.config.max_message_bytes),
                )
                if found is not None:
                    return found
            return None

    # -- transactions ------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction (bounds the LSO), or None."""
        return self.producer_state.first_unstable_offset()

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_bound)``, for
        read_committed fetches."""
        with self._lock:
            index = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
            segments = self._segments[index:]
        found: list[AbortedTxn] = []
        for segment in segments:
            if segment.base_offset >= upper_bound:
                break
            txns, complete = segment.txn_index.collect_until(start_offset, upper_bound)
            found.extend(txns)
            if complete:
                break
        return found

    # -- durability --------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to`` (default: the log end
        offset) and advance the recovery point to it. The fsyncs run outside the log's
        lock: call this from a thread, appends carry on meanwhile."""
        with self._lock:
            if self._closed:
                return
            if self._metadata_pending:
                self._write_pending_metadata_locked()
            if self._created_unsynced:
                if self._log_end_offset == 0 and self.log_start_offset == 0:
                    self._last_flush_ms = self._now_ms()
                    return  # lost in a crash, the empty log is created again on hosting
                self._created_unsynced = False
            target = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
            index = max(bisect.bisect_right(self._bases, self.recovery_point) - 1, 0)
            segments = [s for s in self._segments[index:] if s.base_offset < target]
            if target <= self.recovery_point:
                segments = []
            rolled = [s for s in self._rolled_unflushed if s.base_offset < target]
            for segment in rolled:
                if segment not in segments:
                    segments.insert(0, segment)
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            metadata_unsynced, self._metadata_unsynced = self._metadata_unsynced, False
        started = time.monotonic()
        for segment in segments:
            segment.flush()
        try:
            if metadata_unsynced:
                _fsync_file(self._partition_metadata.path)
            if dir_dirty:
                _fsync_dir(self.directory)
        except FileNotFoundError:
            return  # the log was deleted meanwhile
        if self._log_end_offset > self.log_start_offset:
            # Entries appended without fsync become durable before the recovery point
            # passes their data: recovery trusts the checkpoint below it (see _recover).
            # An empty log's entries need none (nothing an epoch could be asked about).
            try:
                self.leader_epoch_cache.sync()
            except FileNotFoundError:
                return  # the log was deleted meanwhile
        if flush_stats.observer is not None and (segments or dir_dirty):
            flush_stats.observer(time.monotonic() - started)
        with self._lock:
            self._rolled_unflushed = [s for s in self._rolled_unflushed if s not in rolled]
            self.recovery_point = max(self.recovery_point, min(target, self._log_end_offset))
            self._last_flush_ms = self._now_ms()

    def maybe_flush(self) -> bool:
        """Flush if flush.messages or flush.ms says so, or a rolled segment awaits its
        fsync (Kafka flushes a segment when it is rolled). True if anything was flushed."""
        with self._lock:
            if self._closed:
                return False
            unflushed = self._log_end_offset - self.recovery_point
            due = unflushed > 0 and (
                unflushed >= self.config.flush_messages
                or self._now_ms() - self._last_flush_ms >= self.config.flush_ms
            )
            up_to = None if due else self._segments[-1].base_offset
            idle = not due and not self._rolled_unflushed
            has_data = self._log_end_offset > self.log_start_offset
        if idle:
            cache = self.leader_epoch_cache
            with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                if cache.truncation_unsynced:
                    # The log start offset moved under the log's lock (DeleteRecords,
                    # retention) and left the file to here: written with fsync off it.
                    cache.sync()
                elif has_data:
                    # Off the event loop and the log's lock: the file follows leader
                    # changes between flushes (no fsync; the flush moving the recovery
                    # point syncs it).
                    cache.write_unsynced()
            return False
        self.flush(up_to)
        return True

    # -- retention and log start offset ------------------------------------------------

    def _retention_bound(self) -> int:
        hw = self.high_watermark
        return self._log_end_offset if hw is None else min(hw, self._log_end_offset)

    def delete_retained_segments(self) -> int:
        """Delete the oldest segments beyond retention.ms or retention.bytes (when
        cleanup.policy has delete) or wholly below the log start offset; returns the count.

        Kafka's deletableSegments rule: oldest first while a rule holds, never a segment
        reaching above the high watermark, never an empty active segment. A non-empty
        active segment is deleted too when it breaches retention (a quiet topic past
        retention.ms, or retention.bytes 0): a new empty segment is rolled at the log
        end offset first, as a log always keeps one, and the log start offset becomes
        the log end offset. Files are renamed ``.deleted`` and removed after
        file.delete.delay.ms."""
        with self._lock:
            if self._closed:
                return 0
            now_ms = self._now_ms()
            config = self.config
            bound = self._retention_bound()
            segments = self._segments
            # The segments any rule may reach: all but an empty active one.
            eligible = len(segments) if segments[-1].size > 0 else len(segments) - 1
            count = 0

            def upper(i: int) -> int:  # the offset segment i ends before
                return self._bases[i + 1] if i + 1 < len(self._bases) else self._log_end_offset

            # Wholly below the log start offset (never the active segment).
            while count < len(segments) - 1 and self._bases[count + 1] <= self.log_start_offset:
                count += 1
            if config.delete and config.retention_ms >= 0:
                i = 0
                while i < eligible and (
                    now_ms - segments[i].largest_timestamp() > config.retention_ms
                ):
                    i += 1
                count = max(count, i)
            if config.delete and config.retention_bytes >= 0:
                excess = sum(s.size for s in segments) - config.retention_bytes
                i = 0
                while i < eligible and excess - segments[i].size >= 0:
                    excess -= segments[i].size
                    i += 1
                count = max(count, i)
            while count > 0 and upper(count - 1) > bound:
                count -= 1
            if count:
                if count == len(segments):
                    self._roll(self._log_end_offset, now_ms)
                doomed = self._segments[:count]
                self._delete_segments(doomed, now_ms)
                del self._segments[:count]
                del self._bases[:count]
                new_start = self._segments[0].base_offset
                if new_start > self.log_start_offset:
                    self._set_log_start_offset(new_start)
            self._remove_due_deletes(now_ms)
            return count

    def maybe_increment_log_start_offset(self, new_offset: int) -> None:
        """DeleteRecords: move the log start offset up (never above the high watermark).
        The segments now wholly below it go at the next retention run."""
        with self._lock:
            self._check_open()
            bound = self._retention_bound()
            if new_offset > bound:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset of {self.topic}-{self.partition} to "
                    f"{new_offset}: above the high watermark {bound}"
                )
            if new_offset > self.log_start_offset:
                self._set_log_start_offset(new_offset)

    def _set_log_start_offset(self, offset: int) -> None:
        self.log_start_offset = offset
        # In memory only (DeleteRecords runs on the event loop): the flush job fsyncs the
        # checkpoint off the lock; the file's older entries below the offset are harmless.
        self.leader_epoch_cache.truncate_from_start(offset, sync=False)
        self.producer_state.on_log_start_offset_incremented(offset)

    def _delete_segments(self, segments: list[LogSegment], now_ms: int) -> None:
        """Rename to ``.deleted`` now; remove the files after file.delete.delay.ms.

        A region already handed out keeps its descriptor, so in-flight reads finish."""
        due = now_ms + self.config.file_delete_delay_ms
        for segment in segments:
            segment.close()
            segment.change_file_suffix(DELETED_SUFFIX)
            self._pending_deletes.append((due, segment))
            if segment in self._rolled_unflushed:
                self._rolled_unflushed.remove(segment)
        self._dir_dirty = True

    def _remove_due_deletes(self, now_ms: int, *, force: bool = False) -> None:
        keep: list[tuple[int, LogSegment]] = []
        for due, segment in self._pending_deletes:
            if force or due <= now_ms:
                segment.delete_files()
            else:
                keep.append((due, segment))
        self._pending_deletes = keep

    # -- truncation --------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset`` (a follower diverged from its leader).

        A batch containing ``offset`` is removed whole; the log end offset becomes
        ``offset`` or that batch's base offset if lower. Indexes, leader epoch cache
        and producer state follow.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                return
            if offset < self.log_start_offset or offset <= self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return
            now_ms = self._now_ms()
            first_removed = bisect.bisect_left(self._bases, offset)
            if first_removed < len(self._segments):
                self._delete_segments(self._segments[first_removed:], now_ms)
                del self._segments[first_removed:]
                del self._bases[first_removed:]
            active = self._segments[-1]
            cut = active.truncate_to(offset, now_ms)
            new_end = offset if cut is None else min(offset, cut)
            self._log_end_offset = new_end
            self.recovery_point = min(self.recovery_point, new_end)
            self._dir_dirty = True
            self.leader_epoch_cache.truncate_from_end(new_end)
            self.producer_state.truncate_and_reload(self.log_start_offset, new_end)
            self._replay_producer_state(new_end)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the (empty) log at ``offset``."""
        if offset < 0:
            raise ValueError(f"cannot restart a log at negative offset {offset}")
        with self._lock:
            self._check_open()
            now_ms = self._now_ms()
            self._delete_segments(list(self._segments), now_ms)
            self._segments = []
            self._bases = []
            self._add_segment(LogSegment.create(self.directory, offset, self.config,
                                                now_ms=now_ms))  # fmt: skip
            self._log_end_offset = offset
            self.log_start_offset = offset
            self.recovery_point = offset
            self.leader_epoch_cache.clear()
            self.producer_state.truncate_fully_and_start_at(offset)

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
            _fsync_dir(self.directory)
            self._delete_segments(old_segments, self._now_ms())
            new_segment.change_file_suffix("")
            new_segment.config = self.config
            self._segments[first : first + len(old_segments)] = [new_segment]
            self._bases[first : first + len(old_segments)] = [new_segment.base_offset]
            _fsync_dir(self.directory)

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
            self._remove_due_deletes(0, force=True)
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


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
