"""What one cleaning pass over one log did (Kafka's CleanerStats, plus the new checkpoint).

Filled in by every layer of a pass (the record filter counts records, the rewrite counts
bytes and segments) and read by :class:`~odradek.storage.log_cleaner.LogCleaner`, which
stores ``end_offset`` as the partition's cleaner checkpoint and remembers the earliest
delete horizon to come back when it passes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CleanResult:
    """What one cleaning pass over one log did."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int  # the new checkpoint: first offset not cleaned by this pass
    segments_cleaned: int = 0  # old segments replaced
    segments_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    keyless_records_dropped: int = 0
    aborted_batches_dropped: int = 0
    elapsed_s: float = 0.0
    # The earliest delete horizon among the tombstones and markers this pass kept: once
    # it passes, the log must be cleaned again even if nothing new made it dirty.
    earliest_delete_horizon_ms: int | None = None

    def note_horizon(self, horizon_ms: int) -> None:
        if self.earliest_delete_horizon_ms is None or horizon_ms < self.earliest_delete_horizon_ms:
            self.earliest_delete_horizon_ms = horizon_ms
