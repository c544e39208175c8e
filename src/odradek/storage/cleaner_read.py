"""Reading a segment's batches for the log cleaner, and the error that stops a pass.

The lowest layer of compaction (see :mod:`odradek.storage.cleaner` for the algorithm):
the offset map (:mod:`odradek.storage.offset_map`) and the record filter
(:mod:`odradek.storage.cleaner_filter`) walk segments with :func:`iter_segment_batches`
and look into batches with the helpers here. A segment that retention, truncation or
deletion removes during a pass raises :class:`CleaningAbortedError` (Kafka's
LogCleaningAbortedException), which leaves the log as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from odradek.records.batch import DecodedBatch, decode_batch
from odradek.records.control import peek_control_type
from odradek.records.errors import CorruptRecordError, UncompressedSizeError
from odradek.records.header import DELETE_HORIZON_MASK, BatchHeader, parse_header, peek_batch_size
from odradek.storage.errors import CorruptLogError, StorageError

# The cleaner's messages kept the logger they had before compaction was split into
# modules, so a logging configuration that names it still sees all of them.
log = logging.getLogger("odradek.storage.cleaner")


class CleaningAbortedError(StorageError):
    """Cleaning of a log was stopped (paused for truncation/deletion, or segments changed)."""


def _read(segment: Any, position: int, length: int) -> bytes:
    try:
        return segment.read_bytes(position, length)
    except (StorageError, FileNotFoundError) as exc:
        if getattr(segment, "closed", False) or isinstance(exc, FileNotFoundError):
            # Retention, truncation or deletion removed the segment meanwhile.
            raise CleaningAbortedError(f"{segment.log_path} went away during cleaning") from None
        raise


def iter_segment_batches(segment: Any, io_buffer_size: int) -> Iterator[tuple[int, bytes]]:
    """``(position, batch bytes)`` for every whole batch of a (non-active) segment."""
    limit = segment.size
    pos = 0
    buf = b""
    buf_pos = 0
    while pos < limit:
        rel = pos - buf_pos
        if rel + 12 > len(buf):
            buf = _read(segment, pos, min(max(io_buffer_size, 12), limit - pos))
            buf_pos, rel = pos, 0
        try:
            size = peek_batch_size(buf, rel)
        except CorruptRecordError as exc:
            raise CorruptLogError(f"{segment.log_path} at byte {pos}: {exc}") from None
        if size is None or pos + size > limit:
            raise CorruptLogError(f"{segment.log_path}: batch at byte {pos} runs past the end")
        if rel + size > len(buf):
            buf = _read(segment, pos, max(io_buffer_size, size))
            buf_pos, rel = pos, 0
            if len(buf) < size:
                raise CorruptLogError(f"{segment.log_path}: batch at byte {pos} is truncated")
        yield pos, buf[rel : rel + size]
        pos += size


def decode_within(segment: Any, pos: int, data: bytes, limit: int) -> DecodedBatch | None:
    """The batch's records, or None when they inflate past ``limit``.

    Such a batch was stored before produce bounded decompression (or under a larger
    max.message.bytes). Holding it in memory could take the broker down, so the
    cleaner leaves it exactly as it is: its keys stay out of the offset map and the
    batch is copied unchanged, which keeps more data, never less.
    """
    try:
        return decode_batch(data, max_uncompressed=limit)
    except UncompressedSizeError as exc:
        log.warning(
            "%s at byte %d: batch at offset %d is kept uncleaned: %s",
            segment.log_path, pos, parse_header(data).base_offset, exc,
        )  # fmt: skip
        return None
    except CorruptRecordError as exc:
        raise CorruptLogError(f"{segment.log_path} at byte {pos}: {exc}") from None


def batch_header(segment: Any, pos: int, data: bytes) -> BatchHeader:
    try:
        return parse_header(data)
    except CorruptRecordError as exc:
        raise CorruptLogError(f"{segment.log_path} at byte {pos}: {exc}") from None


def control_type_of(batch: DecodedBatch | None) -> int | None:
    """The marker type of a control batch: None when its records were already removed,
    -1 when it cannot be read (then it is never the cleaner's to remove)."""
    if batch is None:
        return -1  # too large to read: treated as "not ours to remove"
    if not batch.records:
        return None
    try:
        return peek_control_type(batch.records[0].key)
    except CorruptRecordError:
        return -1  # unreadable control record: treated as "not ours to remove"


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's KIP-534 delete horizon (ms), if one was set by an earlier pass."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None
