"""``ReplicaFetcher.close`` ends its loop even when one cancellation is swallowed (as
3.11's ``asyncio.wait_for`` did, gh-86296): a broker's shutdown must not wait for ever."""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.broker.replica_fetcher import FetcherSettings, ReplicaFetcher


def test_close_ends_a_loop_that_swallows_one_cancellation() -> None:
    async def scenario() -> int:
        fetcher = ReplicaFetcher(1, 2, 0, replica_manager=Any, address_of=lambda _b: None,
                                 settings=FetcherSettings())  # fmt: skip
        swallowed = 0

        async def loop_that_swallows_once() -> None:
            nonlocal swallowed
            while True:
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    if swallowed:
                        raise
                    swallowed += 1  # lost, as a library call could lose it

        fetcher._run = loop_that_swallows_once  # type: ignore[method-assign]
        fetcher.start()
        await asyncio.sleep(0.05)
        closing = asyncio.ensure_future(fetcher.close())
        done, _ = await asyncio.wait([closing], timeout=10)
        assert done, "close() is still waiting for the loop"
        return swallowed

    assert asyncio.run(scenario()) == 1
