"""Hierarchical timing wheel: O(1) timers for delayed operations (Kafka's ``TimingWheel``).

A broker holds thousands of timers at once (one per waiting Fetch, Produce with ``acks=all``,
JoinGroup, member session...) and almost all of them are cancelled before they fire. A heap would
make each insert and cancel O(log n); the timing wheel makes both O(1):

* A wheel has ``wheel_size`` buckets, each ``tick_ms`` wide; it covers ``interval = tick_ms *
  wheel_size`` milliseconds from its ``current_time_ms``. A task expiring at ``t`` goes into
  bucket ``(t // tick_ms) % wheel_size``. Buckets are doubly linked lists, so adding and cancelling
  (unlinking) a task is O(1).
* A task too far in the future for this wheel goes to an *overflow* wheel whose tick is this
  wheel's whole interval (created on demand). So with ``tick_ms=1, wheel_size=20`` the levels
  cover 20 ms, 400 ms, 8 s, 160 s, ...
* Only buckets, never tasks, are ordered by time: a small heap holds one entry per non-empty
  bucket (its expiration = the start of its time slot). When a bucket of a higher level expires,
  its tasks are re-inserted and so cascade into finer wheels (or run, when they are due).

Everything runs on the broker's single asyncio event loop, so there are no locks; the clock is
injectable (milliseconds, ``int``) so tests drive time by hand with :meth:`Timer.advance_clock`.
:class:`TimerDriver` is the asyncio glue: an owned task that sleeps until the next bucket is due
instead of polling every millisecond.

Semantics worth knowing:

* A task whose expiration is already reached when it is added does not run inside :meth:`Timer.add`
  (which would re-enter the caller); it runs on the next :meth:`Timer.advance_clock`, which the
  driver schedules at once. Kafka hands such tasks to an executor for the same reason.
* Exceptions raised by a task's ``run()`` are logged and do not stop the other due tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable

from odradek import timeouts

__all__ = [
    "Clock",
    "Timer",
    "TimerDriver",
    "TimerTask",
    "TimingWheel",
    "monotonic_ms",
]

log = logging.getLogger(__name__)

Clock = Callable[[], int]
"""A clock returning milliseconds as an ``int``."""


def monotonic_ms() -> int:
    """The default timer clock: monotonic milliseconds (immune to wall-clock jumps)."""
    return time.monotonic_ns() // 1_000_000


class TimerTask:
    """Something to run once after ``delay_ms``; subclasses implement :meth:`run`.

    A task is in at most one bucket at a time: adding it again moves it. :meth:`cancel` unlinks it
    in O(1); a cancelled task can be added again later.
    """

    __slots__ = ("_entry", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        self.delay_ms = delay_ms
        self._entry: _TimerTaskEntry | None = None

    def run(self) -> None:
        """Called once when the task expires (unless cancelled first)."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Stop the task from running; a no-op when it is not scheduled."""
        entry = self._entry
        if entry is not None:
            self._entry = None
            if entry.bucket is not None:
                entry.bucket.remove(entry)

    @property
    def scheduled(self) -> bool:
        """True while the task sits in a timer, waiting to run."""
        return self._entry is not None

    def _set_entry(self, entry: _TimerTaskEntry) -> None:
        # A task lives in one entry only: re-adding a task replaces (unlinks) its older entry.
        if self._entry is not None and self._entry is not entry:
            old = self._entry
            if old.bucket is not None:
                old.bucket.remove(old)
        self._entry = entry


