"""Common machinery of the fixed-size-entry index files (``.index`` and ``.timeindex``).

An index file is a plain array of big-endian fixed-size entries, appended in order and
never rewritten in place (truncation cuts the tail). Nothing is preallocated, so the
number of valid entries is simply ``file size // entry size`` - which is what lets a log
open after a clean shutdown without reading any index or log data.

The entries are read lazily: opening costs nothing, :attr:`IndexFile.last_entry` reads
only the last entry (one ``pread``), and the first lookup reads the whole file once into
memory, after which lookups are binary searches over that buffer. Appends write through
to the file (page cache) and to the buffer if it is loaded. Thread safety is the owning
Log's lock.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path
from typing import Any

from odradek.storage.errors import CorruptIndexError
from odradek.storage.file_region import SharedFile


class IndexFile:
    """A file of ``entry_struct``-sized entries; ``max_index_size`` bytes make it full."""

    entry_struct: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.entry_size = self.entry_struct.size
        self.max_entries = max_index_size // self.entry_size
        # Write descriptor, opened on first append. Shared so that a flush running in
        # another thread keeps it open even if the index is closed meanwhile.
        self._file: SharedFile | None = None
        self._dirty = False
        self._count: int | None = None  # from the file size, lazily
        self._last: tuple[Any, ...] | None = None
        self._data: bytearray | None = None  # whole file, loaded on first lookup

    # -- state, loaded lazily ----------------------------------------------------------

    def _file_size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    @property
    def entries(self) -> int:
        if self._count is None:
            size = self._file_size()
            if size % self.entry_size:
                raise CorruptIndexError(
                    f"{self.path}: size {size} is not a multiple of the {self.entry_size}-byte "
                    f"entry"
                )
            self._count = size // self.entry_size
        return self._count

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _last_raw(self) -> tuple[Any, ...] | None:
        if self._last is None and self.entries:
            if self._data is not None:
                self._last = self.entry_struct.unpack_from(
                    self._data, (self.entries - 1) * self.entry_size
                )
            else:
                with open(self.path, "rb") as f:
                    raw = os.pread(
                        f.fileno(), self.entry_size, (self.entries - 1) * self.entry_size
                    )
                if len(raw) != self.entry_size:
                    raise CorruptIndexError(f"{self.path}: last entry unreadable")
                self._last = self.entry_struct.unpack(raw)
        return self._last

    def _load(self) -> bytearray:
        if self._data is None:
            try:
                with open(self.path, "rb") as f:
                    data = bytearray(f.read())
            except FileNotFoundError:
                data = bytearray()
            if len(data) % self.entry_size:
                raise CorruptIndexError(
                    f"{self.path}: size {len(data)} is not a multiple of the "
                    f"{self.entry_size}-byte entry"
                )
            self._data = data
            self._count = len(data) // self.entry_size
            self._last = None
        return self._data

    def entry(self, n: int) -> tuple[Any, ...]:
        """The raw n-th entry (0-based)."""
        return self.entry_struct.unpack_from(self._load(), n * self.entry_size)

    def _search(self, target: int, field: int) -> int:
        """Number of entries whose ``field`` is <= target (entries are sorted on it)."""
        data = self._load()
        size = self.entry_size
        unpack = self.entry_struct.unpack_from
        return bisect.bisect_right(
            range(self.entries), target, key=lambda i: unpack(data, i * size)[field]
        )

    def _search_left(self, target: int, field: int) -> int:
        """Number of entries whose ``field`` is < target."""
        data = self._load()
        size = self.entry_size
        unpack = self.entry_struct.unpack_from
        return bisect.bisect_left(
            range(self.entries), target, key=lambda i: unpack(data, i * size)[field]
        )

    # -- changes -----------------------------------------------------------------------

    def _append_raw(self, *values: int) -> None:
        packed = self.entry_struct.pack(*values)
        count = self.entries
        if self._file is None:
            self._file = SharedFile(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
            )
        written = os.write(self._file.fd, packed)
        if written != len(packed):  # a short write of 8 or 12 bytes means a full disk
            os.ftruncate(self._file.fd, count * self.entry_size)
            raise OSError(f"{self.path}: short write of an index entry")
        if self._data is not None:
            self._data += packed
        self._count = count + 1
        self._last = values
        self._dirty = True

    def truncate_to_entries(self, n: int) -> None:
        """Keep only the first ``n`` entries."""
        if n >= self.entries:
            return
        if self.path.exists():
            os.truncate(self.path, n * self.entry_size)
        if self._data is not None:
            del self._data[n * self.entry_size :]
        self._count = n
        self._last = None
        self._dirty = True

    def reset(self) -> None:
        """Remove every entry (the index is about to be rebuilt)."""
        if self.path.exists():
            os.truncate(self.path, 0)
        self._data = bytearray() if self._data is not None else None
        self._count = 0
        self._last = None
        self._dirty = True

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if the file cannot be an index (torn size)."""
        size = self._file_size()
        if size % self.entry_size:
            raise CorruptIndexError(
                f"{self.path}: size {size} is not a multiple of the {self.entry_size}-byte entry"
            )

    def unload(self) -> None:
        """Drop the in-memory copy (e.g. for a segment that is no longer read)."""
        self._data = None

    def flush(self) -> None:
        shared = self._file  # local reference: stays open even if closed concurrently
        if shared is not None and self._dirty and not shared.closed:
            self._dirty = False
            os.fsync(shared.fd)

    @property
    def holds_handle(self) -> bool:
        return self._file is not None

    def release_handle(self) -> bool:
        """Close the write descriptor unless it has unsynced entries (reopened on the
        next append); True if one was closed."""
        if self._file is None or self._dirty:
            return False
        self._file = None
        return True

    def close(self) -> None:
        self._file = None  # the descriptor closes with its last reference
        self._data = None

    def rename_to(self, path: Path) -> None:
        path = Path(path)
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path
        if self._file is not None:
            self._file.path = path

    def delete(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        self._count = 0
        self._last = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path}, entries={self._count})"
