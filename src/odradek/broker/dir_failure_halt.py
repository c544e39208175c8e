"""A broker in a cluster halts when its log directory fails, as Kafka's does.

Kafka's ``LogManager.handleLogDirFailure``: once the last live log directory has failed,
it logs "Shutdown broker because all log dirs in ... have failed" and calls
``Exit.halt(1)``: no controlled shutdown (nothing can be written any more) and no
shutdown hooks. Its ZooKeeper session then expires, and the controller elects new
leaders from the ISR and takes the broker out of every ISR, so the partitions it led go
on being served by the other replicas. An odradek broker has one log directory, so its
failure is always the last one.

The embedded single broker does not halt: it has no replica to fail over to, and its
directory comes back by itself once space is freed (``odradek.storage.log_dir_failure``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

EXIT_CODE = 1  # Kafka's Exit.halt(1)


def halter(directory: Path, exit: Callable[[int], object] = os._exit) -> Callable[[str], None]:
    """The ``on_offline`` hook of a clustered broker's log directory (``exit`` is
    replaceable for tests): log why, flush the log, leave the process at once."""

    def halt(cause: str) -> None:
        log.critical(
            "Shutdown broker because all log dirs in %s have failed (%s)", directory, cause
        )
        # os._exit skips the interpreter's teardown, so the line must be out before it.
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        exit(EXIT_CODE)

    return halt
