"""``odradek.timeouts.wait_for``: the cancellation that 3.11's ``asyncio.wait_for`` loses."""

from __future__ import annotations

import asyncio
import sys

import pytest

from odradek import timeouts


async def _cancelled_as_it_completes(wait_for) -> bool:
    """A loop that is stopped in the same step as its awaited future resolves: True when
    the cancellation reached it (the loop ended), False when it ran on."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    rounds = 0

    async def run() -> None:
        nonlocal rounds
        while True:
            await wait_for(future if rounds == 0 else asyncio.sleep(0.01), 5)
            rounds += 1
            if rounds > 3:  # it ran on: the cancellation was lost
                return

    task = asyncio.create_task(run())
    await asyncio.sleep(0)  # the task is now waiting on the future
    future.set_result(1)
    task.cancel()  # the same step: both wake-ups are queued together
    try:
        await task
    except asyncio.CancelledError:
        return True
    return False


def test_a_cancellation_in_the_step_the_awaitable_completes_is_kept() -> None:
    assert asyncio.run(_cancelled_as_it_completes(timeouts.wait_for))


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="fixed in CPython 3.12")
def test_the_3_11_asyncio_wait_for_loses_it() -> None:
    """The premise: without our wrapper, the loop runs on (gh-86296)."""
    assert not asyncio.run(_cancelled_as_it_completes(asyncio.wait_for))


def test_times_out_and_cancels_the_awaitable() -> None:
    async def scenario() -> bool:
        inner = asyncio.ensure_future(asyncio.sleep(10))
        with pytest.raises(TimeoutError):
            await timeouts.wait_for(inner, 0.05)
        return inner.cancelled()

    assert asyncio.run(scenario())


def test_returns_the_result_in_time() -> None:
    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    assert asyncio.run(timeouts.wait_for(value(), 1)) == 7


def test_cancel_until_done_ends_a_task_that_swallows_cancellations() -> None:
    async def scenario() -> int:
        swallowed = 0

        async def stubborn() -> None:
            nonlocal swallowed
            while True:
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    swallowed += 1
                    if swallowed == 3:
                        raise

        task = asyncio.create_task(stubborn())
        await asyncio.sleep(0.02)
        stopping = asyncio.ensure_future(timeouts.cancel_until_done(task, round_s=0.05))
        done, _ = await asyncio.wait([stopping], timeout=10)
        assert done and task.cancelled()
        return swallowed

    assert asyncio.run(scenario()) == 3


def test_cancel_until_done_retrieves_a_failure_quietly() -> None:
    async def scenario() -> None:
        async def fails() -> None:
            raise ValueError("boom")

        task = asyncio.create_task(fails())
        await asyncio.sleep(0)
        await timeouts.cancel_until_done(task)  # no raise

    asyncio.run(scenario())
