"""Delayed operations and the purgatory: complete exactly once, by condition or by timeout."""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from odradek.broker.timing_wheel import Timer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Waiter(DelayedOperation):
    """Completes once ``ready`` holds; counts its callbacks."""

    def __init__(self, delay_ms: int, ready: set[Hashable], needs: Hashable) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.needs = needs
        self.completions = 0
        self.expirations = 0
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        if self.needs in self.ready:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expirations += 1


def setup(purge_interval: int = 1000) -> tuple[FakeClock, Timer, DelayedOperationPurgatory]:
    clock = FakeClock()
    timer = Timer(clock=clock)
    return clock, timer, DelayedOperationPurgatory("test", timer, purge_interval=purge_interval)


def tick(clock: FakeClock, timer: Timer, now: int) -> None:
    clock.now = now
    timer.advance_clock(now)


def test_completes_immediately_without_watching() -> None:
    _, timer, purgatory = setup()
    op = Waiter(100, {"a"}, "a")
    assert purgatory.try_complete_else_watch(op, ["a"]) is True
    assert op.completions == 1 and op.expirations == 0
    assert purgatory.watched() == 0 and purgatory.delayed() == 0 and timer.size == 0


def test_completion_by_key_check_cancels_the_timeout() -> None:
    clock, timer, purgatory = setup()
    ready: set[Hashable] = set()
    op = Waiter(100, ready, "a")
    assert purgatory.try_complete_else_watch(op, ["a"]) is False
    assert purgatory.watched() == 1 and purgatory.delayed() == 1 and timer.size == 1
    assert purgatory.check_and_complete("a") == 0
    ready.add("a")
    assert purgatory.check_and_complete("b") == 0  # unrelated key
    assert purgatory.check_and_complete("a") == 1
    assert op.completed and op.completions == 1 and op.expirations == 0
    assert purgatory.watched() == 0 and purgatory.delayed() == 0 and timer.size == 0
    tick(clock, timer, 1000)
    assert op.completions == 1 and op.expirations == 0
    assert purgatory.check_and_complete("a") == 0


def test_expiration_completes_once_and_reports_expiry() -> None:
    clock, timer, purgatory = setup()
    op = Waiter(100, set(), "a")
    purgatory.try_complete_else_watch(op, ["a"])
    tick(clock, timer, 99)
    assert not op.completed
    tick(clock, timer, 100)
    assert op.completed and op.expired
    assert (op.completions, op.expirations) == (1, 1)
    # A late force_complete or key check does nothing.
    assert op.force_complete() is False
    op.ready.add("a")
    assert purgatory.check_and_complete("a") == 0
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.delayed() == 0


def test_completion_wins_over_a_later_timeout_and_vice_versa() -> None:
    clock, timer, purgatory = setup()
    first = Waiter(50, set(), "x")
    purgatory.try_complete_else_watch(first, ["x"])
    assert first.force_complete() is True
    assert first.force_complete() is False
    tick(clock, timer, 100)
    assert (first.completions, first.expirations) == (1, 0)

    second = Waiter(50, set(), "y")
    purgatory.try_complete_else_watch(second, ["y"])
    tick(clock, timer, 150)
    assert second.force_complete() is False
    assert (second.completions, second.expirations) == (1, 1)


def test_operation_watched_under_several_keys() -> None:
    _, _, purgatory = setup()
    ready: set[Hashable] = set()
    op = Waiter(1000, ready, "p1")
    purgatory.try_complete_else_watch(op, ["p1", "p2", "p3"])
    assert purgatory.watched() == 3 and purgatory.delayed() == 1
    ready.add("p1")
    assert purgatory.check_and_complete("p1") == 1
    # Still listed under p2/p3 until those keys are checked or a purge runs.
    assert purgatory.watched() == 2
    assert purgatory.check_and_complete("p2") == 0
    assert purgatory.watched() == 1
    assert purgatory.purge_completed() == 1
    assert purgatory.watched() == 0 and purgatory.watch_keys() == 0
    assert op.completions == 1


def test_expired_operations_are_purged_from_watch_lists() -> None:
    clock, timer, purgatory = setup(purge_interval=10)
    ops = [Waiter(10, set(), ("k", i)) for i in range(30)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [("k", i), "shared"])
    assert purgatory.watched() == 60
    tick(clock, timer, 10)
    assert all(op.expired for op in ops)
    assert purgatory.delayed() == 0
    assert purgatory.watched() == 60  # lingering until a purge
    # The next watch notices more than purge_interval completions and purges.
    fresh = Waiter(10, set(), "new")
    purgatory.try_complete_else_watch(fresh, ["new"])
    assert purgatory.watched() == 1
    assert purgatory.watch_keys() == 1