class _TimerTaskEntry:
    """A node of a bucket's doubly linked list, pointing at its task."""

    __slots__ = ("bucket", "expiration_ms", "next", "prev", "task")

    def __init__(self, task: TimerTask | None, expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.bucket: _Bucket | None = None
        self.prev: _TimerTaskEntry = self
        self.next: _TimerTaskEntry = self

    @property
    def cancelled(self) -> bool:
        return self.task is None or self.task._entry is not self


class _Bucket:
    """One slot of a wheel: a circular doubly linked list of entries with a sentinel root."""

    __slots__ = ("_timer", "expiration_ms", "root")

    def __init__(self, timer: Timer) -> None:
        self._timer = timer
        self.root = _TimerTaskEntry(None, -1)
        self.expiration_ms = -1  # start of the time slot this bucket holds; -1 when empty

    def add(self, entry: _TimerTaskEntry) -> None:
        if entry.bucket is not None:
            entry.bucket.remove(entry)
        tail = self.root.prev
        entry.next = self.root
        entry.prev = tail
        tail.next = entry
        self.root.prev = entry
        entry.bucket = self
        self._timer._size += 1

    def remove(self, entry: _TimerTaskEntry) -> None:
        if entry.bucket is not self:
            return
        entry.prev.next = entry.next
        entry.next.prev = entry.prev
        entry.prev = entry.next = entry
        entry.bucket = None
        self._timer._size -= 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the slot start; True when it changed (the bucket must then be queued again)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def flush(self, reinsert: Callable[[_TimerTaskEntry], None]) -> None:
        """Unlink every entry and hand it to ``reinsert`` (which cascades it down or runs it)."""
        entry = self.root.next
        while entry is not self.root:
            following = entry.next
            self.remove(entry)
            reinsert(entry)
            entry = following
        self.expiration_ms = -1

    def __len__(self) -> int:
        count = 0
        entry = self.root.next
        while entry is not self.root:
            count += 1
            entry = entry.next
        return count


class TimingWheel:
    """One level of the hierarchy; see the module docstring."""

    __slots__ = (
        "_buckets",
        "_overflow",
        "_timer",
        "current_time_ms",
        "interval_ms",
        "tick_ms",
        "wheel_size",
    )

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, timer: Timer) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self._timer = timer
        self._buckets = [_Bucket(timer) for _ in range(wheel_size)]
        # Rounded down to a multiple of tick_ms so bucket boundaries are stable.
        self.current_time_ms = start_ms - (start_ms % tick_ms)
        self._overflow: TimingWheel | None = None

    @property
    def overflow_wheel(self) -> TimingWheel | None:
        return self._overflow

    def add(self, entry: _TimerTaskEntry) -> bool:
        """Place ``entry`` in this wheel or an overflow wheel; False when it is already due."""
        expiration = entry.expiration_ms
        if entry.cancelled:
            return False
        if expiration < self.current_time_ms + self.tick_ms:
            return False  # due now: the caller runs it
        if expiration < self.current_time_ms + self.interval_ms:
            virtual_id = expiration // self.tick_ms
            bucket = self._buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            # Only a bucket whose slot changed needs a (new) place in the timer's queue: a bucket
            # already queued for this slot is found there when the slot starts.
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self._timer._enqueue_bucket(bucket)
            return True
        if self._overflow is None:
            self._overflow = TimingWheel(
                self.interval_ms, self.wheel_size, self.current_time_ms, self._timer
            )
        return self._overflow.add(entry)

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - (time_ms % self.tick_ms)
            if self._overflow is not None:
                self._overflow.advance_clock(self.current_time_ms)


