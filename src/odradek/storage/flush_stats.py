"""Where log flushes report their time (Kafka's LogFlushStats.LogFlushRateAndTimeMs).

A process-wide hook, as Kafka's LogFlushStats is a process-wide timer: the broker's
metrics set :data:`observer` to a function taking the seconds one flush spent in fsync;
None (the default) costs one attribute read per flush.
"""

from __future__ import annotations

from collections.abc import Callable

observer: Callable[[float], None] | None = None
