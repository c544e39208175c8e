"""Request purgatory: operations that wait for a condition or a timeout (Kafka's
``DelayedOperation`` and ``DelayedOperationPurgatory``).

A delayed operation (a Fetch waiting for ``min_bytes``, a Produce waiting for ``acks=all``, a
JoinGroup waiting for the rest of the group...) is *watched* under one or more keys (a partition, a
group) and put in a :class:`~odradek.broker.timing_wheel.Timer`. Whoever changes the state behind
a key calls :meth:`DelayedOperationPurgatory.check_and_complete`, which asks each watcher of that
key whether it can finish now. Whatever happens first, completion or timeout, wins; the other is a
no-op, so every operation completes exactly once:

* ``try_complete()`` checks the condition and, when met, calls ``force_complete()`` and returns
  its result (Kafka's convention);
* ``force_complete()`` flips the ``completed`` flag, cancels the timer task and calls
  ``on_complete()`` -- only the first call does anything and returns True;
* on timeout the timer runs the task: ``force_complete()`` then, only if that call won,
  ``on_expiration()``.

Everything runs on one event loop, so there are no locks; completion is still idempotent because
callbacks can re-enter the purgatory (an ``on_complete`` may watch new operations or check other
keys). Completed operations are removed from a key's watch list when that key is checked; an
operation that completed by timeout or under another key lingers until a purge, which runs once
more than ``purge_interval`` operations have completed since the last one.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence

from odradek.broker.timing_wheel import Timer, TimerDriver, TimerTask

# Timer and TimerDriver are re-exported: a purgatory user needs all three.
__all__ = ["DelayedOperation", "DelayedOperationPurgatory", "Timer", "TimerDriver", "TimerTask"]

log = logging.getLogger(__name__)


class DelayedOperation(TimerTask):
    """Base class: implement :meth:`try_complete`, :meth:`on_complete` and :meth:`on_expiration`.

    Operations are kept in dicts by identity: a subclass must not define ``__eq__`` (a
    ``@dataclass`` subclass needs ``eq=False``).
    """

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.completed = False
        self.expired = False
        self._purgatory: DelayedOperationPurgatory | None = None

    # -- to implement ---------------------------------------------------------------------------
    def try_complete(self) -> bool:
        """Check the condition; when met, return ``self.force_complete()``, else False."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """The operation's single completion (after success *or* timeout): send the response."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Called after :meth:`on_complete` when the completion was caused by the timeout."""

    # -- machinery ------------------------------------------------------------------------------
    def force_complete(self) -> bool:
        """Complete now; True only for the call that actually completed the operation."""
        if self.completed:
            return False
        self.completed = True
        self.cancel()
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._operation_completed(self)
        self.on_complete()
        return True

    def run(self) -> None:
        # Timer expiry: only a timeout that wins the race reports expiration.
        if self.force_complete():
            self.expired = True
            self.on_expiration()


class _Watchers:
    """Operations watched under one key, in insertion order (a dict used as an ordered set)."""

    __slots__ = ("operations",)

    def __init__(self) -> None:
        self.operations: dict[DelayedOperation, None] = {}


class DelayedOperationPurgatory:
    """Watch lists per key plus a timer; see the module docstring."""

    def __init__(self, name: str, timer: Timer, *, purge_interval: int = 1000) -> None:
        self.name = name
        self.timer = timer
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, _Watchers] = {}
        self._watched_count = 0  # entries over all watch lists, including completed ones
        self._pending: dict[DelayedOperation, None] = {}  # not completed yet
        self._completed_since_purge = 0
        self._shut_down = False

    def try_complete_else_watch(
        self, operation: DelayedOperation, watch_keys: Sequence[Hashable]
    ) -> bool:
        """Complete ``operation`` now if possible (True); otherwise watch it under every key and
        start its timeout (False)."""
        if self._shut_down:
            raise RuntimeError(f"purgatory {self.name} is shut down")
        if operation.completed:
            return False
        if operation.try_complete():
            return True
        operation._purgatory = self
        self._pending[operation] = None
        for key in watch_keys:
            if operation.completed:
                break
            watchers = self._watchers.get(key)
            if watchers is None:
                watchers = self._watchers[key] = _Watchers()
            if operation not in watchers.operations:
                watchers.operations[operation] = None
                self._watched_count += 1
        if not operation.completed:
            self.timer.add(operation)
        self._maybe_purge()
        return operation.completed

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete the operations watched under ``key``; return how many completed."""
        watchers = self._watchers.get(key)
        if watchers is None:
            return 0
        completed = 0
        # A snapshot: completion callbacks may watch new operations under this same key.
        for operation in list(watchers.operations):
            if operation not in watchers.operations:
                continue
            if operation.completed:
                self._unwatch(key, watchers, operation)
                continue
            try:
                done = operation.try_complete()
            except Exception:
                log.exception("purgatory %s: try_complete of %r failed", self.name, operation)
                continue
            if done or operation.completed:
                self._unwatch(key, watchers, operation)
                if done:
                    completed += 1
        if not watchers.operations and self._watchers.get(key) is watchers:
            del self._watchers[key]
        return completed

    def watched(self) -> int:
        """Entries in all watch lists (an operation watched under two keys counts twice; completed
        operations count until purged)."""
        return self._watched_count

    def delayed(self) -> int:
        """Operations still waiting (neither completed nor expired)."""
        return len(self._pending)

    def watch_keys(self) -> int:
        """Number of keys with a watch list (for tests and metrics)."""
        return len(self._watchers)

    def purge_completed(self) -> int:
        """Drop completed operations from every watch list; return how many entries went."""
        purged = 0
        for key in list(self._watchers):
            watchers = self._watchers[key]
            done = [op for op in watchers.operations if op.completed]
            for op in done:
                del watchers.operations[op]
            purged += len(done)
            if not watchers.operations:
                del self._watchers[key]
        self._watched_count -= purged
        self._completed_since_purge = 0
        return purged

    def shutdown(self) -> None:
        """Complete every waiting operation now (``on_complete`` runs, ``on_expiration`` does
        not), so nobody waits on a purgatory that is gone, and forget all watch lists. Later
        :meth:`try_complete_else_watch` calls raise RuntimeError."""
        self._shut_down = True
        pending = list(self._pending)
        self._pending.clear()
        self._watchers.clear()
        self._watched_count = 0
        for operation in pending:
            operation._purgatory = None
            try:
                operation.force_complete()
            except Exception:
                log.exception("purgatory %s: completing %r at shutdown", self.name, operation)

    def _unwatch(self, key: Hashable, watchers: _Watchers, operation: DelayedOperation) -> None:
        # A callback may have re-entered check_and_complete for this key and unwatched it already.
        if operation in watchers.operations:
            del watchers.operations[operation]
            self._watched_count -= 1

    def _operation_completed(self, operation: DelayedOperation) -> None:
        if operation in self._pending:
            del self._pending[operation]
            self._completed_since_purge += 1

    def _maybe_purge(self) -> None:
        if self._completed_since_purge > self.purge_interval:
            self.purge_completed()
