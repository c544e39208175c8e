"""File regions: byte ranges of segment files handed to the network layer for ``sendfile``.

A fetch answer is a list of :class:`FileRegion` objects, each naming an open file
descriptor, a position and a length. The network layer passes them to ``os.sendfile`` (zero
copy) or calls :meth:`FileRegion.read` when it must copy.

The descriptor must stay valid for as long as any region refers to it, even when the
segment is deleted by retention or truncation meanwhile, and it must never be closed and
reused by an unrelated file under a region in flight (``sendfile`` would then send the
wrong bytes). So the descriptor belongs to a :class:`SharedFile`; the segment and every
region hold a reference to it, and the descriptor is closed only when the last reference
goes (CPython frees it at once). An unlinked file stays readable through an open
descriptor, so a region keeps returning the bytes it was cut for.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from odradek.storage.errors import StorageError


class SharedFile:
    """An open descriptor shared by a segment and its outstanding regions.

    ``close()`` is the owner's release: the descriptor itself is closed when this object
    is no longer referenced by anyone (segment, regions), never earlier.
    """

    __slots__ = ("__weakref__", "_finalizer", "fd", "path")

    def __init__(self, path: Path, flags: int, mode: int = 0o644) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, flags, mode)
        # finalize (not __del__) so the descriptor is also closed at interpreter exit.
        self._finalizer = weakref.finalize(self, os.close, self.fd)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close_now(self) -> None:
        """Close the descriptor immediately. Only for files no region can refer to."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"SharedFile({self.path}, fd={self.fd})"


@dataclass(frozen=True)
class FileRegion:
    """``length`` bytes at ``position`` of the file open as ``fd``; ready for os.sendfile."""

    fd: int
    position: int
    length: int
    # Keeps the descriptor open while this region exists; not part of equality.
    owner: SharedFile | None = field(default=None, repr=False, compare=False)

    def read(self) -> bytes:
        """The region's bytes (os.pread). Shorter only if the file was truncated under it."""
        if self.owner is not None and self.owner.closed:
            raise StorageError(f"file region of {self.owner.path} read after its file closed")
        chunks: list[bytes] = []
        position = self.position
        remaining = self.length
        while remaining > 0:
            chunk = os.pread(self.fd, remaining, position)
            if not chunk:
                break  # the segment was truncated below the region: send what exists
            chunks.append(chunk)
            position += len(chunk)
            remaining -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def sendfile(self, out_fd: int, offset: int = 0) -> int:
        """Send the region from ``offset`` (relative) to ``out_fd``; returns bytes sent.

        One ``os.sendfile`` call: a non-blocking socket may take fewer bytes, so callers
        loop, passing the bytes already sent as ``offset``.
        """
        if offset >= self.length:
            return 0
        return os.sendfile(out_fd, self.fd, self.position + offset, self.length - offset)
