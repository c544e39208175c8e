"""The cleaner's offset map: key -> latest offset over the dirty range (step 3 of the
algorithm in :mod:`odradek.storage.cleaner`).

Kafka's OffsetMap / SkimpyOffsetMap and Cleaner.buildOffsetMap. Kafka hashes keys into
a fixed buffer (``log.cleaner.dedupe.buffer.size``); here a dict bounded in entries
plays that part. Control batches and the data of aborted transactions are skipped, so
aborted data never hides a committed value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from odradek.records.validation import uncompressed_limit
from odradek.storage.cleaner_plan import segments_overlapping
from odradek.storage.cleaner_read import (
    batch_header,
    control_type_of,
    decode_within,
    iter_segment_batches,
)
from odradek.storage.cleaner_txn import CleanedTransactionMetadata


class OffsetMap:
    """Key -> latest offset over the dirty range, bounded in entries.

    ``latest_offset`` is the last offset the map fully accounts for: records above it were
    not looked at and are always kept.
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("the offset map needs room for at least one key")
        self.max_entries = max_entries
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``key`` at ``offset``; False (and nothing stored) when the map is full."""
        if key not in self._offsets and len(self._offsets) >= self.max_entries:
            return False
        self._offsets[key] = offset
        return True

    def get(self, key: bytes) -> int:
        return self._offsets.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)


def build_offset_map(
    log_: Any,
    segments: Sequence[Any],
    start: int,
    end: int,
    offset_map: OffsetMap,
    *,
    io_buffer_size: int,
    check_done: Callable[[], None],
) -> None:
    """Fill ``offset_map`` with the latest offset of every key in ``[start, end)``."""
    dirty = segments_overlapping(segments, start, end)
    limit = uncompressed_limit(log_.config.max_message_bytes)
    txns = CleanedTransactionMetadata()
    txns.add_aborted_transactions(log_.collect_aborted_transactions(start, end))
    for i, segment in enumerate(dirty):
        next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        for pos, data in iter_segment_batches(segment, io_buffer_size):
            check_done()
            header = batch_header(segment, pos, data)
            if header.last_offset < start:
                continue
            if header.base_offset >= end:
                break
            if header.is_control:
                marker = control_type_of(decode_within(segment, pos, data, limit))
                txns.on_control_batch(header, marker)
            elif not txns.on_data_batch(header):
                decoded = decode_within(segment, pos, data, limit)
                for record in decoded.records if decoded is not None else ():
                    if record.key is None or record.offset < start:
                        continue
                    if not offset_map.put(record.key, record.offset):
                        return  # full: the map covers up to the previous batch
            offset_map.update_latest_offset(header.last_offset)
        # An offset gap at the end of a segment is covered too.
        offset_map.update_latest_offset(next_start - 1)
