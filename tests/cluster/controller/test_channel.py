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
    CancelledError when the cancellation arrives as the exchange completes (the race is
    played here through odradek.timeouts.wait_for, which no longer has it). The channel
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

    monkeypatch.setattr(channel_module.timeouts, "wait_for", racy_wait_for)
    asyncio.run(scenario())
    assert answered == ["the answer that came with the cancellation"]


def test_refusals_and_bugs_are_said_once_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    """A broker refusing the controller's credentials, or an unexpected error, neither ends
    the channel (the broker would never hear from the controller again) nor floods the
    log: one ERROR line per distinct failure, then the request goes through."""
    from odradek.cluster.peer import AuthenticationError

    failures: list[BaseException] = [
        *(AuthenticationError("SASL_AUTHENTICATION_FAILED") for _ in range(3)),
        *(TypeError("a bug") for _ in range(2)),
    ]
    answered: list[Any] = []

    async def scenario() -> None:
        endpoint = BrokerEndpoint("INTERNAL", "127.0.0.1", 9, "SASL_SSL")
        channel = BrokerChannel(1, 2, endpoint, timeout_s=30)

        async def flaky_exchange(_item: OutgoingRequest) -> Any:
            if failures:
                raise failures.pop(0)
            return "answered"

        channel._exchange = flaky_exchange  # type: ignore[method-assign]
        channel.queue.put_nowait(
            OutgoingRequest(2, 4, 7, None, lambda _broker, response: answered.append(response))
        )
        for _ in range(100):
            if answered:
                break
            await asyncio.sleep(0.05)
        await channel.close()

    with caplog.at_level("INFO", logger="odradek.cluster.controller.channel"):
        asyncio.run(scenario())
    assert answered == ["answered"]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2, errors
    assert "cannot reach broker 2 on the inter-broker listener INTERNAL" in errors[0]
    assert "SASL_AUTHENTICATION_FAILED" in errors[0]
