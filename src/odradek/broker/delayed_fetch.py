"""Delayed fetches: consumers waiting in the fetch purgatory for ``min_bytes`` of data.

A fetch that cannot be answered yet becomes a :class:`DelayedFetch` watched under each
of its partitions. An append to a partition checks the operations watching it; the
timing wheel expires the rest after ``max_wait``. Either way the operation completes
exactly once and wakes the handler, which then reads and answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from odradek.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from odradek.broker.timing_wheel import Timer


class DelayedFetch(DelayedOperation):
    def __init__(self, delay_ms: int, ready: Callable[[], bool], done: asyncio.Future[None]):
        super().__init__(delay_ms)
        self._ready = ready
        self._done = done
        self.kind = "Fetch"

    def try_complete(self) -> bool:
        if self._done.done() or self._ready():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if not self._done.done():
            self._done.set_result(None)

    def on_expiration(self) -> None:
        pass  # on_complete runs on expiry too and wakes the handler


class FetchWaiters:
    """The broker's fetch purgatory; the server's TimerDriver advances its timer."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.purgatory = DelayedOperationPurgatory("Fetch", timer)
        self._waiting: set[DelayedFetch] = set()
        self._draining = False

    async def wait(
        self,
        keys: list[tuple[str, int]],
        max_wait_ms: int,
        ready: Callable[[], bool],
        kind: str = "Fetch",
    ) -> None:
        """``kind`` names the purgatory Kafka would use (Fetch, or Produce for acks=all):
        both wait here, the metrics count them apart."""
        if self._draining:
            return  # shutting down: answer at once with what there is
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        operation = DelayedFetch(max_wait_ms, ready, done)
        operation.kind = kind
        if self.purgatory.try_complete_else_watch(operation, keys):
            return
        self._waiting.add(operation)
        try:
            await done
        finally:
            self._waiting.discard(operation)

    def waiting_by_kind(self) -> dict[str, int]:
        """Operations waiting now, by kind (Kafka's PurgatorySize)."""
        counts: dict[str, int] = {}
        for operation in self._waiting:
            counts[operation.kind] = counts.get(operation.kind, 0) + 1
        return counts

    def notify(self, topic: str, partition: int) -> None:
        """Data arrived in a partition: complete the fetches it satisfies."""
        self.purgatory.check_and_complete((topic, partition))

    def drain(self) -> None:
        """Shutdown has begun: answer every waiting fetch now, and wait for no new one."""
        self._draining = True
        for operation in list(self._waiting):
            operation.force_complete()

    def close(self) -> None:
        self.drain()
        self.purgatory.shutdown()
