"""Reading one partition's log: Fetch (whole batches as file regions for ``sendfile``),
the bytes a delayed fetch counts towards min_bytes, ListOffsets (offset for a timestamp)
and the aborted transactions a read_committed fetch must skip.

Functions of a :class:`~odradek.storage.log.Log`, bound as its ``read``,
``readable_bytes``, ``offset_for_timestamp`` and ``collect_aborted_transactions``
methods (bound, not wrapped: ``read`` runs once per partition of every Fetch, and a
wrapper would add a call). Kept apart from log.py because the reads only look: they
change nothing in the log, and what bounds them (log start offset, high watermark or
last stable offset, the cleaner's empty segments) is their own reasoning.

A read finds the start position with the sparse offset index and a short header
scan; records are decoded only to answer ListOffsets by timestamp or MAX_TIMESTAMP
(one batch each).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.records.header import BatchHeader
from odradek.records.validation import NO_TIMESTAMP, uncompressed_limit
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.file_region import FileRegion
from odradek.storage.segment import LogSegment
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.storage.log import Log

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-1005: no tiered storage here, so same as earliest


@dataclass
class FetchInfo:
    """Whole batches of a read, as regions of segment files (one per segment touched)."""

    regions: list[FileRegion] = field(default_factory=list)
    size: int = 0
    first_offset: int = -1  # base offset of the first batch returned, -1 when empty

    def read_bytes(self) -> bytes:
        return b"".join(region.read() for region in self.regions)


def read(
    log: Log,
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
    with log._lock:
        info = FetchInfo()
        remaining = max(max_bytes, 0)
        for segment, start, first_header, max_position in _spans(log, offset, max_offset):
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


def readable_bytes(log: Log, offset: int, at_least: int, *, max_offset: int | None = None) -> int:
    """How many bytes of batches lie from the one holding ``offset`` up to ``max_offset``
    (exclusive, as for :func:`read`), counted until ``at_least`` is reached.

    For a delayed fetch's min_bytes: file positions are subtracted, as Kafka's
    DelayedFetch does, and no batch is scanned. (Counting the whole batches a read of
    ``at_least`` bytes would return fell short whenever the next batch did not fit, so a
    fetch with min_bytes above one batch waited out max_wait with the bytes there.)
    Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset].
    """
    with log._lock:
        total = 0
        for _, start, _, max_position in _spans(log, offset, max_offset):
            total += max_position - start
            if total >= at_least:
                break
        return total


def _spans(
    log: Log, offset: int, max_offset: int | None
) -> Iterator[tuple[LogSegment, int, BatchHeader | None, int]]:
    """What a read from ``offset`` below ``max_offset`` covers, segment by segment:
    ``(segment, start position, header of the batch holding offset (first segment
    only), end position)``. The caller holds the log's lock."""
    log._check_open()
    leo = log._log_end_offset
    if offset < log.log_start_offset or offset > leo:
        raise OffsetOutOfRangeError(
            f"offset {offset} is out of range for {log.topic}-{log.partition}: "
            f"log start offset {log.log_start_offset}, log end offset {leo}"
        )
    upper = leo if max_offset is None else min(max_offset, leo)
    if offset >= upper:
        return
    found_first = False
    index = max(bisect.bisect_right(log._bases, offset) - 1, 0)
    for i in range(index, len(log._segments)):
        segment = log._segments[i]
        if segment.base_offset >= upper:
            return
        first_header: BatchHeader | None = None
        if found_first:
            start = 0
        else:
            found = segment.translate_offset(offset)
            if found is None:
                continue  # offset in a gap at the end of this segment
            start, first_header = found
            found_first = True
        segment_end = log._bases[i + 1] if i + 1 < len(log._bases) else leo
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
            return
        yield segment, start, first_header, max_position


def offset_for_timestamp(log: Log, timestamp_ms: int) -> tuple[int, int] | None:
    """ListOffsets: ``(offset, timestamp)`` of the first record with a timestamp >=
    ``timestamp_ms``, or None when there is none.

    Special values: -1 latest (log end offset), -2 earliest (log start offset), -3
    the record with the largest timestamp (KIP-734), -4 earliest local (= earliest).
    """
    with log._lock:
        log._check_open()
        if timestamp_ms in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return log.log_start_offset, NO_TIMESTAMP
        if timestamp_ms == LATEST_TIMESTAMP:
            return log._log_end_offset, NO_TIMESTAMP
        if timestamp_ms == MAX_TIMESTAMP:
            latest: LogSegment | None = None
            for segment in log._segments:
                ts = segment.max_timestamp
                if ts >= 0 and (latest is None or ts > latest.max_timestamp):
                    latest = segment  # the first segment holding the largest
            found = (
                None
                if latest is None
                else latest.find_max_timestamp_record(
                    uncompressed_limit(log.config.max_message_bytes)
                )
            )
            if found is not None and found[0] < log.log_start_offset:
                return log.log_start_offset, found[1]
            return found
        if timestamp_ms < 0:
            raise ValueError(f"unsupported special timestamp {timestamp_ms}")
        for i, segment in enumerate(log._segments):
            if i + 1 < len(log._bases) and log._bases[i + 1] <= log.log_start_offset:
                continue  # wholly below the log start: awaiting deletion
            if segment.max_timestamp < timestamp_ms:
                continue
            found = segment.find_offset_by_timestamp(
                timestamp_ms,
                log.log_start_offset,
                uncompressed_limit(log.config.max_message_bytes),
            )
            if found is not None:
                return found
        return None


def collect_aborted_transactions(log: Log, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start_offset, upper_bound)``, for
    read_committed fetches."""
    with log._lock:
        index = max(bisect.bisect_right(log._bases, start_offset) - 1, 0)
        segments = log._segments[index:]
    found: list[AbortedTxn] = []
    for segment in segments:
        if segment.base_offset >= upper_bound:
            break
        txns, complete = segment.txn_index.collect_until(start_offset, upper_bound)
        found.extend(txns)
        if complete:
            break
    return found
