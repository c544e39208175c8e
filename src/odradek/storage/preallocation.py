"""Disk blocks reserved ahead of a segment's end, without changing its size.

Appending to a file makes the file system reserve blocks for every write (ext4's delayed
allocation: a reservation, a quota charge and an extent-tree entry per write); on the
machines measured that was a third of the cost of copying large batches into the page
cache. ``fallocate`` with ``FALLOC_FL_KEEP_SIZE`` reserves the blocks once, for many
appends, and leaves the file's size, and so everything that reads it (readers, recovery,
sizes reported to clients), exactly as it was: the blocks lie beyond the end of the file
until appends reach them. Truncating the file to its own size gives back the blocks
still unused (a segment does so when it stops being the active one, and when it closes).

Only Linux has the call; where it is missing or the file system refuses it, nothing is
reserved and appends work as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os

__all__ = ["preallocate", "release_beyond"]

log = logging.getLogger(__name__)

_FALLOC_FL_KEEP_SIZE = 0x01
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def _load_fallocate():  # type: ignore[no-untyped-def]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        call = libc.fallocate
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    call.restype = ctypes.c_int
    return call


_fallocate = _load_fallocate()


def preallocate(fd: int, offset: int, length: int) -> bool:
    """Reserve blocks for ``[offset, offset + length)`` of ``fd`` without changing its size;
    False if nothing was reserved (no such call here, a file system without it, or a full
    disk: the append then reserves its own blocks, and fails as before if it cannot)."""
    global _fallocate
    if _fallocate is None or length <= 0:
        return False
    if _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        log.info("fallocate is not supported here (%s): segments are not preallocated",
                 errno.errorcode.get(code, code))  # fmt: skip
        _fallocate = None
    return False


def release_beyond(fd: int, size: int) -> None:
    """Give back the blocks reserved beyond ``size`` (the file's own size)."""
    os.ftruncate(fd, size)
