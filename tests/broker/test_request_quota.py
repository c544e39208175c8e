"""RequestQuota (KIP-124): handler time charged per client, exemptions, bounded throttles."""

from __future__ import annotations

import asyncio
import datetime
import time
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.broker.client_quotas import REQUEST_PERCENTAGE, ClientQuotaManager, entity_key
from odradek.broker.request_quota import RequestQuota, is_exempt, with_throttle
from odradek.broker.requests import ChunkedResponse, DeferredResponse, ResponseValues
from odradek.protocol.build import build_response


def _ctx(client_id: str, api_key: int = 3, version: int = 12) -> Any:
    muted: list[int] = []
    header = SimpleNamespace(api_key=api_key, api_version=version, client_id=client_id)
    return SimpleNamespace(header=header, principal="User:ANONYMOUS", mute=muted.append,
                           muted=muted)  # fmt: skip


def _quota(percentage: float, client_id: str = "busy") -> RequestQuota:
    manager = ClientQuotaManager(2, 1.0)
    manager.update(entity_key({"client-id": client_id}), {REQUEST_PERCENTAGE: percentage})
    return RequestQuota(manager)


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_only_clients_with_a_quota_and_non_exempt_apis_are_timed() -> None:
    quota = _quota(10)
    assert quota.applies(_ctx("busy"), object())
    assert not quota.applies(_ctx("other"), object())
    # Inter-broker ClusterAction APIs, followers' fetches and acks=0 produces are exempt.
    assert not quota.applies(_ctx("busy", api_key=6), object())
    assert not quota.applies(_ctx("busy", api_key=1), SimpleNamespace(replica_id=2))
    assert quota.applies(_ctx("busy", api_key=1), SimpleNamespace(replica_id=-1))
    follower_v15 = SimpleNamespace(replica_id=-1, replica_state=SimpleNamespace(replica_id=3))
    assert is_exempt(1, follower_v15)
    assert is_exempt(0, SimpleNamespace(acks=0)) and not is_exempt(0, SimpleNamespace(acks=1))
    assert not _quota(10).manager.enabled("producer_byte_rate")


def test_handler_time_over_the_quota_throttles_and_mutes() -> None:
    quota = _quota(1)  # 1 % of one thread: 10 ms per second

    async def handler(ctx: Any, request: Any) -> Any:
        _busy(0.1)
        return build_response(3, 12, {"brokers": [], "topics": []})

    async def go() -> tuple[Any, Any]:
        ctx = _ctx("busy")
        result = await quota.handle(ctx, object(), handler)
        return ctx, result

    ctx, result = asyncio.run(go())
    # 100 ms is 10 percent-seconds; over the 1 s minimum window (2 samples of 1 s) that is
    # 10 %: (10 - 1) / 1 * 1 s = 9 s, bounded by one window (1 s) as Kafka's request quota.
    assert result.throttle_time == datetime.timedelta(seconds=1)
    assert ctx.muted == [1000]


def test_time_suspended_is_not_charged() -> None:
    # 10 %: 100 ms of the 1 s window. The 300 ms asleep, if charged, is far over it; the
    # two short steps that are charged stay under it even if a loaded machine preempts one.
    quota = _quota(10)

    async def handler(ctx: Any, request: Any) -> Any:
        await asyncio.sleep(0.3)  # the loop serves others meanwhile
        return ResponseValues({"throttle_time": 0})

    async def go() -> Any:
        return await quota.handle(_ctx("busy"), object(), handler)

    result = asyncio.run(go())
    assert result.values["throttle_time"] == 0
    assert quota.manager.throttled == 0


def test_cancellation_and_errors_reach_the_handler() -> None:
    quota = _quota(50)
    seen: list[str] = []

    async def handler(ctx: Any, request: Any) -> Any:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def failing(ctx: Any, request: Any) -> Any:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def go() -> None:
        task = asyncio.ensure_future(quota.handle(_ctx("busy"), object(), handler))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(ValueError, match="boom"):
            await quota.handle(_ctx("busy"), object(), failing)

    asyncio.run(go())
    assert seen == ["cancelled"]


def test_throttle_now_is_charged_once_and_the_rest_counted_only() -> None:
    quota = _quota(1)
    asked: list[int] = []

    async def handler(ctx: Any, request: Any) -> Any:
        _busy(0.1)
        asked.append(quota.throttle_now(ctx))
        asked.append(quota.throttle_now(ctx))  # a second ask charges nothing more
        _busy(0.05)
        return ChunkedResponse([b"encoded"])

    async def go() -> Any:
        ctx = _ctx("busy", api_key=0)
        return ctx, await quota.handle(ctx, SimpleNamespace(acks=1), handler)

    ctx, result = asyncio.run(go())
    assert asked == [1000, 0]
    assert result.chunks == [b"encoded"]  # its handler put the throttle in
    assert ctx.muted == [1000]
    # Outside a timed handler there is nothing to charge.
    assert quota.throttle_now(_ctx("busy")) == 0


def test_deferred_answers_carry_the_throttle() -> None:
    quota = _quota(1)

    async def later() -> Any:
        _busy(0.1)
        return ResponseValues({"throttle_time": 0})

    async def handler(ctx: Any, request: Any) -> Any:
        return DeferredResponse(later())

    async def go() -> Any:
        deferred = await quota.handle(_ctx("busy"), object(), handler)
        return await deferred.result

    assert asyncio.run(go()).values["throttle_time"] == 1000


def test_with_throttle_keeps_the_larger_and_amends_kept_metadata() -> None:
    ctx = _ctx("c")
    values = with_throttle(ctx, ResponseValues({"throttle_time": 5000}), 100)
    assert values.values["throttle_time"] == 5000
    body = (0).to_bytes(4, "big") + b"rest"
    amended = with_throttle(ctx, ChunkedResponse([b"head", body]), 250)
    assert amended.chunks == [b"head", (250).to_bytes(4, "big") + b"rest"]
    old = _ctx("c", version=2)  # Metadata v2 has no throttle field
    assert with_throttle(old, ChunkedResponse([b"head", body]), 250).chunks[1] == body
    assert with_throttle(ctx, None, 10) is None
