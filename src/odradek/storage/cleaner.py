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
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from odradek.records.header import parse_header
from odradek.records.validation import uncompressed_limit
from odradek.storage.cleaner_filter import FilterContext, filter_batch
from odradek.storage.cleaner_plan import CleanablePlan, group_segments_by_size, plan_cleaning
from odradek.storage.cleaner_read import CleaningAbortedError, iter_segment_batches
from odradek.storage.cleaner_result import CleanResult
from odradek.storage.cleaner_txn import CleanedTransactionMetadata
from odradek.storage.errors import StorageError
from odradek.storage.offset_map import OffsetMap, build_offset_map

log = logging.getLogger(__name__)

DEFAULT_IO_BUFFER_SIZE = 1024 * 1024  # log.cleaner.io.buffer.size is 512 KiB per buffer
DEFAULT_MAX_MAP_ENTRIES = 1_000_000  # stands in for log.cleaner.dedupe.buffer.size
DEFAULT_BACKOFF_MS = 15_000  # log.cleaner.backoff.ms

CLEANED_SUFFIX = ".cleaned"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


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
            result=result,
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


# -- the background cleaner ---------------------------------------------------------------


def _is_compacted(log_: Any) -> bool:
    return bool(getattr(log_.config, "compact", False))


class LogCleaner:
    """Runs :func:`clean_log` over the compacted logs of a log directory, in threads.

    ``log_manager_or_logs_provider`` is a LogManager (its ``all_logs()`` and ``data_dir``
    are used; the checkpoint lives in ``<data_dir>/cleaner-offset-checkpoint``) or a
    callable returning the logs (then give ``checkpoint_path`` to persist checkpoints).
    ``high_watermark(topic, partition)`` may bound cleaning below the high watermark, as
    Kafka does; None means the log end / LSO bound only.
    """

    def __init__(
        self,
        log_manager_or_logs_provider: Any,
        *,
        threads: int = 1,
        clock: Callable[[], float] = time.time,
        io_buffer_size: int = DEFAULT_IO_BUFFER_SIZE,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
        backoff_ms: int = DEFAULT_BACKOFF_MS,
        checkpoint_path: Path | None = None,
        high_watermark: Callable[[str, int], int | None] | None = None,
    ) -> None:
        from odradek.storage.checkpoint import OffsetCheckpointFile

        source = log_manager_or_logs_provider
        if hasattr(source, "all_logs"):
            self._logs: Callable[[], Iterable[Any]] = source.all_logs
            if checkpoint_path is None:
                checkpoint_path = Path(source.data_dir) / CLEANER_OFFSET_CHECKPOINT
        elif callable(source):
            self._logs = source
        else:
            raise TypeError("LogCleaner needs a LogManager or a callable returning logs")
        if threads < 1:
            raise ValueError("log.cleaner.threads must be at least 1")
        self.threads = threads
        self._clock = clock
        self.io_buffer_size = io_buffer_size
        self.max_map_entries = max_map_entries
        self.backoff_ms = backoff_ms
        self._high_watermark = high_watermark
        self._checkpoint_file = (
            OffsetCheckpointFile(checkpoint_path) if checkpoint_path is not None else None
        )
        self._lock = threading.Condition()
        self._checkpoints: dict[tuple[str, int], int] = {}
        if self._checkpoint_file is not None:
            try:
                self._checkpoints = dict(self._checkpoint_file.read())
            except StorageError as exc:
                log.warning("ignoring unreadable cleaner checkpoint: %s", exc)
        self._in_progress: set[tuple[str, int]] = set()
        self._paused: dict[tuple[str, int], int] = {}  # pause depth
        self._aborting: set[tuple[str, int]] = set()
        self.uncleanable: set[tuple[str, int]] = set()
        # (topic, partition) -> earliest delete horizon left by its last pass (in memory:
        # after a restart the next dirty pass finds them again).
        self._horizons: dict[tuple[str, int], int] = {}
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    # -- checkpoints -------------------------------------------------------------------

    def checkpoint_offset(self, topic: str, partition: int) -> int | None:
        with self._lock:
            return self._checkpoints.get((topic, partition))

    def checkpoints(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self._checkpoints)

    def _write_checkpoints(self) -> None:
        if self._checkpoint_file is not None:
            self._checkpoint_file.write(self._checkpoints)

    def truncate_checkpoint(self, topic: str, partition: int, offset: int) -> None:
        """The log was truncated to ``offset``: the checkpoint may not stay above it."""
        with self._lock:
            key = (topic, partition)
            if key in self._checkpoints and self._checkpoints[key] > offset:
                self._checkpoints[key] = offset
                self._write_checkpoints()

    def remove_partition(self, topic: str, partition: int) -> None:
        """The log was deleted: forget its checkpoint."""
        with self._lock:
            if self._checkpoints.pop((topic, partition), None) is not None:
                self._write_checkpoints()
            self.uncleanable.discard((topic, partition))
            self._horizons.pop((topic, partition), None)

    # -- pausing (truncation and deletion must not race a pass) --------------------------

    def abort_and_pause(self, topic: str, partition: int, timeout_s: float = 60.0) -> None:
        """Stop any pass over the partition and keep it paused until :meth:`resume`."""
        key = (topic, partition)
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._paused[key] = self._paused.get(key, 0) + 1
            if key in self._in_progress:
                self._aborting.add(key)
            while key in self._in_progress:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StorageError(f"cleaning of {topic}-{partition} did not stop in time")
                self._lock.wait(remaining)

    def resume(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        with self._lock:
            depth = self._paused.get(key, 0) - 1
            if depth > 0:
                self._paused[key] = depth
            else:
                self._paused.pop(key, None)

    # -- one pass ----------------------------------------------------------------------

    def _grab_filthiest(self, now_ms: int) -> tuple[Any, CleanablePlan, bool] | None:
        candidates = []
        expired_horizons = []
        for log_ in self._logs():
            if not _is_compacted(log_):
                continue
            key = (log_.topic, log_.partition)
            with self._lock:
                if key in self._in_progress or key in self._paused or key in self.uncleanable:
                    continue
                checkpoint = self._checkpoints.get(key)
            try:
                plan = plan_cleaning(
                    log_,
                    now_ms=now_ms,
                    cleaner_offset=checkpoint,
                    high_watermark=self._bound_for(log_),
                )
            except StorageError as exc:
                log.warning("cannot plan cleaning of %s-%s: %s", log_.topic, log_.partition, exc)
                continue
            ratio_ok = plan.dirty_ratio > log_.config.min_cleanable_dirty_ratio
            if plan.dirty_bytes > 0 and (ratio_ok or plan.needs_compaction_now):
                candidates.append((plan.needs_compaction_now, plan.dirty_ratio, log_, plan))
            else:
                with self._lock:
                    horizon = self._horizons.get(key)
                if horizon is not None and horizon <= now_ms:
                    expired_horizons.append((log_, plan))
        candidates.sort(key=lambda c: (c[0], c[1]), reverse=True)
        ordered = [(log_, plan, False) for _, _, log_, plan in candidates]
        ordered += [(log_, plan, True) for log_, plan in expired_horizons]
        with self._lock:
            for log_, plan, revisit in ordered:
                key = (log_.topic, log_.partition)
                if key not in self._in_progress and key not in self._paused:
                    self._in_progress.add(key)
                    return log_, plan, revisit
        return None

    def _bound_for(self, log_: Any) -> int | None:
        if self._high_watermark is None:
            return None
        return self._high_watermark(log_.topic, log_.partition)

    def clean_once(self) -> list[CleanResult]:
        """Clean the dirtiest eligible log, if any; returns what was cleaned."""
        now_ms = int(self._clock() * 1000)
        grabbed = self._grab_filthiest(now_ms)
        if grabbed is None:
            return []
        log_, plan, revisit = grabbed
        key = (log_.topic, log_.partition)

        def check_done() -> None:
            if key in self._aborting or self._stop.is_set():
                raise CleaningAbortedError(f"cleaning of {key[0]}-{key[1]} aborted")

        try:
            result = clean_log(
                log_,
                now_ms=now_ms,
                cleaner_offset=plan.first_dirty,
                plan=plan,
                max_map_entries=self.max_map_entries,
                io_buffer_size=self.io_buffer_size,
                check_done=check_done,
                revisit_clean_section=revisit,
            )
        except CleaningAbortedError as exc:
            log.info("%s", exc)
            return []
        except (StorageError, OSError) as exc:
            if getattr(log_, "closed", False):
                log.info("%s-%s was closed or deleted while being cleaned", *key)
                return []
            # Kafka marks such a partition uncleanable rather than retrying it forever.
            log.error("cleaning %s-%s failed; marking it uncleanable: %s", *key, exc)
            with self._lock:
                self.uncleanable.add(key)
            return []
        finally:
            with self._lock:
                self._in_progress.discard(key)
                self._aborting.discard(key)
                self._lock.notify_all()
        with self._lock:
            self._checkpoints[key] = result.end_offset
            self._write_checkpoints()
            if result.earliest_delete_horizon_ms is None:
                self._horizons.pop(key, None)
            else:
                self._horizons[key] = result.earliest_delete_horizon_ms
        log.info(
            "cleaned %s-%s [%d, %d): %d segments -> %d, %d -> %d bytes in %.3fs",
            result.topic,
            result.partition,
            result.first_dirty_offset,
            result.end_offset,
            result.segments_cleaned,
            result.segments_written,
            result.bytes_read,
            result.bytes_written,
            result.elapsed_s,
        )
        return [result]

    # -- threads -----------------------------------------------------------------------

    def start(self) -> None:
        if self._workers:
            return
        self._stop.clear()
        for n in range(self.threads):
            worker = threading.Thread(
                target=self._run, name=f"odradek-log-cleaner-{n}", daemon=True
            )
            self._workers.append(worker)
            worker.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_once()
            except Exception:  # a bug must not kill the thread silently
                log.exception("log cleaner pass failed")
                cleaned = []
            if not cleaned:
                self._stop.wait(self.backoff_ms / 1000)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the threads (a pass in progress is aborted at its next batch)."""
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout_s)
        self._workers = []
