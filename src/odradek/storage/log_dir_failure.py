"""Whether a log directory is online, and how it goes offline and comes back.

Kafka's ``LogDirFailureChannel``: the first I/O error on a directory (a full disk, a dead
device) marks the whole directory offline. Its partitions then answer
KAFKA_STORAGE_ERROR to produce and fetch, and DescribeLogDirs reports the directory with
that error. Later failures on an offline directory add nothing to the log: one ERROR line
when it goes offline (with the cause), nothing while it stays offline.

Kafka never brings a failed directory back without a restart. odradek does, because the
usual cause, a full disk, goes away when space is freed: :meth:`probe` writes
``probe_bytes`` (the largest batch the broker accepts) to a scratch file, fsyncs and
removes it; when that succeeds the directory is online again and one INFO line says so.
The broker calls it periodically (see ``KafkaServer``); it costs nothing while online.
The probe size means "a full-size batch fits again", so a directory with a few bytes
free does not flap online and straight back offline.

``on_offline``, when set, is called once each time the directory goes offline (on the
thread whose I/O failed, after the ERROR line): a broker in a cluster halts there, as
Kafka's does when its last log directory fails (see ``odradek.broker.cluster_mode``).

An append that fails part way leaves no partial batch behind (the segment cuts its file
back), so what was acknowledged before the failure is what is read after recovery.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from odradek.storage.errors import StorageError

logger = logging.getLogger(__name__)

PROBE_FILE = ".odradek-probe"
DEFAULT_PROBE_BYTES = 1048588  # Kafka's default message.max.bytes


def is_io_failure(exc: BaseException) -> bool:
    """True for an error of the directory itself (I/O), not of the request or the data."""
    if isinstance(exc, OSError):
        return True
    return type(exc) is StorageError and isinstance(exc.__cause__, OSError)


class LogDirFailureChannel:
    """Online/offline state of one log directory; thread-safe."""

    def __init__(self, directory: Path, *, probe_bytes: int = DEFAULT_PROBE_BYTES) -> None:
        self.directory = Path(directory).absolute()
        self.probe_bytes = max(1, probe_bytes)
        self._lock = threading.Lock()
        self._cause: str | None = None
        # Called with the cause when the directory goes offline (see the module docstring).
        self.on_offline: Callable[[str], None] | None = None

    @property
    def offline(self) -> bool:
        return self._cause is not None

    @property
    def cause(self) -> str | None:
        return self._cause

    def mark_offline(self, cause: BaseException | str) -> bool:
        """Take the directory offline; True if it was online (and so was logged)."""
        text = _describe(cause)
        with self._lock:
            if self._cause is not None:
                return False
            self._cause = text
        logger.error(
            "log directory %s is offline: %s; its partitions answer KAFKA_STORAGE_ERROR "
            "until a test write of %d bytes succeeds",
            self.directory, text, self.probe_bytes,
        )  # fmt: skip
        if self.on_offline is not None:
            self.on_offline(text)
        return True

    def probe(self) -> bool:
        """If offline, try a test write; True when the directory is (now) online."""
        if self._cause is None:
            return True
        try:
            self._test_write()
        except OSError:
            return False
        with self._lock:
            if self._cause is None:
                return True
            cause, self._cause = self._cause, None
        logger.info("log directory %s is back online (it went offline: %s)", self.directory, cause)
        return True

    def _test_write(self) -> None:
        path = self.directory / PROBE_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            chunk = b"\0" * min(self.probe_bytes, 65536)
            left = self.probe_bytes
            while left > 0:
                left -= os.write(fd, chunk[:left])
            os.fsync(fd)
        finally:
            os.close(fd)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _describe(cause: BaseException | str) -> str:
    if isinstance(cause, str):
        return cause
    return str(cause) or type(cause).__name__
