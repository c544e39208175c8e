"""``wait_for`` that never loses a cancellation, for every layer (broker, cluster, client).

On Python 3.11, ``asyncio.wait_for`` runs its awaitable in a separate task; when the
caller is cancelled in the same loop step as that awaitable completes, it returns the
result and the cancellation is gone (CPython gh-86296, fixed in 3.12 by building
``wait_for`` on ``asyncio.timeout``). A loop that is being stopped then keeps running,
and whoever awaits it after ``cancel()`` waits for ever: a broker that does not stop.

This is 3.12's construction: the awaitable runs in the caller's own task under an
``asyncio.timeout`` scope, so a cancellation is delivered into it like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(awaitable: Awaitable[T], timeout: float | None) -> T:
    """Await ``awaitable``; raise ``TimeoutError`` (and cancel it) after ``timeout`` s."""
    async with asyncio.timeout(timeout):
        return await awaitable


async def cancel_until_done(task: asyncio.Task[object], round_s: float = 1.0) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling again each ``round_s``:
    a cancellation some library call swallows must not leave a loop running and a
    shutdown waiting on it for ever. Its outcome is retrieved, not raised."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=round_s)
    if not task.cancelled():
        task.exception()  # retrieved: a task that failed is not logged twice
