"""``dump-log`` of the files beside a segment: indexes, snapshots, checkpoints.

Entries are decoded with the formats :mod:`odradek.storage` defines; nothing is opened for
writing. Index entries are checked against the segment's ``.log`` the way Kafka's tool
checks them, adapted to odradek's offset index, whose entries name a batch's *first*
offset (Kafka's name its last).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from odradek.cli.dump_log_segment import iter_batches
from odradek.records import CorruptRecordError
from odradek.records.header import BatchHeader
from odradek.storage.errors import CorruptCheckpointError, CorruptIndexError, CorruptSnapshotError
from odradek.storage.leader_epoch import parse_epoch_checkpoint
from odradek.storage.offset_index import OffsetIndex
from odradek.storage.producer_state import decode_snapshot
from odradek.storage.segment import parse_base_offset
from odradek.storage.time_index import TimeIndex
from odradek.storage.txn_index import ENTRY, ENTRY_SIZE

if TYPE_CHECKING:
    from odradek.cli.dump_log import Findings, Options

NO_LIMIT = 2**62  # an index opened here is never appended to, its size limit is moot


def _base_offset(path: Path) -> int:
    from odradek.cli.dump_log import DumpError

    base = parse_base_offset(path.name)
    if base is None:
        raise DumpError("the file name does not start with a 20-digit base offset")
    return base


def _entries(path: Path, index: OffsetIndex | TimeIndex) -> tuple[list[tuple[int, int]], int]:
    """Whole entries of an index file and the count of bytes left over after them."""
    data = path.read_bytes()
    size = index.entry_struct.size
    count = len(data) // size
    return [index.entry_struct.unpack_from(data, i * size) for i in range(count)], len(
        data
    ) - count * size


def _log_headers(path: Path) -> list[tuple[int, BatchHeader]] | None:
    """Batch headers of the ``.log`` beside an index, or None when there is none to check."""
    log = path.with_suffix(".log")
    if not log.exists():
        return None
    try:
        return [(pos, header) for pos, header, _ in iter_batches(log, NO_LIMIT, headers_only=True)]
    except CorruptRecordError:
        return None


def _sanity(path: Path, index: OffsetIndex | TimeIndex, out: TextIO) -> None:
    from odradek.cli.dump_log import DumpError

    try:
        index.sanity_check()
    except CorruptIndexError as exc:
        raise DumpError(str(exc)) from None
    out.write(f"{path} passed sanity check.\n")


def dump_offset_index(path: Path, opts: Options, out: TextIO, findings: Findings) -> None:
    from odradek.cli.dump_log import DumpError

    base = _base_offset(path)
    index = OffsetIndex(path, base, NO_LIMIT)
    entries, leftover = _entries(path, index)
    if not entries and not leftover:
        out.write(f"{path} is empty.\n")
        return
    if opts.index_sanity_only:
        _sanity(path, index, out)
        return
    log_headers = _log_headers(path)
    check = log_headers is not None
    by_position = dict(log_headers or [])
    name = str(path.absolute())
    for i, (relative, position) in enumerate(entries):
        offset = base + relative
        if i > 0 and offset == base:
            break  # like Kafka: zeroed tail of a preallocated index
        header = by_position.get(position)
        if check and (header is None or header.base_offset != offset):
            found = -1 if header is None else header.base_offset
            findings.index_mismatches.setdefault(name, []).append((offset, found))
        if not opts.verify_only:
            out.write(f"offset: {offset} position: {position}\n")
    if leftover:
        raise DumpError(
            f"{leftover} trailing bytes are not a whole {index.entry_struct.size}-byte entry"
        )


def dump_time_index(path: Path, opts: Options, out: TextIO, findings: Findings) -> None:
    from odradek.cli.dump_log import DumpError

    base = _base_offset(path)
    index = TimeIndex(path, base, NO_LIMIT)
    if opts.index_sanity_only:
        _sanity(path, index, out)
        return
    entries, leftover = _entries(path, index)
    log_headers = _log_headers(path)
    headers = [h for _, h in log_headers or []]
    name = str(path.absolute())
    previous = -1
    for i, (timestamp, relative) in enumerate(entries):
        offset = base + relative
        if i > 0 and offset == base:
            break
        if log_headers is not None:
            batch = next((h for h in headers if h.last_offset >= offset), None)
            if batch is None:
                findings.not_found.setdefault(name, []).append((offset, -1))
            elif batch.last_offset != offset:
                findings.not_found.setdefault(name, []).append((offset, batch.last_offset))
            else:
                if batch.max_timestamp != timestamp:
                    findings.time_mismatches.setdefault(name, []).append(
                        (timestamp, batch.max_timestamp)
                    )
                if previous >= timestamp:
                    findings.out_of_order.setdefault(name, []).append((timestamp, previous))
        if not opts.verify_only:
            out.write(f"timestamp: {timestamp} offset: {offset}\n")
        previous = timestamp
    if leftover:
        raise DumpError(
            f"{leftover} trailing bytes are not a whole {index.entry_struct.size}-byte entry"
        )


def dump_producer_snapshot(path: Path, out: TextIO) -> None:
    from odradek.cli.dump_log import DumpError

    try:
        entries = decode_snapshot(path.read_bytes(), str(path))
    except CorruptSnapshotError as exc:
        raise DumpError(str(exc)) from None
    for entry in entries:
        first_txn = entry.current_txn_first_offset
        line = (
            f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} currentTxnFirstOffset: "
            f"{'OptionalLong.empty' if first_txn is None else f'OptionalLong[{first_txn}]'} "
            f"lastTimestamp: {entry.last_timestamp} "
        )
        if entry.batches:
            # Kafka prints the first of the retained batches.
            batch = entry.batches[0]
            line += (
                f"firstSequence: {batch.first_seq} lastSequence: {batch.last_seq} "
                f"lastOffset: {batch.last_offset} offsetDelta: {batch.offset_delta} "
                f"timestamp: {batch.timestamp}"
            )
        out.write(line + "\n")


def dump_txn_index(path: Path, out: TextIO) -> None:
    from odradek.cli.dump_log import DumpError

    data = path.read_bytes()
    for position in range(0, len(data) - len(data) % ENTRY_SIZE, ENTRY_SIZE):
        version, producer_id, first, last, lso = ENTRY.unpack_from(data, position)
        out.write(
            f"version: {version} producerId: {producer_id} firstOffset: {first} "
            f"lastOffset: {last} lastStableOffset: {lso}\n"
        )
    if len(data) % ENTRY_SIZE:
        raise DumpError(
            f"{len(data) % ENTRY_SIZE} trailing bytes are not a whole {ENTRY_SIZE}-byte entry"
        )


def dump_leader_epochs(path: Path, out: TextIO) -> None:
    from odradek.cli.dump_log import DumpError

    try:
        text = path.read_text(encoding="ascii")
        entries = parse_epoch_checkpoint(text, str(path))
    except (CorruptCheckpointError, UnicodeDecodeError) as exc:
        raise DumpError(str(exc)) from None
    for epoch, start_offset in entries:
        out.write(f"epoch: {epoch} startOffset: {start_offset}\n")
