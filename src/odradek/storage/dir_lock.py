"""The ``.lock`` file that makes a log directory belong to one broker process.

Kafka locks every log directory at start-up (``LogManager.lockLogDirs``) and refuses to
start when another process holds the lock: two brokers writing the same partition files
would hand out the same offsets and interleave their records. odradek does the same with
an OS-level exclusive ``flock`` on ``<dir>/.lock``, taken without waiting and held until
:meth:`DirLock.release` (at shutdown) or the end of the process; the kernel drops it when
the process dies, so a crashed broker never leaves a stale lock behind.

``flock`` (not ``fcntl`` record locks) because its lock belongs to the open file, so a
second attempt from the same process fails too, and closing an unrelated descriptor of
the same file does not silently drop it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class LogDirInUseError(Exception):
    """Another process (or another broker in this one) holds the directory's lock."""


class DirLock:
    """An exclusive lock on one log directory; see the module docstring."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path) -> DirLock:
        """Lock ``directory`` (created if absent) or raise LogDirInUseError at once."""
        directory = Path(directory).absolute()
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            # Kafka's wording, so operators find the usual advice for it.
            raise LogDirInUseError(
                f"Failed to acquire lock on file {LOCK_FILE} in {directory}. A Kafka instance "
                "in another process or thread is using this directory."
            ) from None
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Unlock (idempotent). The file stays: deleting it would race a new locker."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