def test_below_purge_interval_nothing_is_purged() -> None:
    clock, timer, purgatory = setup(purge_interval=100)
    for i in range(5):
        purgatory.try_complete_else_watch(Waiter(1, set(), i), [i])
    tick(clock, timer, 5)
    purgatory.try_complete_else_watch(Waiter(1, set(), "z"), ["z"])
    assert purgatory.watched() == 6


def test_callbacks_may_reenter_the_purgatory() -> None:
    clock, timer, purgatory = setup()
    ready: set[Hashable] = {"go"}
    chained: list[Waiter] = []

    class Chaining(Waiter):
        def on_complete(self) -> None:
            super().on_complete()
            nxt = Waiter(100, set(), "never")
            chained.append(nxt)
            purgatory.try_complete_else_watch(nxt, ["k"])  # same key, mid-check
            purgatory.check_and_complete("k")

    op = Chaining(100, ready, "go")
    purgatory.try_complete_else_watch(op, ["k"])  # completes at once: "go" is ready
    assert op.completions == 1
    op2 = Chaining(100, set(), "later")
    purgatory.try_complete_else_watch(op2, ["k"])
    op2.ready.add("later")
    assert purgatory.check_and_complete("k") == 1
    assert op2.completions == 1
    assert all(c.completions == 0 for c in chained)
    assert purgatory.delayed() == 2  # the two chained operations wait
    tick(clock, timer, 100)
    assert all(c.expirations == 1 for c in chained)


def test_failing_try_complete_is_logged_and_others_still_complete(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, _, purgatory = setup()

    class Broken(Waiter):
        def try_complete(self) -> bool:
            if self.tries:
                raise RuntimeError("broken check")
            self.tries += 1
            return False

    broken = Broken(100, set(), "k")
    good = Waiter(100, {"k"} - {"k"}, "k")
    purgatory.try_complete_else_watch(broken, ["k"])
    purgatory.try_complete_else_watch(good, ["k"])
    good.ready.add("k")
    assert purgatory.check_and_complete("k") == 1
    assert good.completions == 1 and not broken.completed
    assert "broken check" in caplog.text


def test_shutdown_completes_waiting_operations_without_expiry() -> None:
    clock, timer, purgatory = setup()
    ops = [Waiter(100, set(), i) for i in range(3)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [i])
    purgatory.shutdown()
    assert all(op.completions == 1 and op.expirations == 0 for op in ops)
    assert timer.size == 0 and purgatory.watched() == 0 and purgatory.delayed() == 0
    tick(clock, timer, 500)
    assert all(op.completions == 1 for op in ops)
    with pytest.raises(RuntimeError):
        purgatory.try_complete_else_watch(Waiter(1, set(), "x"), ["x"])


def test_watching_without_keys_still_times_out() -> None:
    clock, timer, purgatory = setup()
    op = Waiter(20, set(), "x")
    assert purgatory.try_complete_else_watch(op, []) is False
    assert purgatory.watched() == 0 and purgatory.delayed() == 1
    tick(clock, timer, 20)
    assert op.expired and op.completions == 1


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 500), st.sets(st.integers(0, 4), min_size=1, max_size=3)),
        min_size=1,
        max_size=25,
    ),
    events=st.lists(
        st.one_of(
            st.tuples(st.just("ready"), st.integers(0, 4)),
            st.tuples(st.just("tick"), st.integers(0, 200)),
            st.tuples(st.just("force"), st.integers(0, 24)),
        ),
        max_size=40,
    ),
)
def test_random_interleavings_complete_each_operation_exactly_once(
    ops: list[tuple[int, set[int]]], events: list[tuple[str, int]]
) -> None:
    clock, timer, purgatory = setup(purge_interval=3)
    ready: set[Hashable] = set()
    waiters: list[tuple[Waiter, int]] = []
    for delay, keys in ops:
        needs = min(keys)
        op = Waiter(delay, ready, needs)
        purgatory.try_complete_else_watch(op, sorted(keys))
        waiters.append((op, clock.now + delay))
    for kind, value in events:
        if kind == "ready":
            ready.add(value)
            purgatory.check_and_complete(value)
        elif kind == "tick":
            tick(clock, timer, clock.now + value)
        elif value < len(waiters):
            waiters[value][0].force_complete()
        for op, deadline in waiters:
            assert op.completions <= 1 and op.expirations <= op.completions
            if op.expired:
                assert clock.now >= deadline
            if kind == "tick" and not op.completed:
                assert clock.now < deadline  # the timer just ran everything due
    tick(clock, timer, clock.now + 1000)
    for op, _ in waiters:
        assert op.completions == 1
    assert purgatory.delayed() == 0 and timer.size == 0