class Timer:
    """A hierarchical timing wheel driven by :meth:`advance_clock` (Kafka's ``SystemTimer``).

    ``tick_ms=1, wheel_size=20`` are Kafka's defaults. ``clock`` returns milliseconds; task
    expirations are ``clock() + task.delay_ms`` at :meth:`add` time.
    """

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, *, clock: Clock = monotonic_ms):
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError("tick_ms must be >= 1 and wheel_size >= 2")
        self._clock = clock
        self._size = 0
        self._sequence = 0  # tie-breaker so the heap never compares buckets
        self._queue: list[tuple[int, int, _Bucket]] = []
        # Tasks already due when added: run on the next advance_clock (never inside add()).
        self._due = _Bucket(self)
        self._wakeup: Callable[[], None] | None = None
        self.wheel = TimingWheel(tick_ms, wheel_size, clock(), self)

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def size(self) -> int:
        """Number of scheduled (not yet run, not cancelled) tasks."""
        return self._size

    def __len__(self) -> int:
        return self._size

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now (moving it if already scheduled)."""
        entry = _TimerTaskEntry(task, self._clock() + task.delay_ms)
        task._set_entry(entry)
        self._insert(entry, run_due=False)

    def next_expiration_ms(self) -> int | None:
        """When :meth:`advance_clock` next has work: the earliest bucket start, or None."""
        if self._due.root.next is not self._due.root:
            return self.wheel.current_time_ms
        while self._queue:
            expiration, _, bucket = self._queue[0]
            if bucket.expiration_ms == expiration:
                return expiration
            heapq.heappop(self._queue)  # stale: the bucket was flushed since it was queued
        return None

    def advance_clock(self, now_ms: int | None = None) -> int:
        """Run every task due at ``now_ms`` (default: the clock); return how many ran."""
        if now_ms is None:
            now_ms = self._clock()
        fired = 0
        if self._due.root.next is not self._due.root:
            due: list[_TimerTaskEntry] = []
            self._due.flush(due.append)
            for entry in due:
                fired += self._run(entry)
        while self._queue and self._queue[0][0] <= now_ms:
            expiration, _, bucket = heapq.heappop(self._queue)
            if bucket.expiration_ms != expiration:
                continue  # stale queue entry
            self.wheel.advance_clock(expiration)
            expired: list[_TimerTaskEntry] = []
            bucket.flush(expired.append)
            for entry in expired:
                fired += self._insert(entry, run_due=True)
        # Moving the wheels up to `now` keeps later delays short-path (fewer cascades); it is safe
        # because every bucket whose slot started at or before `now` has just been flushed.
        self.wheel.advance_clock(now_ms)
        return fired

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` whenever the earliest due time moves earlier (used by the driver)."""
        self._wakeup = callback

    def _insert(self, entry: _TimerTaskEntry, *, run_due: bool) -> int:
        if self.wheel.add(entry):
            return 0
        if entry.cancelled:
            return 0
        if run_due:
            return self._run(entry)
        self._due.add(entry)
        if self._wakeup is not None:
            self._wakeup()
        return 0

    def _run(self, entry: _TimerTaskEntry) -> int:
        task = entry.task
        if task is None or entry.cancelled:
            return 0
        task._entry = None
        try:
            task.run()
        except Exception:
            log.exception("timer task %r failed", task)
        return 1

    def _enqueue_bucket(self, bucket: _Bucket) -> None:
        wake = self._wakeup is not None and (
            not self._queue or bucket.expiration_ms < self._queue[0][0]
        )
        self._sequence += 1
        heapq.heappush(self._queue, (bucket.expiration_ms, self._sequence, bucket))
        if wake and self._wakeup is not None:
            self._wakeup()


class TimerDriver:
    """Advance a :class:`Timer` from the event loop, sleeping until the next bucket is due.

    The driver owns one task; :meth:`start` creates it and :meth:`stop` cancels and awaits it.
    ``max_sleep_ms`` bounds a sleep so that a clock that is not the loop's own (the timer's clock
    is injectable) cannot leave the driver asleep for long.
    """

    def __init__(self, timer: Timer, *, max_sleep_ms: int = 1000) -> None:
        self.timer = timer
        self.max_sleep_ms = max_sleep_ms
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.advances = 0  # how many times the loop woke up to advance the clock (observability)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Create the driving task on the running loop (idempotent)."""
        if self.running:
            return
        self.timer.set_wakeup(self._wake.set)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="timer-driver")

    def wake(self) -> None:
        """Re-compute the sleep now (the timer also does this by itself when a task is added
        that is due earlier than the current sleep ends)."""
        self._wake.set()

    def stop(self) -> None:
        """Cancel the driving task; :meth:`wait_stopped` awaits its end."""
        self.timer.set_wakeup(None)
        if self._task is not None:
            self._task.cancel()

    async def wait_stopped(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def aclose(self) -> None:
        """Stop and wait for the task to end."""
        self.stop()
        await self.wait_stopped()

    async def __aenter__(self) -> TimerDriver:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _run(self) -> None:
        timer = self.timer
        while True:
            self._wake.clear()
            timer.advance_clock()
            self.advances += 1
            next_ms = timer.next_expiration_ms()
            if next_ms is None:
                sleep_ms = self.max_sleep_ms
            else:
                sleep_ms = min(max(next_ms - timer.clock(), 0), self.max_sleep_ms)
            if sleep_ms <= 0:
                await asyncio.sleep(0)  # let others run, then fire what is due
                continue
            # timeouts.wait_for, not asyncio.wait_for: on Python 3.11 the latter swallows a
            # cancellation that arrives in the step its awaitable completes (gh-86296), and
            # a wake-up in the same step as stop() left this task running for ever.
            with contextlib.suppress(TimeoutError):
                await timeouts.wait_for(self._wake.wait(), sleep_ms / 1000)
