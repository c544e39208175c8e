"""Log compaction (Kafka's LogCleaner) for ``cleanup.policy=compact`` and ``compact,delete``.

A compacted log keeps, for every key, at least the latest record. A cleaning pass over one
partition log:

1. **Cleanable range.** ``[first_dirty, first_uncleanable)``: ``first_dirty`` is the
   partition's entry in ``cleaner-offset-checkpoint`` (reset to the log start when absent
   or out of range). ``first_uncleanable`` is the lowest of the active segment's base
   offset (the active segment is never touched), the first unstable offset (data of an
   open transaction is not yet decided), the high watermark when one is known, and the
   base offset of the first dirty segment holding a record newer than
   ``min.compaction.lag.ms``.
2. **Which log.** The dirty ratio is dirty bytes / (clean + dirty bytes); a log is cleaned
   when it exceeds ``min.cleanable.dirty.ratio``, or when its first dirty segment is older
   than ``max.compaction.lag.ms``. The dirtiest such log goes first.
3. **Offset map.** Key -> latest offset over the dirty range, skipping control batches and
   the data of aborted transactions (found with the transaction indexes), so aborted data
   never hides a committed value. The map is bounded (``max_map_entries``); when full it
   stops at a batch boundary and the pass cleans only up to there.
4. **Rewrite.** Segments from the log start to the end of the map are grouped (at most
   ``segment.bytes`` of data and ``segment.index.bytes`` of index per group, offsets within
   int32 of the base) and each group is rewritten into one new segment, named after the
   group's first base offset with the suffix ``.cleaned``. A record is kept iff it is the
   latest for its key (or lies past the map's end), and, when it is a tombstone (null
   value), its batch's delete horizon has not passed. Records without a key cannot be
   compacted and are dropped, as Kafka does. Offsets are preserved: a batch that loses
   records is re-encoded with :func:`odradek.records.batch.rebuild_batch`, which keeps its
   base offset, last offset delta, producer id/epoch/base sequence, attributes and codec;
   a batch that loses nothing is copied byte for byte.
5. **Swap.** The cleaned segment is flushed and handed to ``Log.replace_segments``, which
   renames it ``.cleaned`` -> ``.swap``, retires the old segments (renamed ``.deleted``)
   and drops the ``.swap`` suffix, all under the log's lock. Recovery of the log directory
   (storage-core) deletes leftover ``.cleaned`` files and completes leftover ``.swap``
   files, so a crash at any step leaves either the old or the new segments. A group that
   loses every record is swapped in as an empty segment, as Kafka's cleaner does; reads
   pass over it to the next segment.

**Tombstones: KIP-534 delete horizons** (Kafka >= 3.1), not segment modification times
as older Kafka did. The first time a batch holding a tombstone (or a marker that no longer
guards any data) is rewritten, its delete horizon ``now + delete.retention.ms`` is stored
in the batch's baseTimestamp and attribute bit 6 is set. A later pass drops tombstones
(and such markers) once ``now`` reaches that horizon. So a tombstone always survives at
least one more cleaning and at least ``delete.retention.ms`` after it was first cleaned,
giving consumers time to see the deletion; and the horizon travels with the batch instead
of depending on file timestamps, which copies and restores change.

**Transactions.** Data batches of aborted transactions are removed. A COMMIT marker is
kept while any data of its transaction remains in the cleaned range; an ABORT marker is
kept (with its entry in the new segment's ``.txnindex``) until a pass finds no more data
of its transaction. A marker that guards nothing gets a delete horizon and is removed
when it passes. The last batch of every active producer is kept, emptied of records if
need be, so its sequence number and epoch survive compaction (idempotence keeps working),
as is the last batch of the cleaned range so that the log keeps its offsets.

**Modules**, each importing only those listed after it: :mod:`~odradek.storage.log_cleaner`
(the background threads, choosing the log, checkpoints, pausing); this one
(:func:`clean_log`, one pass: steps 3 to 5); :mod:`~odradek.storage.cleaner_filter`
(which records and batches survive); :mod:`~odradek.storage.offset_map` (step 3);
:mod:`~odradek.storage.cleaner_plan` (steps 1, 2 and the grouping of step 4);
:mod:`~odradek.storage.cleaner_txn` (transaction bookkeeping);
:mod:`~odradek.storage.cleaner_read` (reading a segment's batches, and
:class:`~odradek.storage.cleaner_read.CleaningAbortedError`);
:mod:`~odradek.storage.cleaner_result` (what a pass did).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from odradek.records.header import parse_header
from odradek.records.validation import uncompressed_limit
from odradek.storage.cleaner_filter import FilterContext, filter_batch
from odradek.storage.cleaner_plan import CleanablePlan, group_segments_by_size, plan_cleaning
from odradek.storage.cleaner_read import CleaningAbortedError, iter_segment_batches
from odradek.storage.cleaner_result import CleanResult
from odradek.storage.cleaner_txn import CleanedTransactionMetadata
from odradek.storage.offset_map import OffsetMap, build_offset_map
from odradek.storage.segment import CLEANED_SUFFIX

DEFAULT_IO_BUFFER_SIZE = 1024 * 1024  # log.cleaner.io.buffer.size is 512 KiB per buffer
DEFAULT_MAX_MAP_ENTRIES = 1_000_000  # stands in for log.cleaner.dedupe.buffer.size


def _clean_group(
    log_: Any,
    group: Sequence[Any],
    ctx: FilterContext,
    *,
    io_buffer_size: int,
    check_done: Callable[[], None],
    segment_factory: Callable[[Any, int], Any],
) -> None:
    result = ctx.result
    sizes = [segment.size for segment in group]
    cleaned = segment_factory(log_, group[0].base_offset)
    try:
        pending = bytearray()
        entries: list[tuple[int, int, int, int, int]] = []

        def write_pending() -> None:
            if pending:
                cleaned.append(bytes(pending), entries)
                result.bytes_written += len(pending)
                pending.clear()
                entries.clear()

        for i, segment in enumerate(group):
            upper = group[i + 1].base_offset if i + 1 < len(group) else segment.read_next_offset()
            ctx.txns.add_aborted_transactions(
                log_.collect_aborted_transactions(segment.base_offset, upper)
            )
            for pos, data in iter_segment_batches(segment, io_buffer_size):
                check_done()
                result.bytes_read += len(data)
                out, retained = filter_batch(ctx, segment, pos, data)
                if out is None:
                    continue
                result.records_retained += retained
                header = parse_header(out)
                entries.append(
                    (
                        len(pending),
                        len(out),
                        header.base_offset,
                        header.last_offset,
                        header.max_timestamp,
                    )
                )
                pending += out
                if len(pending) >= io_buffer_size:
                    write_pending()
            # Aborted transactions whose marker survived go to the new txn index in order.
            for txn in ctx.txns.retained_aborted:
                cleaned.txn_index.append(txn)
            ctx.txns.retained_aborted.clear()
        write_pending()
        cleaned.on_become_inactive()
        cleaned.flush()
        # Keep the newest old segment's mtime: time retention falls back to it.
        mtime = os.stat(group[-1].log_path).st_mtime_ns
        os.utime(cleaned.log_path, ns=(mtime, mtime))
        check_done()
        if [segment.size for segment in group] != sizes:
            # Truncated under us (a follower diverged): the copy would resurrect data.
            raise CleaningAbortedError("segments changed while they were being cleaned")
        try:
            log_.replace_segments(cleaned, list(group))
        except ValueError as exc:  # segments deleted, truncated or made active meanwhile
            raise CleaningAbortedError(f"cannot swap in the cleaned segment: {exc}") from None
    except BaseException:
        cleaned.delete_files()
        raise
    result.segments_cleaned += len(group)
    result.segments_written += 1


def _create_cleaned_segment(log_: Any, base_offset: int) -> Any:
    from odradek.storage.segment import LogSegment

    # A leftover from a crashed pass that recovery has not removed yet would block the
    # exclusive create; it is never live data (only .swap files are).
    for name in os.listdir(log_.directory):
        if name.startswith(f"{base_offset:020d}.") and name.endswith(CLEANED_SUFFIX):
            (Path(log_.directory) / name).unlink(missing_ok=True)
    return LogSegment.create(
        log_.directory,
        base_offset,
        log_.config,
        now_ms=int(time.time() * 1000),
        file_suffix=CLEANED_SUFFIX,
    )


def clean_log(
    log_: Any,
    *,
    now_ms: int,
    cleaner_offset: int | None,
    high_watermark: int | None = None,
    max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
    io_buffer_size: int = DEFAULT_IO_BUFFER_SIZE,
    check_done: Callable[[], None] | None = None,
    plan: CleanablePlan | None = None,
    segment_factory: Callable[[Any, int], Any] = _create_cleaned_segment,
    revisit_clean_section: bool = False,
) -> CleanResult:
    """Compact ``log_`` once, whatever its dirty ratio; returns what was done.

    ``cleaner_offset`` is the partition's cleaner checkpoint (None when it has none);
    the result's ``end_offset`` is the next one. ``check_done`` is called between
    batches and may raise CleaningAbortedError to stop; the log is then unchanged.
    Raises CorruptLogError if a segment holds a batch that cannot be decoded.
    """
    started = time.monotonic()
    check = check_done or (lambda: None)
    if plan is None:
        plan = plan_cleaning(
            log_, now_ms=now_ms, cleaner_offset=cleaner_offset, high_watermark=high_watermark
        )
    result = CleanResult(log_.topic, log_.partition, plan.first_dirty, plan.first_dirty)
    segments = list(log_.segments)
    offset_map = OffsetMap(max_map_entries)
    if plan.first_uncleanable <= plan.first_dirty:
        if not revisit_clean_section or plan.first_dirty <= log_.log_start_offset:
            result.elapsed_s = time.monotonic() - started
            return result
        # Nothing is dirty, but tombstones in the clean section may have passed their
        # delete horizon (KIP-534): rewrite the clean section with an empty key map, which
        # keeps every keyed value and drops only what has expired.
        offset_map.update_latest_offset(plan.first_dirty - 1)
    else:
        build_offset_map(
            log_,
            segments,
            plan.first_dirty,
            plan.first_uncleanable,
            offset_map,
            io_buffer_size=io_buffer_size,
            check_done=check,
        )
    end_offset = offset_map.latest_offset + 1
    if end_offset <= plan.first_dirty and not revisit_clean_section:
        result.elapsed_s = time.monotonic() - started
        return result  # not even one batch fitted in the map
    producers = log_.producer_state.active_producers()
    ctx = FilterContext(
        offset_map=offset_map,
        txns=CleanedTransactionMetadata(),
        now_ms=now_ms,
        delete_retention_ms=log_.config.delete_retention_ms,
        last_batches={pid: (e.last_data_offset, e.producer_epoch) for pid, e in producers.items()},
        upper_bound=max(plan.first_uncleanable, end_offset),
        result=result,
        max_uncompressed=uncompressed_limit(log_.config.max_message_bytes),
    )
    to_clean = [s for s in segments if s.base_offset < end_offset and s is not segments[-1]]
    groups = group_segments_by_size(
        to_clean,
        log_.config.segment_bytes,
        log_.config.segment_index_bytes,
        plan.first_uncleanable,
    )
    for group in groups:
        _clean_group(
            log_,
            group,
            ctx,
            io_buffer_size=io_buffer_size,
            check_done=check,
            segment_factory=segment_factory,
        )
    result.end_offset = end_offset
    result.elapsed_s = time.monotonic() - started
    return result
