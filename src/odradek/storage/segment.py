"""One log segment: a ``.log`` file of record batches plus its three index files.

Files of the segment whose first offset is ``base_offset``, in the partition directory
(names are the base offset in 20 decimal digits, so they sort in offset order)::

    00000000000000368769.log        record batches v2, back to back, exactly as
                                    produced except for the base offset and partition
                                    leader epoch the broker wrote into them (see
                                    odradek.records.header for the 61-byte header)
    00000000000000368769.index      sparse offset -> position index (offset_index.py)
    00000000000000368769.timeindex  timestamp -> offset index (time_index.py)
    00000000000000368769.txnindex   aborted transactions, created on first abort
                                    (txn_index.py)

A suffix after the extension marks a file in transition: ``.deleted`` (retention or
truncation removed the segment; the file goes after ``file.delete.delay.ms``),
``.cleaned`` (a compaction result being written) and ``.swap`` (a compaction result
ready to replace the segments it covers; see Log.replace_segments).

The segment never decodes records: it reads batch headers to find positions, and
recovery checks each batch's length, magic, CRC32C and offsets. Everything is loaded
lazily so that opening a segment reads nothing. Not thread-safe by itself: the Log's
lock serialises access, except :meth:`LogSegment.flush`, which may run in another
thread while appends continue.
"""

from __future__ import annotations

import os
import random
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from odradek.records.errors import CorruptRecordError
from odradek.records.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_crc,
    parse_header,
    peek_batch_size,
)
from odradek.storage.config import LogConfig
from odradek.storage.errors import CorruptIndexError, StorageError
from odradek.storage.file_region import FileRegion, SharedFile
from odradek.storage.offset_index import INT32_MAX, OffsetIndex
from odradek.storage.preallocation import preallocate, release_beyond
from odradek.storage.time_index import NO_TIMESTAMP, TimeIndex
from odradek.storage.txn_index import TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

# Header scans read this much at a time: many small batches per read, and only a few
# wasted bytes per read when batches are large.
_SCAN_CHUNK = 8192
# Recovery reads (and CRC-checks) this much at a time.
_RECOVERY_CHUNK = 4 * 1024 * 1024
# The active segment remembers where its last 16-32 appended batches start.
_RECENT_BATCHES = 16
# Appends of at least this many bytes reserve disk blocks ahead of themselves
# (storage.preallocation): a few fallocate calls instead of the file system's reservation
# per write. Smaller appends (most partitions) never do, so idle and small partitions
# hold no reserved blocks. The reservation reaches past the append by the larger of eight
# such appends and the segment's own size, at most 64 MiB and never past segment.bytes.
_PREALLOCATE_MIN_APPEND = 64 * 1024
_PREALLOCATE_APPENDS_AHEAD = 8
_PREALLOCATE_MAX_AHEAD = 64 * 1024 * 1024

# (position within the appended bytes, size, base offset, last offset, max timestamp)
BatchEntry = tuple[int, int, int, int, int]


