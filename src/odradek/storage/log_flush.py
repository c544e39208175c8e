"""Durability of one partition's log: the flush that fsyncs segments and advances the
recovery point, and the flush.messages / flush.ms policy that decides when it runs.

Functions of a :class:`~odradek.storage.log.Log`, bound as its ``flush`` and
``maybe_flush`` methods. Kept apart from log.py because they are the one place where
the log's lock is released in the middle of an operation: the bookkeeping runs under
it, the fsyncs outside it (an append never waits for the disk), and the order of the
two is what the recovery after a crash relies on (the leader-epoch checkpoint is synced
before the recovery point passes the data it covers).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.storage import flush_stats
from odradek.storage.checkpoint import fsync_dir

if TYPE_CHECKING:
    from odradek.storage.log import Log


def flush(log: Log, up_to: int | None = None) -> None:
    """fsync every segment holding offsets below ``up_to`` (default: the log end
    offset) and advance the recovery point to it. The fsyncs run outside the log's
    lock: call this from a thread, appends carry on meanwhile."""
    with log._lock:
        if log._closed:
            return
        if log._metadata_pending:
            log._write_pending_metadata_locked()
        if log._created_unsynced:
            if log._log_end_offset == 0 and log.log_start_offset == 0:
                log._last_flush_ms = log._now_ms()
                return  # lost in a crash, the empty log is created again on hosting
            log._created_unsynced = False
        target = log._log_end_offset if up_to is None else min(up_to, log._log_end_offset)
        index = max(bisect.bisect_right(log._bases, log.recovery_point) - 1, 0)
        segments = [s for s in log._segments[index:] if s.base_offset < target]
        if target <= log.recovery_point:
            segments = []
        rolled = [s for s in log._rolled_unflushed if s.base_offset < target]
        for segment in rolled:
            if segment not in segments:
                segments.insert(0, segment)
        dir_dirty, log._dir_dirty = log._dir_dirty, False
        metadata_unsynced, log._metadata_unsynced = log._metadata_unsynced, False
    started = time.monotonic()
    for segment in segments:
        segment.flush()
    try:
        if metadata_unsynced:
            _fsync_file(log._partition_metadata.path)
        if dir_dirty:
            fsync_dir(log.directory)
    except FileNotFoundError:
        return  # the log was deleted meanwhile
    if log._log_end_offset > log.log_start_offset:
        # Entries appended without fsync become durable before the recovery point
        # passes their data: recovery trusts the checkpoint below it (see
        # log_loader.recover). An empty log's entries need none (nothing an epoch
        # could be asked about).
        try:
            log.leader_epoch_cache.sync()
        except FileNotFoundError:
            return  # the log was deleted meanwhile
    if flush_stats.observer is not None and (segments or dir_dirty):
        flush_stats.observer(time.monotonic() - started)
    with log._lock:
        log._rolled_unflushed = [s for s in log._rolled_unflushed if s not in rolled]
        log.recovery_point = max(log.recovery_point, min(target, log._log_end_offset))
        log._last_flush_ms = log._now_ms()


def maybe_flush(log: Log) -> bool:
    """Flush if flush.messages or flush.ms says so, or a rolled segment awaits its
    fsync (Kafka flushes a segment when it is rolled). True if anything was flushed."""
    with log._lock:
        if log._closed:
            return False
        unflushed = log._log_end_offset - log.recovery_point
        due = unflushed > 0 and (
            unflushed >= log.config.flush_messages
            or log._now_ms() - log._last_flush_ms >= log.config.flush_ms
        )
        up_to = None if due else log._segments[-1].base_offset
        idle = not due and not log._rolled_unflushed
        has_data = log._log_end_offset > log.log_start_offset
    if idle:
        cache = log.leader_epoch_cache
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
    log.flush(up_to)
    return True


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
