"""Time index of one segment: ``<20-digit base offset>.timeindex``.

Maps a timestamp to an offset, for ListOffsets by timestamp and for time-based
retention. Each entry records the greatest batch max-timestamp seen so far in the
segment and where it was seen; an entry is added alongside each offset index entry,
but only when the maximum grew, so both fields are non-decreasing. When the segment
stops being the active one (roll, clean close) a final entry records the segment's
overall maximum, so the last entry is the segment's largest timestamp. On-disk format,
12-byte entries, big-endian::

    0  timestamp        int64   greatest batch max-timestamp so far (ms)
    8  relative_offset  int32   last offset of the batch that had it - base offset

Like Kafka, the index counts as full one entry before ``segment.index.bytes // 12`` so
the final entry always fits.
"""

from __future__ import annotations

import struct

from odradek.storage.index_file import IndexFile
from odradek.storage.offset_index import INT32_MAX

NO_TIMESTAMP = -1


class TimeIndex(IndexFile):
    entry_struct = struct.Struct(">qi")

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, or ``(-1, base_offset)`` when empty."""
        last = self._last_raw()
        if last is None:
            return NO_TIMESTAMP, self.base_offset
        return last[0], self.base_offset + last[1]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` if the timestamp is above the last entry's."""
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise ValueError(f"{self.path}: offset {offset} does not fit a relative int32 index")
        last = self._last_raw()
        if timestamp <= (NO_TIMESTAMP if last is None else last[0]):
            return  # like Kafka, an empty index starts at "no timestamp" (-1)
        if last is not None and relative < last[1]:
            raise ValueError(
                f"{self.path}: offset {offset} is below the last entry's "
                f"{self.base_offset + last[1]}"
            )
        if not skip_full_check and self.is_full:
            raise ValueError(f"{self.path}: append to a full time index")
        if self.entries >= self.max_entries:
            return  # even the reserved final slot is used: keep the file within its size
        self._append_raw(timestamp, relative)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the greatest entry with timestamp <= target.

        ``(-1, base_offset)`` when every entry is above the target (scan from the start).
        """
        n = self._search(target_timestamp, 0)
        if n == 0:
            return NO_TIMESTAMP, self.base_offset
        timestamp, relative = self.entry(n - 1)
        return timestamp, self.base_offset + relative

    def truncate_to(self, offset: int) -> None:
        """Remove the entries pointing at ``offset`` or later."""
        self.truncate_to_entries(self._search_left(offset - self.base_offset, 1))
