"""What a cleaning pass covers: the cleanable range of a log, its dirty ratio, and the
groups of segments each rewritten into one new segment.

Kafka's LogToClean (the plan) and Cleaner.groupSegmentsBySize. Nothing here reads
record data: planning looks at segment sizes, index entries and, with a compaction
lag, segment timestamps, so :class:`~odradek.storage.log_cleaner.LogCleaner` can plan
every compacted log of a directory to choose the dirtiest. Steps 1, 2 and 4 of the
algorithm in :mod:`odradek.storage.cleaner` say what the bounds mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from odradek.storage.errors import StorageError

INT32_MAX = 2**31 - 1  # indexes hold offsets relative to the segment base in 4 bytes


def segments_overlapping(segments: Sequence[Any], start: int, end: int) -> list[Any]:
    """Segments holding offsets in ``[start, end)`` (a segment ends where the next begins)."""
    found = []
    for i, segment in enumerate(segments):
        if segment.base_offset >= end:
            break
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if next_base is None or next_base > start:
            found.append(segment)
    return found


@dataclass
class CleanablePlan:
    """Where a log may be cleaned now, and how urgently (Kafka's LogToClean)."""

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool  # max.compaction.lag.ms passed for the first dirty segment

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def plan_cleaning(
    log_: Any, *, now_ms: int, cleaner_offset: int | None, high_watermark: int | None = None
) -> CleanablePlan:
    """Compute the cleanable range and dirty ratio of ``log_`` (nothing is read from disk
    except index entries and, with a compaction lag, segment timestamps)."""
    config = log_.config
    segments = list(log_.segments)
    log_start = log_.log_start_offset
    log_end = log_.log_end_offset
    if cleaner_offset is None or cleaner_offset < log_start or cleaner_offset > log_end:
        first_dirty = log_start
    else:
        first_dirty = cleaner_offset
    active = segments[-1]
    bounds = [active.base_offset]
    first_unstable = log_.first_unstable_offset()
    if first_unstable is not None:
        bounds.append(first_unstable)
    if high_watermark is None:
        high_watermark = getattr(log_, "high_watermark", None)
    if high_watermark is not None:
        bounds.append(high_watermark)
    dirty_non_active = [
        s
        for s in segments_overlapping(segments, first_dirty, active.base_offset)
        if s is not active
    ]
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in dirty_non_active:
            if segment.largest_timestamp() > now_ms - lag:
                bounds.append(segment.base_offset)
                break
    first_uncleanable = max(first_dirty, min(bounds))
    clean_bytes = sum(s.size for s in segments_overlapping(segments, -1, first_dirty))
    dirty_bytes = sum(
        s.size for s in segments_overlapping(segments, first_dirty, first_uncleanable)
    )
    needs_now = False
    max_lag = config.max_compaction_lag_ms
    if dirty_non_active and max_lag < 2**63 - 1:
        first_timestamp = dirty_non_active[0].first_batch_timestamp()
        if first_timestamp is not None and 0 <= first_timestamp < now_ms - max_lag:
            needs_now = True
    return CleanablePlan(first_dirty, first_uncleanable, clean_bytes, dirty_bytes, needs_now)


def group_segments_by_size(
    segments: Sequence[Any], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[Any]]:
    """Split consecutive segments into groups that each fit in one new segment."""

    def index_bytes(segment: Any) -> tuple[int, int]:
        try:
            return (
                segment.offset_index.entries * segment.offset_index.entry_size,
                segment.time_index.entries * segment.time_index.entry_size,
            )
        except StorageError:
            return (0, 0)  # a bad index is rebuilt by the segment; size it as empty

    groups: list[list[Any]] = []
    remaining = list(segments)
    while remaining:
        group = [remaining.pop(0)]
        log_size = group[0].size
        offset_index_size, time_index_size = index_bytes(group[0])
        while remaining:
            candidate = remaining[0]
            candidate_offset, candidate_time = index_bytes(candidate)
            # Last offset the candidate may hold: the next segment's base - 1, or the bound.
            last_offset = (
                remaining[1].base_offset - 1 if len(remaining) > 1 else first_uncleanable - 1
            )
            if (
                log_size + candidate.size > max_size
                or offset_index_size + candidate_offset > max_index_size
                or time_index_size + candidate_time > max_index_size
                or (candidate.size and last_offset - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(remaining.pop(0))
            log_size += candidate.size
            offset_index_size += candidate_offset
            time_index_size += candidate_time
        groups.append(group)
    return groups
