"""Truncation of one partition's log: cutting its end (a follower that diverged from
its leader, found by OffsetForLeaderEpoch) or restarting it empty at an offset (a
follower starting over, a replica fetching from a leader whose log starts later).

Functions of a :class:`~odradek.storage.log.Log`, bound as its ``truncate_to`` and
``truncate_fully_and_start_at`` methods. Kept apart from log.py because truncation is
the replication side's change to a log: it moves the log end offset back, which the
appends never do, and takes the segments, indexes, leader-epoch cache and producer
state back with it.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from odradek.storage.log_loader import replay_producer_state
from odradek.storage.log_retention import delete_segments
from odradek.storage.segment import LogSegment

if TYPE_CHECKING:
    from odradek.storage.log import Log


def truncate_to(log: Log, offset: int) -> None:
    """Remove everything at or after ``offset`` (a follower diverged from its leader).

    A batch containing ``offset`` is removed whole; the log end offset becomes
    ``offset`` or that batch's base offset if lower. Indexes, leader epoch cache
    and producer state follow.
    """
    if offset < 0:
        raise ValueError(f"cannot truncate to negative offset {offset}")
    with log._lock:
        log._check_open()
        if offset >= log._log_end_offset:
            return
        if offset < log.log_start_offset or offset <= log._segments[0].base_offset:
            log.truncate_fully_and_start_at(offset)
            return
        now_ms = log._now_ms()
        first_removed = bisect.bisect_left(log._bases, offset)
        if first_removed < len(log._segments):
            delete_segments(log, log._segments[first_removed:], now_ms)
            del log._segments[first_removed:]
            del log._bases[first_removed:]
        active = log._segments[-1]
        cut = active.truncate_to(offset, now_ms)
        new_end = offset if cut is None else min(offset, cut)
        log._log_end_offset = new_end
        log.recovery_point = min(log.recovery_point, new_end)
        log._dir_dirty = True
        log.leader_epoch_cache.truncate_from_end(new_end)
        log.producer_state.truncate_and_reload(log.log_start_offset, new_end)
        replay_producer_state(log, new_end)


def truncate_fully_and_start_at(log: Log, offset: int) -> None:
    """Drop every segment and restart the (empty) log at ``offset``."""
    if offset < 0:
        raise ValueError(f"cannot restart a log at negative offset {offset}")
    with log._lock:
        log._check_open()
        now_ms = log._now_ms()
        delete_segments(log, list(log._segments), now_ms)
        log._segments = []
        log._bases = []
        log._add_segment(LogSegment.create(log.directory, offset, log.config,
                                           now_ms=now_ms))  # fmt: skip
        log._log_end_offset = offset
        log.log_start_offset = offset
        log.recovery_point = offset
        log.leader_epoch_cache.clear()
        log.producer_state.truncate_fully_and_start_at(offset)
