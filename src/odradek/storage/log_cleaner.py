"""The background log cleaner: which log to clean next, in threads, and where each
partition's cleaning got to.

Kafka's LogCleaner with its CleanerThreads and LogCleanerManager, in one class: the
threads pick the dirtiest compacted log (or one whose delete horizon passed), run
:func:`odradek.storage.cleaner.clean_log` on it, and store the pass's end offset in
``cleaner-offset-checkpoint``. Truncation and deletion pause a partition's cleaning
(:meth:`LogCleaner.abort_and_pause`) so they never race a pass; a pass that fails is
not retried: the partition is marked uncleanable, as Kafka does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from odradek.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT
from odradek.storage.cleaner import DEFAULT_IO_BUFFER_SIZE, DEFAULT_MAX_MAP_ENTRIES, clean_log
from odradek.storage.cleaner_plan import CleanablePlan, plan_cleaning
from odradek.storage.cleaner_read import CleaningAbortedError
from odradek.storage.cleaner_result import CleanResult
from odradek.storage.errors import StorageError

# The cleaner's messages kept the logger they had before compaction was split into
# modules, so a logging configuration that names it still sees all of them.
log = logging.getLogger("odradek.storage.cleaner")

DEFAULT_BACKOFF_MS = 15_000  # log.cleaner.backoff.ms


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
