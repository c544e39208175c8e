"""Leave the process once the broker has shut down, even if stray work would keep it.

After a clean shutdown the logs are flushed, checkpointed and marked clean; what is left
is the interpreter's own teardown: cancelling leftover tasks, joining the default
executor's threads and every thread pool at exit. A task that ignores its cancellation or
a thread blocked in a library call (a ZooKeeper request with no timeout) would keep the
process alive for ever, and an operator's SIGTERM would seem to hang. Kafka's main ends
with ``Exit.exit`` for the same reason: stray non-daemon threads do not hold the JVM.

The watchdog gives the teardown ``grace_s`` seconds; then it prints every thread's stack
(so the cause is in the log) and ends the process with the exit code it was armed with.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 10.0


def arm(exit_code: int, grace_s: float = DEFAULT_GRACE_S) -> threading.Thread:
    """Start the countdown (a daemon thread: a process that exits first is not held)."""

    def countdown() -> None:
        threading.Event().wait(grace_s)
        log.warning(
            "the process did not exit %.1f s after the broker stopped; its threads follow, "
            "then it exits with code %d",
            grace_s,
            exit_code,
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(exit_code)

    thread = threading.Thread(target=countdown, name="odradek-exit-watchdog", daemon=True)
    thread.start()
    return thread
