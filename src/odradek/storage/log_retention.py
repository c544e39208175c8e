"""Retention of one partition's log: deleting whole segments by retention.ms,
retention.bytes or the log start offset, moving the log start offset (DeleteRecords),
and the delayed removal of deleted segment files.

Functions of a :class:`~odradek.storage.log.Log`, bound as its
``delete_retained_segments`` and ``maybe_increment_log_start_offset`` methods;
:func:`delete_segments` and :func:`remove_due_deletes` also serve truncation,
compaction's swap and close. Kept apart from log.py because the rules (Kafka's
deletableSegments: oldest first, never past the high watermark, the active segment
only after a roll) are a concept of their own that the appends and reads never touch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.segment import DELETED_SUFFIX, LogSegment

if TYPE_CHECKING:
    from odradek.storage.log import Log


def _retention_bound(log: Log) -> int:
    hw = log.high_watermark
    return log._log_end_offset if hw is None else min(hw, log._log_end_offset)


def delete_retained_segments(log: Log) -> int:
    """Delete the oldest segments beyond retention.ms or retention.bytes (when
    cleanup.policy has delete) or wholly below the log start offset; returns the count.

    Kafka's deletableSegments rule: oldest first while a rule holds, never a segment
    reaching above the high watermark, never an empty active segment. A non-empty
    active segment is deleted too when it breaches retention (a quiet topic past
    retention.ms, or retention.bytes 0): a new empty segment is rolled at the log
    end offset first, as a log always keeps one, and the log start offset becomes
    the log end offset. Files are renamed ``.deleted`` and removed after
    file.delete.delay.ms."""
    with log._lock:
        if log._closed:
            return 0
        now_ms = log._now_ms()
        config = log.config
        bound = _retention_bound(log)
        segments = log._segments
        # The segments any rule may reach: all but an empty active one.
        eligible = len(segments) if segments[-1].size > 0 else len(segments) - 1
        count = 0

        def upper(i: int) -> int:  # the offset segment i ends before
            return log._bases[i + 1] if i + 1 < len(log._bases) else log._log_end_offset

        # Wholly below the log start offset (never the active segment).
        while count < len(segments) - 1 and log._bases[count + 1] <= log.log_start_offset:
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
                log._roll(log._log_end_offset, now_ms)
            doomed = log._segments[:count]
            delete_segments(log, doomed, now_ms)
            del log._segments[:count]
            del log._bases[:count]
            new_start = log._segments[0].base_offset
            if new_start > log.log_start_offset:
                _set_log_start_offset(log, new_start)
        remove_due_deletes(log, now_ms)
        return count


def maybe_increment_log_start_offset(log: Log, new_offset: int) -> None:
    """DeleteRecords: move the log start offset up (never above the high watermark).
    The segments now wholly below it go at the next retention run."""
    with log._lock:
        log._check_open()
        bound = _retention_bound(log)
        if new_offset > bound:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {log.topic}-{log.partition} to "
                f"{new_offset}: above the high watermark {bound}"
            )
        if new_offset > log.log_start_offset:
            _set_log_start_offset(log, new_offset)


def _set_log_start_offset(log: Log, offset: int) -> None:
    log.log_start_offset = offset
    # In memory only (DeleteRecords runs on the event loop): the flush job fsyncs the
    # checkpoint off the lock; the file's older entries below the offset are harmless.
    log.leader_epoch_cache.truncate_from_start(offset, sync=False)
    log.producer_state.on_log_start_offset_incremented(offset)


def delete_segments(log: Log, segments: list[LogSegment], now_ms: int) -> None:
    """Rename to ``.deleted`` now; remove the files after file.delete.delay.ms (the
    caller holds the log's lock and takes the segments out of the log).

    A region already handed out keeps its descriptor, so in-flight reads finish."""
    due = now_ms + log.config.file_delete_delay_ms
    for segment in segments:
        segment.close()
        segment.change_file_suffix(DELETED_SUFFIX)
        log._pending_deletes.append((due, segment))
        if segment in log._rolled_unflushed:
            log._rolled_unflushed.remove(segment)
    log._dir_dirty = True


def remove_due_deletes(log: Log, now_ms: int, *, force: bool = False) -> None:
    """Remove the files of deleted segments whose delay is over (all with ``force``)."""
    keep: list[tuple[int, LogSegment]] = []
    for due, segment in log._pending_deletes:
        if force or due <= now_ms:
            segment.delete_files()
        else:
            keep.append((due, segment))
    log._pending_deletes = keep
