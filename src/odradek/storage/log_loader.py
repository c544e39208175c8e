"""Opening a partition directory (Kafka's LogLoader): its name, the files an
interrupted operation left, the segments, the recovery of what follows the recovery
point, and the leader-epoch cache and producer state brought in line with the log.

Partition directory ``<data dir>/<topic>-<partition>/``::

    00000000000000000000.log / .index / .timeindex / .txnindex    segment files
    00000000000000368769.log / ...                                 (see segment.py)
    00000000000000368769.snapshot      producer state as of that offset (producer_state.py)
    leader-epoch-checkpoint            epoch -> start offset (leader_epoch.py)
    partition.metadata                 topic id (partition_metadata.py)

:func:`load` runs once, from ``Log.open``, under the log's lock; it sets the log's
segments and offsets. :func:`replay_producer_state` also serves truncation. Kept apart
from log.py because it is the crash-safety half of the log: it runs before the log
serves anything, and what it trusts (a clean shutdown's segment sizes, the epoch
checkpoint below the recovery point) is reasoned about on its own.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.records.header import BatchHeader
from odradek.storage.config import LogConfig
from odradek.storage.errors import CorruptIndexError, StorageError
from odradek.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
)
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.storage.log import Log

logger = logging.getLogger(__name__)

_INDEX_SUFFIXES = frozenset((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))
_SWAP_LOG_SUFFIX = LOG_SUFFIX + SWAP_SUFFIX
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``orders-3`` -> ``("orders", 3)``; ValueError if the name is not ``<topic>-<n>``."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        raise ValueError(f"{name!r} is not a partition directory name (<topic>-<partition>)")
    return topic, int(number)


def load(
    log: Log,
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
    segment_sizes: Sequence[tuple[int, int]] | None,
) -> None:
    """Set up ``log`` from its directory (see ``Log.open`` for what is trusted when)."""
    if log._epoch_cache_lost:
        recovery_point, clean_shutdown = 0, False
    now_ms = log._now_ms()
    log._last_flush_ms = now_ms
    listing, log._listing = log._listing, None
    bases = clean_directory(log.directory, log.config, now_ms, listing)
    log._segments = [
        LogSegment.open(log.directory, base, log.config, now_ms=now_ms) for base in bases
    ]
    log._bases = list(bases)
    if clean_shutdown and log._segments:
        changed = changed_since_shutdown(log._segments, segment_sizes)
        if changed is not None:
            # As in Kafka, a clean shutdown lets recovery be skipped only while the
            # log is as the shutdown left it, checked here against the sizes it
            # recorded. Otherwise recover, or the log end offset would point past a
            # torn batch: appends acknowledged after it could not be read, and a
            # later crash recovery would cut them off.
            offset, reason = changed
            logger.warning(
                "%s: not trusting the clean shutdown: %s; recovering from offset %d",
                log.directory.name, reason, offset,
            )  # fmt: skip
            clean_shutdown = False
            recovery_point = min(recovery_point, offset)
    if not log._segments:
        # A new log never written (its .log is made on first use, see create_new), or
        # one whose files were lost: an empty segment, again without a file yet, so a
        # restart with 10,000 idle partitions creates no file.
        start = max(log_start_offset, 0)
        log._add_segment(
            LogSegment.create(log.directory, start, log.config, now_ms=now_ms,
                              keep_open=False)
        )  # fmt: skip
        log._created_unsynced = True
        log._log_end_offset = start
        recover_from = start
    elif clean_shutdown and trust_recovery_point(log._segments[-1], recovery_point):
        log._log_end_offset = recovery_point
        recover_from = recovery_point
    elif clean_shutdown:
        log._log_end_offset = log._segments[-1].read_next_offset()
        recover_from = log._log_end_offset
    else:
        recover_from = recover(log, recovery_point)
    leo = log._log_end_offset
    log.log_start_offset = min(max(log_start_offset, log._segments[0].base_offset), leo)
    log.recovery_point = min(recovery_point, leo) if not clean_shutdown else leo
    _truncate_epochs(log, leo, log.log_start_offset)
    # The listing is current unless recovery changed the directory.
    log.producer_state.load(log.log_start_offset, leo, listing if clean_shutdown else None)
    if log.producer_state.map_end_offset > recover_from:
        # Crash: the transaction index of recovered segments may miss aborts, so the
        # producer state must be replayed over them from a snapshot at or below.
        log.producer_state.truncate_and_reload(log.log_start_offset, recover_from)
    replay_producer_state(log, recover_from)


def _truncate_epochs(log: Log, end_offset: int, start_offset: int) -> None:
    """Drop epoch entries outside the loaded log; only when some are (each change fsyncs)."""
    cache = log.leader_epoch_cache
    latest = cache.latest_entry()
    if latest is not None and latest[1] >= end_offset:
        cache.truncate_from_end(end_offset)
    earliest = cache.earliest_entry()
    if earliest is not None and earliest[1] < start_offset:
        cache.truncate_from_start(start_offset)


def clean_directory(
    directory: Path, config: LogConfig, now_ms: int, listing: list[str] | None = None
) -> list[int]:
    """Finish or undo interrupted operations; return the segment base offsets.

    Runs on every open, once per file of the directory: kept to string slicing."""
    path = str(directory)
    logs: set[int] = set()
    swaps: list[int] = []
    indexes: list[tuple[int, str]] = []
    for name in os.listdir(path) if listing is None else listing:
        stem = name[:20]
        if len(name) <= 20 or name[20] != "." or not stem.isdigit():
            continue  # not a segment file (checkpoints, partition.metadata, ...)
        suffix = name[20:]
        if suffix == LOG_SUFFIX:
            logs.add(int(stem))
        elif suffix in _INDEX_SUFFIXES:
            indexes.append((int(stem), name))
        elif suffix == _SWAP_LOG_SUFFIX:
            swaps.append(int(stem))
        elif suffix.endswith(_LEFTOVER_SUFFIXES):
            # A deletion that was pending, a compaction that never reached .swap, or
            # a temporary file of an interrupted atomic write.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(path, name))
    for base in sorted(swaps):
        _complete_swap(directory, config, base, logs, now_ms)
    for base, name in indexes:
        if base not in logs:
            (directory / name).unlink(missing_ok=True)  # orphan of a deleted log
    return sorted(logs)


def _complete_swap(
    directory: Path, config: LogConfig, base: int, logs: set[int], now_ms: int
) -> None:
    """A compaction result was ready: replace the segments it covers (crash-safe redo)."""
    swap = LogSegment.open(directory, base, config, now_ms=now_ms,
                           file_suffix=SWAP_SUFFIX)  # fmt: skip
    # Its indexes are rebuilt from the data; the txn index is kept.
    swap.offset_index.delete()
    swap.time_index.delete()
    swap.recover()
    next_offset = swap.read_next_offset()
    for old in sorted(logs):
        if base <= old < max(next_offset, base + 1):
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                (directory / f"{old:020d}{suffix}").unlink(missing_ok=True)
            logs.discard(old)
    swap.change_file_suffix("")
    swap.close()
    logs.add(base)


def changed_since_shutdown(
    segments: list[LogSegment], recorded: Sequence[tuple[int, int]] | None
) -> tuple[int, str] | None:
    """``(offset to recover from, why)`` if the segment files are not exactly the
    ``(base offset, size)`` list recorded at the clean shutdown; None if they are.

    Costs one stat per segment and reads no data."""
    if recorded is None:
        return segments[-1].base_offset, "no segment sizes recorded at shutdown"
    for i, segment in enumerate(segments):
        if i >= len(recorded) or recorded[i][0] != segment.base_offset:
            name = segment.log_path.name
            return segment.base_offset, f"segment files differ from {name} on"
        size, expected = segment.size, recorded[i][1]
        if size != expected:
            name = segment.log_path.name
            return segment.base_offset, f"{name} is {size} bytes, {expected} at shutdown"
    if len(recorded) > len(segments):
        name = segments[-1].log_path.name
        return segments[-1].base_offset, f"segment files after {name} are missing"
    return None


def trust_recovery_point(active: LogSegment, recovery_point: int) -> bool:
    """After a clean shutdown the recovery point is the log end offset; check it
    against what costs no log read (the active segment's base, size and last index
    entry) before trusting it."""
    if recovery_point < active.base_offset:
        return False
    if recovery_point == active.base_offset:
        return active.size == 0
    try:
        active.offset_index.sanity_check()
        if active.offset_index.last_offset >= recovery_point:
            return False
    except CorruptIndexError:
        return False
    return active.size > 0


def recover(log: Log, recovery_point: int) -> int:
    """Validate everything from the recovery point on; return where that started."""
    start = max(bisect.bisect_right(log._bases, recovery_point) - 1, 0)
    recover_from = max(recovery_point, log._segments[start].base_offset)
    cache = log.leader_epoch_cache

    def on_batch(header: BatchHeader, _batch: memoryview) -> None:
        epoch = header.partition_leader_epoch
        latest = cache.latest_epoch()
        if epoch >= 0 and (latest is None or epoch > latest):
            cache.assign(epoch, header.base_offset, sync=False)  # synced by a flush

    cache.truncate_from_end(recover_from)
    check_epochs_below(log, recover_from)
    index = start
    to_recover = len(log._segments) - start
    while index < len(log._segments):
        segment = log._segments[index]
        # Kafka's LogLoader line: a big log's recovery shows which segment it is on.
        logger.info(
            "Recovering unflushed segment %d. %d/%d recovered for %s.",
            segment.base_offset, index - start, to_recover, log.directory.name,
        )  # fmt: skip
        log.segments_recovered += 1
        truncated = segment.recover(
            on_batch, from_offset=recover_from if index == start else None
        )
        try:
            segment.txn_index.truncate_to(segment.read_next_offset())
        except CorruptIndexError as exc:
            logger.warning("%s: %s; rebuilding it", log.directory.name, exc)
            segment.reset_txn_index()
        if truncated:
            logger.warning(
                "%s: truncated %d invalid bytes at the end of %s",
                log.directory.name, truncated, segment.log_path.name,
            )  # fmt: skip
            for later in log._segments[index + 1 :]:
                later.delete_files()
            del log._segments[index + 1 :]
            del log._bases[index + 1 :]
            break
        index += 1
    # A segment emptied by recovery stays as the active one (its base is still the
    # log end offset), like Kafka.
    last = log._segments[-1]
    log._log_end_offset = max(last.read_next_offset(), last.base_offset)
    log._dir_dirty = True
    return recover_from


def check_epochs_below(log: Log, recover_from: int) -> None:
    """Rebuild the epoch cache from the batches below ``recover_from`` unless it
    covers the last of them with its epoch.

    Entries are written without fsync on the append path and synced before the
    recovery point passes them, so after a process crash the checkpoint holds every
    entry below it; after a power cut the unsynced file may instead be the synced
    one (as good), empty or torn (a torn one fails to parse: full recovery). An empty
    or otherwise stale file is caught here by one batch's epoch and rebuilt by a scan
    of the batch headers (no record is read)."""
    segments = log._segments
    if recover_from <= segments[0].base_offset:
        return  # nothing below (a full recovery rebuilds every entry from the batches)
    try:
        last = _last_header_below(segments, log._bases, recover_from)
        if last is None or last.partition_leader_epoch < 0:
            return
        found = log.leader_epoch_cache.epoch_for_offset(last.base_offset)
        if found == last.partition_leader_epoch:
            return
        why = f"offset {last.base_offset} has epoch {last.partition_leader_epoch}, " \
              f"the checkpoint says {found}"  # fmt: skip
    except (StorageError, CorruptIndexError, OSError) as exc:
        why = f"cannot check it: {exc}"
    logger.warning(
        "%s: leader epoch checkpoint is stale (%s); rebuilding it from the batches "
        "below offset %d", log.directory.name, why, recover_from,
    )  # fmt: skip
    log.leader_epoch_cache.replace_entries(_epochs_of_batches_below(segments, recover_from))


def _last_header_below(
    segments: list[LogSegment], bases: list[int], offset: int
) -> BatchHeader | None:
    """The header of the last batch based below ``offset`` (data trusted there)."""
    index = bisect.bisect_right(bases, offset - 1) - 1
    while index >= 0:
        segment = segments[index]
        # The index below the recovery point is trusted, as segment.recover does.
        segment.offset_index.sanity_check()
        _, position = segment.offset_index.lookup(offset - 1)
        last: BatchHeader | None = None
        for _pos, header in segment.iter_batches(position):
            if header.base_offset >= offset:
                break
            last = header
            if header.next_offset >= offset:
                break  # the bytes after it are not trusted yet
        if last is not None:
            return last
        index -= 1  # a segment emptied below the offset (compaction): look earlier
    return None


def _epochs_of_batches_below(segments: list[LogSegment], offset: int) -> list[tuple[int, int]]:
    """``(epoch, start offset)`` of every epoch change among the batches below
    ``offset``, from their headers."""
    entries: list[tuple[int, int]] = []
    for segment in segments:
        if segment.base_offset >= offset:
            break
        for _pos, header in segment.iter_batches():
            if header.base_offset >= offset:
                break
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                entries.append((epoch, header.base_offset))
            if header.next_offset >= offset:
                break  # the bytes after it are not trusted yet
    return entries


def _iter_batches_from(
    segments: list[LogSegment], bases: list[int], offset: int
) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
    """Every batch whose last offset is >= ``offset``, across segments."""
    start = max(bisect.bisect_right(bases, offset) - 1, 0)
    first = True
    for segment in segments[start:]:
        position = 0
        if first:
            found = segment.translate_offset(offset)
            if found is None:
                continue
            position = found[0]
            first = False
        for pos, header in segment.iter_batches(position):
            yield segment, pos, header


def replay_producer_state(log: Log, index_aborts_from: int) -> None:
    """Bring producer state from its snapshot up to the log end offset.

    Aborted transactions completed at or after ``index_aborts_from`` are (re)added to
    the transaction index of the segment holding their marker.
    """
    state = log.producer_state
    if state.map_end_offset >= log._log_end_offset:
        return
    for segment, pos, header in _iter_batches_from(
        log._segments, log._bases, state.map_end_offset
    ):
        if header.producer_id < 0:
            state.update(header, header.base_offset)
            continue
        batch = segment.read_bytes(pos, header.size) if header.is_control else None
        completed = state.update(header, header.base_offset, -1, batch)
        if (
            completed is not None
            and completed.is_aborted
            and completed.last_offset >= index_aborts_from
        ):
            txn_index = segment.txn_index
            indexed = txn_index.last_offset
            if indexed is None or indexed < completed.last_offset:
                txn_index.append(
                    AbortedTxn(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        completed.last_stable_offset,
                    )
                )
