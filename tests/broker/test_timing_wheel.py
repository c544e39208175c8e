"""The hierarchical timing wheel, driven by a hand-moved clock (and the asyncio driver)."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.timing_wheel import Timer, TimerDriver, TimerTask


class FakeClock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Recorder(TimerTask):
    """Records the clock reading at which it ran."""

    def __init__(self, delay_ms: int, clock: FakeClock, log: list[tuple[int, Recorder]]) -> None:
        super().__init__(delay_ms)
        self.clock = clock
        self.log = log
        self.expiration = clock.now + delay_ms
        self.runs = 0

    def run(self) -> None:
        self.runs += 1
        self.log.append((self.clock.now, self))


def make(start: int = 0) -> tuple[FakeClock, Timer, list[tuple[int, Recorder]]]:
    clock = FakeClock(start)
    return clock, Timer(tick_ms=1, wheel_size=20, clock=clock), []


def advance(clock: FakeClock, timer: Timer, now: int) -> int:
    clock.now = now
    return timer.advance_clock(now)


# Boundaries of each level with tick 1 and 20 buckets: 20 ms, 400 ms, 8 s, 160 s.
BOUNDARY_DELAYS = sorted(
    {d for edge in (20, 400, 8000, 160_000, 3_200_000) for d in (edge - 1, edge, edge + 1)}
    | {1, 2, 19, 21, 37, 399, 401, 1234, 7999, 8001, 65_432}
)


@pytest.mark.parametrize("delay", BOUNDARY_DELAYS)
@pytest.mark.parametrize("start", [0, 7, 399, 123_457])
def test_task_fires_exactly_at_its_expiration(delay: int, start: int) -> None:
    clock, timer, log = make(start)
    task = Recorder(delay, clock, log)
    timer.add(task)
    assert timer.size == 1
    # Advance in a few uneven steps up to one ms before: it must not fire early.
    for frac in (0.25, 0.5, 0.9):
        target = start + int((delay - 1) * frac)
        if target > clock.now:
            assert advance(clock, timer, target) == 0
    assert advance(clock, timer, start + delay - 1) == 0
    assert task.runs == 0
    assert advance(clock, timer, start + delay) == 1
    assert log == [(start + delay, task)]
    assert timer.size == 0
    assert advance(clock, timer, start + delay + 10_000) == 0


def test_overflow_wheels_are_created_on_demand() -> None:
    clock, timer, log = make()
    assert timer.wheel.overflow_wheel is None
    timer.add(Recorder(10, clock, log))
    assert timer.wheel.overflow_wheel is None
    timer.add(Recorder(10_000, clock, log))  # needs level 3 (8 s .. 160 s)
    level1 = timer.wheel.overflow_wheel
    assert level1 is not None and level1.tick_ms == 20 and level1.interval_ms == 400
    level2 = level1.overflow_wheel
    assert level2 is not None and level2.tick_ms == 400 and level2.interval_ms == 8000
    level3 = level2.overflow_wheel
    assert level3 is not None and level3.tick_ms == 8000
    assert level3.overflow_wheel is None


def test_task_cascades_down_into_finer_wheels() -> None:
    clock, timer, log = make()
    task = Recorder(1005, clock, log)  # level 2 (400 ms ticks): bucket [800, 1200)
    timer.add(task)
    level1 = timer.wheel.overflow_wheel
    assert level1 is not None
    level2 = level1.overflow_wheel
    assert level2 is not None
    assert task._entry is not None and task._entry.bucket in level2._buckets
    advance(clock, timer, 799)
    assert task._entry.bucket in level2._buckets
    advance(clock, timer, 800)  # the level-2 bucket expires: level-1 bucket [1000, 1020)
    assert task.runs == 0
    assert task._entry.bucket in level1._buckets
    advance(clock, timer, 999)
    assert task._entry.bucket in level1._buckets
    advance(clock, timer, 1000)  # the level-1 bucket expires: level-0 bucket 1005
    assert task._entry.bucket in timer.wheel._buckets
    advance(clock, timer, 1004)
    assert task.runs == 0
    advance(clock, timer, 1005)
    assert log == [(1005, task)]


def test_cancel_before_and_after_cascading() -> None:
    clock, timer, log = make()
    early = Recorder(50, clock, log)
    late = Recorder(5000, clock, log)
    keep = Recorder(5000, clock, log)
    for task in (early, late, keep):
        timer.add(task)
    assert timer.size == 3
    early.cancel()
    assert timer.size == 2 and not early.scheduled
    advance(clock, timer, 4990)  # late and keep have cascaded to level 0 by now
    assert late.scheduled
    late.cancel()
    late.cancel()  # idempotent
    assert timer.size == 1
    advance(clock, timer, 6000)
    assert [t for _, t in log] == [keep]
    assert early.runs == 0 and late.runs == 0


def test_cancelled_task_can_be_added_again_and_readding_moves_it() -> None:
    clock, timer, log = make()
    task = Recorder(100, clock, log)
    timer.add(task)
    task.cancel()
    timer.add(task)
    assert timer.size == 1
    advance(clock, timer, 50)
    task.delay_ms = 200
    timer.add(task)  # moves it: now due at 250, and only once
    assert timer.size == 1
    advance(clock, timer, 249)
    assert task.runs == 0
    advance(clock, timer, 250)
    assert task.runs == 1
    assert timer.size == 0


def test_due_task_runs_on_next_advance_not_inside_add() -> None:
    clock, timer, log = make(1000)
    task = Recorder(0, clock, log)
    timer.add(task)
    assert task.runs == 0
    assert timer.next_expiration_ms() == 1000
    assert timer.advance_clock(1000) == 1
    assert task.runs == 1
    cancelled = Recorder(0, clock, log)
    timer.add(cancelled)
    cancelled.cancel()
    assert timer.advance_clock(1000) == 0


def test_next_expiration_tracks_the_earliest_bucket() -> None:
    clock, timer, log = make()
    assert timer.next_expiration_ms() is None
    timer.add(Recorder(500, clock, log))
    first = timer.next_expiration_ms()
    assert first is not None and first <= 500
    timer.add(Recorder(7, clock, log))
    assert timer.next_expiration_ms() == 7
    advance(clock, timer, 7)
    later = timer.next_expiration_ms()
    assert later is not None and 7 < later <= 500


def test_failing_task_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    clock, timer, log = make()

    class Boom(TimerTask):
        def run(self) -> None:
            raise RuntimeError("boom")

    timer.add(Boom(5))
    good = Recorder(5, clock, log)
    timer.add(good)
    assert advance(clock, timer, 5) == 2
    assert good.runs == 1
    assert "boom" in caplog.text


def test_negative_delay_is_rejected() -> None:
    with pytest.raises(ValueError):
        TimerTask(-1)


@settings(max_examples=60, deadline=None)
@given(
    delays=st.lists(st.integers(min_value=0, max_value=200_000), min_size=1, max_size=40),
    steps=st.lists(st.integers(min_value=0, max_value=30_000), min_size=1, max_size=40),
    cancel_mask=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_random_schedules_fire_on_time_and_in_order(
    delays: list[int], steps: list[int], cancel_mask: list[bool]
) -> None:
    clock, timer, log = make(17)
    tasks = [Recorder(d, clock, log) for d in delays]
    for task in tasks:
        timer.add(task)
    cancelled = {id(t) for t, c in zip(tasks, cancel_mask, strict=False) if c}
    for task in tasks:
        if id(task) in cancelled:
            task.cancel()
    previous = clock.now
    for step in [*steps, 250_000]:
        fired_before = len(log)
        advance(clock, timer, clock.now + step)
        for when, task in log[fired_before:]:
            # fired in this advance: due by now, and not due at the previous reading
            assert task.expiration <= when
            assert task.expiration > previous or task.delay_ms == 0
        previous = clock.now
    assert sorted(id(t) for _, t in log) == sorted(id(t) for t in tasks if id(t) not in cancelled)
    assert all(t.runs <= 1 for t in tasks)
    expirations = [t.expiration for _, t in log]
    # within one advance tasks fire in expiration order, across advances by construction
    assert expirations == sorted(expirations)
    assert timer.size == 0


def test_driver_sleeps_until_due_and_wakes_for_earlier_tasks() -> None:
    async def scenario() -> None:
        timer = Timer()
        fired: dict[str, float] = {}

        class Mark(TimerTask):
            def __init__(self, delay_ms: int, name: str) -> None:
                super().__init__(delay_ms)
                self.name = name

            def run(self) -> None:
                fired[self.name] = time.monotonic()

        async with TimerDriver(timer) as driver:
            start = time.monotonic()
            timer.add(Mark(400, "late"))
            await asyncio.sleep(0.02)
            timer.add(Mark(30, "early"))  # must wake the driver that sleeps for ~400 ms
            for _ in range(100):
                if "early" in fired:
                    break
                await asyncio.sleep(0.01)
            assert "early" in fired and "late" not in fired
            assert fired["early"] - start < 0.3
            for _ in range(100):
                if "late" in fired:
                    break
                await asyncio.sleep(0.01)
            assert fired["late"] - start >= 0.39
            advances_before = driver.advances
            await asyncio.sleep(0.2)  # idle: no polling every millisecond
            assert driver.advances - advances_before <= 2
        assert not driver.running

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_driver_stop_is_synchronous_and_wait_stopped_awaits() -> None:
    async def scenario() -> None:
        timer = Timer()
        driver = TimerDriver(timer)
        driver.start()
        driver.start()  # idempotent
        driver.wake()
        await asyncio.sleep(0)
        driver.stop()
        await driver.wait_stopped()
        assert not driver.running

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_wakeup_in_the_same_step_as_stop_does_not_lose_the_stop() -> None:
    # On Python 3.11 asyncio.wait_for returns the result of an awaitable that completes in
    # the step a cancellation arrives, dropping the cancellation (CPython gh-86296): the
    # driver then ran on and wait_stopped() never returned (a purgatory drain wakes the
    # driver just before a broker stops it).
    async def main() -> None:
        driver = TimerDriver(Timer())
        driver.start()
        await asyncio.sleep(0.05)  # the driver is asleep, waiting to be woken
        task = next(t for t in asyncio.all_tasks() if t.get_name() == "timer-driver")

        async def wake_then_stop() -> None:  # all in one step, as a broker's shutdown does
            driver.wake()
            driver.stop()
            await driver.wait_stopped()

        stopper = asyncio.ensure_future(wake_then_stop())
        await asyncio.wait({stopper}, timeout=3)  # (wait_for would cancel it: a second stop)
        stopped = stopper.done()
        stopper.cancel()
        assert stopped and task.done()

    asyncio.run(main())
