"""BrokerChannel.close: a channel ends even when a cancellation is swallowed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from odradek.cluster.controller import channel as channel_module
from odradek.cluster.controller.channel import BrokerChannel
from odradek.cluster.controller.request_batch import OutgoingRequest
from odradek.cluster.zk.codecs import BrokerEndpoint


def test_close_ends_a_channel_whose_cancellation_was_swallowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before Python 3.12, asyncio.wait_for returns the inner result instead of raising
    CancelledError when the cancellation arrives as the exchange completes. The channel
    then waited on its empty queue for ever and close() with it, which held a resigning
    controller, and the broker's shutdown, until it was killed."""

    async def racy_wait_for(awaitable: Any, timeout: float) -> Any:
        inner = asyncio.ensure_future(awaitable)
        try:
            return await asyncio.shield(inner)
        except asyncio.CancelledError:
            inner.cancel()
            return "the answer that came with the cancellation"

    answered: list[Any] = []

    async def scenario() -> None:
        endpoint = BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9, "PLAINTEXT")
        channel = BrokerChannel(1, 2, endpoint, timeout_s=30)

        async def slow_exchange(_item: OutgoingRequest) -> Any:
            await asyncio.sleep(60)

        channel._exchange = slow_exchange  # type: ignore[method-assign]
        request = OutgoingRequest(2, 4, 7, None, lambda broker, response: answered.append(response))
        channel.queue.put_nowait(request)
        await asyncio.sleep(0.05)  # the exchange is under way
        closing = asyncio.ensure_future(channel.close())
        done, _ = await asyncio.wait([closing], timeout=5)
        assert closing in done, "close() did not return"
        assert channel._task.done()

    monkeypatch.setattr(channel_module.asyncio, "wait_for", racy_wait_for)
    asyncio.run(scenario())
    assert answered == ["the answer that came with the cancellation"]
