"""Sparse offset index of one segment: ``<20-digit base offset>.index``.

Maps an offset to the byte position of a batch in the segment's ``.log``, so a read
starts near its target instead of scanning the segment. One entry is added per
``index.interval.bytes`` of appended log (never for the segment's first batch, whose
position is 0 anyway). On-disk format, 8-byte entries, big-endian, ascending in both
fields::

    0  relative_offset  int32   base offset of the batch - segment base offset
    4  position         int32   byte position of that batch in the .log file

A lookup returns the greatest entry at or below the target (or ``(base_offset, 0)``
when there is none); the caller then scans forward batch headers from that position,
which costs at most one index interval of reading. The index is "full" at
``segment.index.bytes // 8`` entries, which makes the log roll a new segment.
"""

from __future__ import annotations

import struct

from odradek.storage.index_file import IndexFile

INT32_MAX = 2**31 - 1


class OffsetIndex(IndexFile):
    entry_struct = struct.Struct(">ii")

    @property
    def last_offset(self) -> int:
        """Absolute offset of the last entry, or the base offset when empty."""
        last = self._last_raw()
        return self.base_offset if last is None else self.base_offset + last[0]

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(offset, position)`` of the last entry, or ``(base_offset, 0)``."""
        last = self._last_raw()
        return (self.base_offset, 0) if last is None else (self.base_offset + last[0], last[1])

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must both increase."""
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX or not 0 <= position <= INT32_MAX:
            raise ValueError(
                f"{self.path}: entry ({offset}, {position}) does not fit a relative int32 index"
            )
        if self.is_full:
            raise ValueError(f"{self.path}: append to a full index ({self.max_entries} entries)")
        last = self._last_raw()
        if last is not None and (relative <= last[0] or position <= last[1]):
            raise ValueError(
                f"{self.path}: entry ({offset}, {position}) is not after the last entry "
                f"({self.base_offset + last[0]}, {last[1]})"
            )
        self._append_raw(relative, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the greatest entry with offset <= target."""
        n = self._search(target_offset - self.base_offset, 0)
        if n == 0:
            return self.base_offset, 0
        relative, position = self.entry(n - 1)
        return self.base_offset + relative, position

    def lookup_by_position(self, target_position: int) -> tuple[int, int]:
        """``(offset, position)`` of the greatest entry with position <= target."""
        n = self._search(target_position, 1)
        if n == 0:
            return self.base_offset, 0
        relative, position = self.entry(n - 1)
        return self.base_offset + relative, position

    def truncate_to(self, offset: int) -> None:
        """Remove the entries for batches starting at or after ``offset``."""
        self.truncate_to_entries(self._search_left(offset - self.base_offset, 0))