def file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for base offset 42 and suffix ``.log``."""
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(name: str) -> int | None:
    """The base offset a segment file name starts with, or None if it is not one."""
    stem = name.split(".", 1)[0]
    if len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class LogSegment:
    """The files of one segment and the per-segment state derived from them."""

    __slots__ = (
        "_allocated",
        "_file",
        "_file_pending",
        "_first_timestamp",
        "_first_timestamp_loaded",
        "_index_bytes",
        "_indexes_checked",
        "_log_dirty",
        "_log_path",
        "_max_timestamp",
        "_offset_index",
        "_offset_of_max_timestamp",
        "_recent_bases",
        "_recent_positions",
        "_size",
        "_time_index",
        "_txn_index",
        "base_offset",
        "bytes_since_last_index_entry",
        "closed",
        "config",
        "created_ms",
        "directory",
        "file_suffix",
        "roll_jitter_ms",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        now_ms: int,
        file_suffix: str = "",
        create: bool = False,
        keep_open: bool = True,
    ) -> None:
        # Opening a log constructs one LogSegment per segment file, so this must not
        # touch the disk or even build paths: everything is derived on first use.
        self.directory = directory if isinstance(directory, Path) else Path(directory)
        self.base_offset = base_offset
        self.config = config
        self.file_suffix = file_suffix
        self._index_bytes = config.segment_index_bytes
        self._log_path: Path | None = None
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._file: SharedFile | None = None
        # The empty .log is not created yet (create with keep_open=False): the first use
        # that needs a descriptor creates it.
        self._file_pending = False
        if create:
            if keep_open:
                self._file = SharedFile(
                    self.log_path,
                    os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                )
            else:
                # Many partitions created at once stay idle: an empty segment needs no
                # file until its first append (or read), so creating 1,000 partitions
                # costs 1,000 directories, not 2,000 inodes, and an idle partition holds
                # no descriptor. The log's first flush fsyncs the directory entry.
                self._file_pending = True
            self._size: int | None = 0
        else:
            self._size = None
        self._txn_index: TransactionIndex | None = None
        self._indexes_checked = create
        self.created_ms = now_ms
        jitter = config.segment_jitter_ms
        self.roll_jitter_ms = random.randrange(min(jitter, config.segment_ms)) if jitter else 0
        # Timestamp of the first batch (Kafka's rollingBasedTimestamp), loaded on demand.
        self._first_timestamp: int | None = None
        self._first_timestamp_loaded = create
        # Largest batch max-timestamp and the last offset of the first batch holding it
        # (Kafka's shallowOffsetOfMaxTimestamp), loaded on demand.
        self._max_timestamp: int | None = None
        self._offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        # Base offsets and positions of the batches appended last (in memory only, lists
        # created by the first append): a consumer tailing the log fetches from one of
        # them, and without them every fetch scans the batches written since the last
        # index entry (up to index.interval.bytes of small batches) twice.
        self._recent_bases: list[int] | None = None
        self._recent_positions: list[int] | None = None
        self._log_dirty = False
        # End of the blocks this process reserved beyond the file's size (0: none).
        self._allocated = 0
        self.closed = False

    def _path(self, kind: str) -> Path:
        return self.directory / file_name(self.base_offset, kind + self.file_suffix)

    @property
    def log_path(self) -> Path:
        if self._log_path is None:
            self._log_path = self._path(LOG_SUFFIX)
        return self._log_path

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._offset_index = OffsetIndex(
                self._path(INDEX_SUFFIX), self.base_offset, self._index_bytes
            )
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = TimeIndex(
                self._path(TIME_INDEX_SUFFIX), self.base_offset, self._index_bytes
            )
        return self._time_index

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, *, now_ms: int,
        file_suffix: str = "", keep_open: bool = True,
    ) -> LogSegment:  # fmt: skip
        """A new, empty segment (its ``.log`` must not exist yet). ``keep_open=False``
        closes the new file at once (opened again on first use)."""
        return cls(
            directory, base_offset, config, now_ms=now_ms, file_suffix=file_suffix, create=True,
            keep_open=keep_open,
        )  # fmt: skip

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, config: LogConfig, *, now_ms: int,
        file_suffix: str = "",
    ) -> LogSegment:  # fmt: skip
        """An existing segment; reads nothing until used."""
        return cls(directory, base_offset, config, now_ms=now_ms, file_suffix=file_suffix)

    # -- files -------------------------------------------------------------------------

    def _shared_file(self) -> SharedFile:
        if self._file is None:
            if self.closed:
                raise StorageError(f"segment {self.log_path} is closed")
            flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
            if self._file_pending:
                flags |= os.O_CREAT
            self._file = SharedFile(self.log_path, flags)
            self._file_pending = False
        return self._file

    @property
    def file_pending(self) -> bool:
        """True while the (empty) ``.log`` of a lazily created segment does not exist."""
        return self._file_pending

    @property
    def size(self) -> int:
        """Bytes of whole batches in the ``.log`` file."""
        if self._size is None:
            # A string path: a clean open stats every segment, and a Path costs more
            # than the stat itself.
            path = self._log_path or (
                f"{self.directory}{os.sep}{self.base_offset:020d}{LOG_SUFFIX}{self.file_suffix}"
            )
            self._size = os.stat(path).st_size
        return self._size

    @property
    def txn_index(self) -> TransactionIndex:
        if self._txn_index is None:
            self._txn_index = TransactionIndex(self._path(TXN_INDEX_SUFFIX), self.base_offset)
        return self._txn_index

    def reset_txn_index(self) -> None:
        """Remove the transaction index (corrupt); it is rebuilt by producer-state replay."""
        self.txn_index.delete()
        self._txn_index = None

    def _checked_indexes(self) -> None:
        """On first use, make sure both index files are well-formed; rebuild them if not."""
        if self._indexes_checked:
            return
        self._indexes_checked = True
        try:
            self.offset_index.sanity_check()
            self.time_index.sanity_check()
            if self.size > self.config.index_interval_bytes and not self.offset_index.path.exists():
                # The log has enough data for entries: a missing file was lost, not empty.
                raise CorruptIndexError(f"{self.log_path}: index file missing")
            _, position = self.offset_index.last_entry
            if position >= max(self.size, 1) and self.offset_index.entries:
                raise CorruptIndexError(f"{self.offset_index.path}: points past the log end")
        except CorruptIndexError:
            self.rebuild_indexes()

    def region(self, position: int, length: int) -> FileRegion:
        shared = self._shared_file()
        return FileRegion(shared.fd, position, length, shared)

    def read_bytes(self, position: int, length: int) -> bytes:
        return self.region(position, length).read()

    # -- batch headers -----------------------------------------------------------------

    def iter_batches(
        self, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each whole batch in ``[start, end)``; trusts the data.

        ``start`` must be a batch boundary. Bytes that cannot be a header raise
        StorageError: this is the read path, where the log has already been recovered.
        """
        fd = self._shared_file().fd
        limit = self.size if end is None else min(end, self.size)
        pos = start
        buf = b""
        buf_pos = start
        while limit - pos >= HEADER_SIZE:
            rel = pos - buf_pos
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_SCAN_CHUNK, limit - pos), pos)
                buf_pos = pos
                rel = 0
                if len(buf) < HEADER_SIZE:
                    return
            try:
                header = parse_header(buf, rel)
            except CorruptRecordError as exc:
                raise StorageError(f"{self.log_path}: {exc}") from None
            if pos + header.size > limit:
                return
            yield pos, header
            pos += header.size

    def translate_offset(self, offset: int, start: int = 0) -> tuple[int, BatchHeader] | None:
        """The first batch at or after ``start`` whose last offset is >= ``offset``."""
        self._checked_indexes()
        bases = self._recent_bases
        if bases and offset >= bases[0]:
            # The recent batches are every batch since the first of them, so the last one
            # based at or below ``offset`` is where the answer starts (batches before it
            # end below ``offset``): no index lookup and no scan up to it.
            position = self._recent_positions[bisect_right(bases, offset) - 1]  # type: ignore[index]
        else:
            _, position = self.offset_index.lookup(offset)
        for pos, header in self.iter_batches(max(position, start)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def batch_end_at_or_before(self, limit: int, start: int) -> int:
        """The greatest batch end position <= ``limit``, for batches from ``start`` on."""
        if limit >= self.size:
            return self.size
        self._checked_indexes()
        _, position = self.offset_index.lookup_by_position(limit)
        end = max(position, start)
        for pos, header in self.iter_batches(end):
            if pos + header.size > limit:
                break
            end = pos + header.size
        return end

    def read_next_offset(self) -> int:
        """Offset after the last batch: from the last index entry plus a short scan."""
        self._checked_indexes()
        _, position = self.offset_index.last_entry
        next_offset = self.base_offset
        for _, header in self.iter_batches(position):
            next_offset = header.next_offset
        return next_offset

    # -- timestamps --------------------------------------------------------------------

    def _load_max_timestamp(self) -> None:
        if self._max_timestamp is None:
            self._checked_indexes()
            self._max_timestamp, self._offset_of_max_timestamp = self.time_index.last_entry

    @property
    def max_timestamp(self) -> int:
        """Largest batch max-timestamp in the segment, -1 if none."""
        self._load_max_timestamp()
        assert self._max_timestamp is not None
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        self._load_max_timestamp()
        return self._offset_of_max_timestamp

    def find_max_timestamp_record(
        self, max_uncompressed: int | None = None
    ) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734): ``(offset, timestamp)`` of the first record
        carrying the segment's largest timestamp, None if the segment has none.

        Appends track only batch max-timestamps and the last offset of the first batch
        holding the largest (what the time index stores), so they never decode records;
        this query finds that batch through the indexes and decodes it alone, like
        Kafka's RecordBatch.offsetOfMaxTimestamp. A LogAppendTime batch gives every
        record its maxTimestamp, so its first record is the answer. None also when no
        record carries the header's timestamp (Kafka answers no offset then too). A
        batch whose records inflate past ``max_uncompressed`` is not decoded: the answer
        is then its first offset.
        """
        timestamp = self.max_timestamp
        if timestamp < 0:
            return None
        self._checked_indexes()
        _, position = self.offset_index.lookup(self.offset_of_max_timestamp)
        for pos, header in self.iter_batches(position):
            if header.max_timestamp != timestamp:
                continue
            from odradek.records.batch import decode_batch
            from odradek.records.errors import UncompressedSizeError

            try:
                batch = decode_batch(
                    self.read_bytes(pos, header.size),
                    verify_crc=False,
                    max_uncompressed=max_uncompressed,
                )
            except UncompressedSizeError:
                return header.base_offset, timestamp
            except CorruptRecordError as exc:
                raise StorageError(f"{self.log_path}: batch at {pos}: {exc}") from None
            for record in batch.records:
                if record.timestamp_ms == timestamp:
                    return record.offset, timestamp
            return None
        return None

    def largest_timestamp(self) -> int:
        """For time retention: the max timestamp, else the file's modification time."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        if self._file_pending:
            return self.created_ms
        return int(os.stat(self.log_path).st_mtime * 1000)

    def first_batch_timestamp(self) -> int | None:
        """Max timestamp of the first batch (what segment.ms is measured from), or None."""
        if not self._first_timestamp_loaded:
            self._first_timestamp_loaded = True
            for _, header in self.iter_batches(0):
                self._first_timestamp = header.max_timestamp
                break
        return self._first_timestamp

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int, max_uncompressed: int | None = None
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at/after ``start_offset`` with a
        timestamp >= ``timestamp``, or None if this segment has none.

        The indexes find the batch; only that one batch is decoded to find the record.
        A batch whose records inflate past ``max_uncompressed`` is not decoded: the
        answer is then the batch itself, which is never past the record sought.
        """
        self._checked_indexes()
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        for pos, header in self.iter_batches(position):
            if header.last_offset < start_offset or header.max_timestamp < timestamp:
                continue
            if header.is_log_append_time:
                return max(header.base_offset, start_offset), header.max_timestamp
            from odradek.records.batch import decode_batch
            from odradek.records.errors import UncompressedSizeError

            try:
                batch = decode_batch(
                    self.read_bytes(pos, header.size),
                    verify_crc=False,
                    max_uncompressed=max_uncompressed,
                )
            except UncompressedSizeError:
                return max(header.base_offset, start_offset), header.max_timestamp
            except CorruptRecordError as exc:
                raise StorageError(f"{self.log_path}: batch at {pos}: {exc}") from None
            for record in batch.records:
                if record.offset >= start_offset and record.timestamp_ms >= timestamp:
                    return record.offset, record.timestamp_ms
            # Only the batch header claimed a timestamp this high (e.g. records removed by
            # compaction): answer with the batch itself, as the header is what is indexed.
            return max(header.base_offset, start_offset), header.max_timestamp
        return None

    # -- rolling -----------------------------------------------------------------------

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's rule: measured in message time from the first batch when timestamps
        exist, else in wall-clock time since the segment was created (or loaded)."""
        first = self.first_batch_timestamp()
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(
        self, append_size: int, max_timestamp: int, first_offset: int, last_offset: int,
        now_ms: int,
    ) -> bool:  # fmt: skip
        """Whether an append of ``append_size`` bytes must go to a new segment."""
        # can_convert_to_relative_offset, inlined: this runs on every append.
        base = self.base_offset
        if not (0 <= first_offset - base <= INT32_MAX and 0 <= last_offset - base <= INT32_MAX):
            return True
        size = self.size
        if size == 0:
            return False  # an empty segment takes anything (one batch may exceed a full index)
        self._checked_indexes()
        config = self.config
        return (
            size > config.segment_bytes - append_size
            or self.time_waited_for_roll(now_ms, max_timestamp)
            > config.max_segment_ms - self.roll_jitter_ms
            or self.offset_index.is_full
            or self.time_index.is_full
        )

    # -- appending ---------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, batches: Sequence[BatchEntry]) -> None:
        """Write whole batches (offsets already assigned) and index them.

        ``batches`` describes each batch in ``data``. On a write error the file is cut
        back so that no partial batch is ever left behind a failed append.
        """
        self._checked_indexes()
        self._load_max_timestamp()
        shared = self._shared_file()
        start = self.size
        view = memoryview(data)
        # What indexing changes, to put back if an index entry cannot be written either.
        # An entry is only added for a batch that starts more than index.interval.bytes
        # after the last one, so none can be when the whole append ends before that: the
        # commonest append (a small batch) skips reading the index sizes.
        since = self.bytes_since_last_index_entry
        entries = None
        if since + len(view) > self.config.index_interval_bytes:
            entries = (self.offset_index.entries, self.time_index.entries)
        undo = (self._max_timestamp, self._offset_of_max_timestamp, since)
        if len(view) >= _PREALLOCATE_MIN_APPEND and start + len(view) > self._allocated:
            self._reserve_blocks(shared.fd, start, len(view))
        try:
            written = 0
            while written < len(view):
                written += os.write(shared.fd, view[written:])
            # Inside the try: a batch whose index entry failed (a full disk) must go too,
            # or the next append would land after bytes nobody acknowledged.
            self._index_batches(start, batches)
        except OSError as exc:
            os.ftruncate(shared.fd, start)
            self._allocated = 0  # the truncation gave back every block past start
            if entries is not None:
                self.offset_index.truncate_to_entries(entries[0])
                self.time_index.truncate_to_entries(entries[1])
            (self._max_timestamp, self._offset_of_max_timestamp,
             self.bytes_since_last_index_entry) = undo  # fmt: skip
            raise StorageError(f"{self.log_path}: append failed: {exc}") from exc
        self._log_dirty = True
        if start == 0 and batches:
            self._first_timestamp = batches[0][4]
            self._first_timestamp_loaded = True
        self._size = start + len(view)
        self._remember_batches(start, batches)

    def _reserve_blocks(self, fd: int, start: int, length: int) -> None:
        end = start + length
        ahead = max(
            0,
            min(
                max(end, _PREALLOCATE_APPENDS_AHEAD * length),
                _PREALLOCATE_MAX_AHEAD,
                self.config.segment_bytes - end,
            ),
        )
        if preallocate(fd, start, length + ahead):
            self._allocated = end + ahead

    def _release_reserved_blocks(self) -> None:
        """Give back the blocks reserved beyond the end (the segment stops growing)."""
        if self._allocated > self.size:
            try:
                release_beyond(self._shared_file().fd, self.size)
            except (OSError, StorageError):
                pass  # kept until the segment is deleted: disk space, not data
        self._allocated = 0

    def _remember_batches(self, start: int, batches: Sequence[BatchEntry]) -> None:
        bases = self._recent_bases
        positions = self._recent_positions
        if bases is None or positions is None:
            bases = self._recent_bases = []
            positions = self._recent_positions = []
        for rel_pos, _size, base_offset, _last, _ts in batches:
            bases.append(base_offset)
            positions.append(start + rel_pos)
        if len(bases) > 2 * _RECENT_BATCHES:
            del bases[:-_RECENT_BATCHES], positions[:-_RECENT_BATCHES]

    def _forget_recent_batches(self) -> None:
        self._recent_bases = self._recent_positions = None

    def _index_batches(self, start: int, batches: Sequence[BatchEntry]) -> None:
        interval = self.config.index_interval_bytes
        max_timestamp = self._max_timestamp
        assert max_timestamp is not None
        for rel_pos, size, base_offset, last_offset, batch_max_timestamp in batches:
            if batch_max_timestamp > max_timestamp:
                max_timestamp = batch_max_timestamp
                self._offset_of_max_timestamp = last_offset
            if self.bytes_since_last_index_entry > interval:
                # A full index only lengthens scans; the next append rolls.
                if not self.offset_index.is_full:
                    self.offset_index.append(base_offset, start + rel_pos)
                if not self.time_index.is_full:
                    self.time_index.maybe_append(max_timestamp, self._offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += size
        self._max_timestamp = max_timestamp

    # -- recovery ----------------------------------------------------------------------

    def recover(
        self,
        on_batch: Callable[[BatchHeader, memoryview], None] | None = None,
        *,
        from_offset: int | None = None,
    ) -> int:
        """Validate batches, rebuild the indexes, cut the file at the first bad byte.

        With ``from_offset`` (a recovery point inside this segment) the data below it is
        trusted, as it was fsynced: index entries below it are kept and only the batches
        from it on are validated. A batch is valid if its length fits the file, its
        header parses (magic 2), its CRC32C matches, and its offsets start at or after the
        previous batch's next offset and fit the segment's relative int32 range. Returns
        the bytes truncated. ``on_batch(header, batch_bytes)`` is called for each batch
        validated, in order.
        """
        self._indexes_checked = True
        self._forget_recent_batches()
        fd = self._shared_file().fd
        file_size = os.fstat(fd).st_size
        self._size = file_size
        pos, expected = 0, self.base_offset
        if from_offset is not None and from_offset > self.base_offset:
            try:
                pos, expected = self._resume_point(from_offset)
            except (CorruptIndexError, StorageError):
                pos, expected = 0, self.base_offset
        resumed = pos > 0
        if pos == 0:
            self.offset_index.reset()
            self.time_index.reset()
            self._max_timestamp = NO_TIMESTAMP
            self._offset_of_max_timestamp = self.base_offset
            self.bytes_since_last_index_entry = 0
            self._first_timestamp = None
            self._first_timestamp_loaded = True
        buf = b""
        buf_pos = pos
        while pos < file_size:
            rel = pos - buf_pos
            if rel + LOG_OVERHEAD > len(buf):
                buf = os.pread(fd, min(_RECOVERY_CHUNK, file_size - pos), pos)
                buf_pos, rel = pos, 0
            try:
                size = peek_batch_size(buf, rel)
                if size is None or pos + size > file_size:
                    break  # torn write: the length field or the batch is incomplete
                if rel + size > len(buf):
                    buf = os.pread(fd, max(_RECOVERY_CHUNK, size), pos)
                    buf_pos, rel = pos, 0
                header = parse_header(buf, rel)
                check_crc(buf, rel, header)
            except CorruptRecordError:
                break
            if header.base_offset < expected or not self.can_convert_to_relative_offset(
                header.last_offset
            ):
                break
            if pos == 0:
                self._first_timestamp = header.max_timestamp
                self._first_timestamp_loaded = True
            self._index_batches(pos, ((0, size, header.base_offset, header.last_offset,
                                       header.max_timestamp),))  # fmt: skip
            if on_batch is not None:
                on_batch(header, memoryview(buf)[rel : rel + size])
            expected = header.next_offset
            pos += size
        truncated = file_size - pos
        if truncated:
            os.ftruncate(fd, pos)
            self._size = pos
            self._log_dirty = True
        if resumed and from_offset is not None and expected < from_offset:
            # Data below the recovery point is gone (damaged or cut after its fsync): the
            # index entries kept for it may point at or past the new end, where the next
            # offset would then be read from. Rebuild them from what is left.
            self.rebuild_indexes()
        return truncated

    def _resume_point(self, from_offset: int) -> tuple[int, int]:
        """Position and next offset of the first batch at or after ``from_offset``, from
        the trusted indexes and data below it; drops index entries at or above it."""
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        self.offset_index.truncate_to(from_offset)
        self.time_index.truncate_to(from_offset)
        last_offset, position = self.offset_index.last_entry
        self._max_timestamp, self._offset_of_max_timestamp = self.time_index.last_entry
        self._first_timestamp_loaded = False
        self.bytes_since_last_index_entry = 0
        pos, expected = position, last_offset
        for batch_pos, header in self.iter_batches(position):
            if header.base_offset >= from_offset:
                break
            if header.max_timestamp > self._max_timestamp:
                self._max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
            self.bytes_since_last_index_entry += header.size
            pos, expected = batch_pos + header.size, header.next_offset
        return pos, expected

    def rebuild_indexes(self) -> None:
        """Rebuild ``.index`` and ``.timeindex`` from the log data without truncating."""
        self._indexes_checked = True
        self._forget_recent_batches()
        self.offset_index.reset()
        self.time_index.reset()
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self.bytes_since_last_index_entry = 0
        entries = [
            (pos, h.size, h.base_offset, h.last_offset, h.max_timestamp)
            for pos, h in self.iter_batches(0)
        ]
        self._index_batches(0, entries)

    # -- truncation --------------------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int) -> int | None:
        """Remove every batch whose last offset is >= ``offset``.

        Returns the base offset of the first batch removed, or None if nothing was.
        """
        found = self.translate_offset(offset)
        if found is None:
            return None
        position, header = found
        cut = header.base_offset
        self._forget_recent_batches()
        self.offset_index.truncate_to(cut)
        self.time_index.truncate_to(cut)
        self.txn_index.truncate_to(cut)
        os.ftruncate(self._shared_file().fd, position)
        self._allocated = 0  # the truncation gave back every block past position
        self._size = position
        self._log_dirty = True
        self._max_timestamp, self._offset_of_max_timestamp = self.time_index.last_entry
        self.bytes_since_last_index_entry = 0
        if position == 0:
            self.created_ms = now_ms
            self._first_timestamp = None
            self._first_timestamp_loaded = True
        return cut

    # -- lifecycle ---------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """The segment stops being the active one: record its overall max timestamp, and
        give back the disk blocks reserved for appends that will not come."""
        self._forget_recent_batches()  # appends go to the next segment now
        if self._allocated:
            self._release_reserved_blocks()
        if self._max_timestamp is not None and self._max_timestamp >= 0:
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )

    def flush(self) -> None:
        """fsync the log and index files. Safe to call from another thread."""
        shared = self._file  # a local reference keeps the descriptor open meanwhile
        if shared is not None and self._log_dirty and not shared.closed:
            self._log_dirty = False
            os.fsync(shared.fd)
        for index in (self._offset_index, self._time_index, self._txn_index):
            if index is not None:
                index.flush()

    @property
    def holds_handles(self) -> bool:
        """Whether any descriptor of the segment is open (log or index write handles)."""
        return self._file is not None or any(
            index is not None and index.holds_handle
            for index in (self._offset_index, self._time_index)
        )

    def release_handles(self) -> int:
        """Close the descriptors nothing unsynced depends on; the next use reopens them.
        Regions handed out keep their own reference. Returns how many were closed."""
        released = 0
        if self._file is not None and not self._log_dirty:
            self._file = None
            released += 1
        for index in (self._offset_index, self._time_index):
            if index is not None and index.release_handle():
                released += 1
        return released

    def change_file_suffix(self, new_suffix: str) -> None:
        """Rename every file of the segment to carry ``new_suffix`` (open handles stay valid)."""
        old_log = self.log_path
        offset_index, time_index, txn_index = self.offset_index, self.time_index, self.txn_index
        self.file_suffix = new_suffix
        self._log_path = self._path(LOG_SUFFIX)
        if old_log.exists():
            os.replace(old_log, self.log_path)
        if self._file is not None:
            self._file.path = self.log_path
        offset_index.rename_to(self._path(INDEX_SUFFIX))
        time_index.rename_to(self._path(TIME_INDEX_SUFFIX))
        txn_index.rename_to(self._path(TXN_INDEX_SUFFIX))

    def close(self) -> None:
        """Release the files. Regions still in flight keep the log descriptor open."""
        if self.closed:
            return
        self.on_become_inactive()
        if self._offset_index is not None:
            self._offset_index.close()
        if self._time_index is not None:
            self._time_index.close()
        if self._txn_index is not None:
            self._txn_index.close()
        self._file = None
        self.closed = True

    def delete_files(self) -> None:
        """Close and unlink every file of the segment (missing files are fine)."""
        self.closed = True
        self._file = None
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        try:
            self.log_path.unlink()
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self._size})"
