"""Which records and batches a cleaning pass keeps: the rule of step 4 and the
tombstone and transaction paragraphs of the algorithm in :mod:`odradek.storage.cleaner`.

Kafka's MemoryRecords.filterTo with the cleaner's RecordFilter (Cleaner.cleanInto and
shouldRetainRecord): :func:`filter_batch` decides, one batch at a time, what the new
segment gets. A record stays iff it is the latest for its key (or lies past the offset
map's end) and, for a tombstone, its delete horizon has not passed; a batch that loses
records is re-encoded with its offsets and producer fields, one that loses nothing is
copied byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from odradek.records.batch import DecodedBatch, DecodedRecord, rebuild_batch
from odradek.storage.cleaner_read import (
    batch_header,
    control_type_of,
    decode_within,
    delete_horizon,
)
from odradek.storage.cleaner_result import CleanResult
from odradek.storage.cleaner_txn import CleanedTransactionMetadata
from odradek.storage.offset_map import OffsetMap

# Batch retention decisions (Kafka's MemoryRecords.RecordFilter.BatchRetention).
_DELETE = 0  # drop the batch without looking at its records
_RETAIN_EMPTY = 1  # keep the batch even if no record survives (header only)
_DELETE_EMPTY = 2  # keep the surviving records; drop the batch if none survive


@dataclass
class FilterContext:
    """What :func:`filter_batch` carries from one batch to the next during one pass."""

    offset_map: OffsetMap
    txns: CleanedTransactionMetadata
    now_ms: int
    delete_retention_ms: int
    last_batches: dict[int, tuple[int, int]]  # producer id -> (last data offset, epoch)
    upper_bound: int  # first uncleanable offset of this pass
    result: CleanResult
    max_uncompressed: int  # decompression bound (see odradek.records.validation)


def _retain_record(ctx: FilterContext, horizon: int | None, record: DecodedRecord) -> bool:
    if record.offset > ctx.offset_map.latest_offset:
        return True
    if record.key is None:
        ctx.result.keyless_records_dropped += 1
        return False
    if record.offset < ctx.offset_map.get(record.key):
        return False
    if record.value is not None:
        return True
    return horizon is None or ctx.now_ms < horizon  # a tombstone until its horizon


def filter_batch(
    ctx: FilterContext, segment: Any, pos: int, data: bytes
) -> tuple[bytes | bytearray | None, int]:
    """What to write for one batch: ``(bytes or None to drop it, records retained)``."""
    header = batch_header(segment, pos, data)
    horizon = delete_horizon(header)
    decoded: DecodedBatch | None = None
    if header.is_control:
        decoded = decode_within(segment, pos, data, ctx.max_uncompressed)
        can_discard = ctx.txns.on_control_batch(header, control_type_of(decoded))
        discard_records = can_discard and horizon is not None and horizon <= ctx.now_ms
    else:
        can_discard = ctx.txns.on_data_batch(header)
        discard_records = can_discard
        if can_discard:
            ctx.result.aborted_batches_dropped += 1
    last = ctx.last_batches.get(header.producer_id) if header.has_producer_id else None
    if last is None:
        is_last_of_producer = False
    elif last[0] >= 0:
        is_last_of_producer = header.last_offset == last[0]
    else:
        is_last_of_producer = header.is_control and header.producer_epoch == last[1]
    if is_last_of_producer or header.next_offset == ctx.upper_bound:
        retention = _RETAIN_EMPTY
    elif discard_records:
        retention = _DELETE
    else:
        retention = _DELETE_EMPTY
    marker_for_empty_txn = can_discard and header.is_control
    ctx.result.records_read += header.records_count
    if retention == _DELETE:
        return None, 0
    if not header.is_control:
        decoded = decode_within(segment, pos, data, ctx.max_uncompressed)
    if decoded is None:
        return data, header.records_count  # too large to decode: kept as it is
    if discard_records:
        kept: list[DecodedRecord] = []
    elif header.is_control:
        kept = list(decoded.records)
    else:
        kept = [r for r in decoded.records if _retain_record(ctx, horizon, r)]
    if kept:
        has_tombstone = any(r.value is None for r in kept) and not header.is_control
        needs_horizon = (has_tombstone or marker_for_empty_txn) and horizon is None
        new_horizon = ctx.now_ms + ctx.delete_retention_ms if needs_horizon else horizon
        if new_horizon is not None and (has_tombstone or marker_for_empty_txn):
            # Only what the horizon will remove counts; a horizon on a batch whose
            # tombstones are already gone must not bring the log back every pass.
            ctx.result.note_horizon(new_horizon)
        if len(kept) == len(decoded.records) and not needs_horizon:
            return data, len(kept)
        return rebuild_batch(decoded, kept, delete_horizon_ms=new_horizon), len(kept)
    if retention == _RETAIN_EMPTY:
        return rebuild_batch(decoded, []), 0
    return None, 0
