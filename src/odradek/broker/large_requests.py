"""Process-wide interpreter settings while a large request is in progress.

A request over the network layer's offload threshold (a Produce or a request listing a
million partitions) creates millions of short-lived objects; :class:`LargeRequests`
suspends CPython's full garbage collections and shortens the GIL switch interval around
its decoding, handling and encoding. Apart from the connection because it is process
state shared by every connection of every listener, not per-connection behaviour.
"""

from __future__ import annotations

import gc
import sys
import time

__all__ = ["LargeRequests"]

# Longest time full garbage collections stay suspended by back-to-back large requests.
_MAX_SUSPENSION_S = 10.0


class LargeRequests:
    """Process-wide settings while any large request is being decoded, handled or encoded.

    A request listing a million partitions creates millions of objects; CPython's full
    garbage collections scan every live object and stop every thread, for up to a second
    each, several times over. They are suspended while large requests are in progress
    (the objects are acyclic and freed by reference counting) and resumed after. Large
    requests that follow each other without a gap (producers sending big batches) would
    keep them suspended for good, so after ``_MAX_SUSPENSION_S`` one full collection runs
    anyway. The GIL switch interval is shortened too, so the event loop gets the
    interpreter back from a decoding thread within half a millisecond instead of five.
    """

    in_progress = 0
    _saved_interval = 0.005
    _gc_was_enabled = True
    _suspended_at = 0.0

    @classmethod
    def begin(cls) -> None:
        if cls.in_progress == 0:
            cls._gc_was_enabled = gc.isenabled()
            gc.disable()
            cls._suspended_at = time.monotonic()
            cls._saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(cls._saved_interval, 0.0005))
        cls.in_progress += 1

    @classmethod
    def end(cls) -> None:
        cls.in_progress -= 1
        if cls.in_progress == 0:
            sys.setswitchinterval(cls._saved_interval)
            if cls._gc_was_enabled:
                gc.enable()
        elif cls._gc_was_enabled and time.monotonic() - cls._suspended_at > _MAX_SUSPENSION_S:
            gc.collect()
            cls._suspended_at = time.monotonic()

