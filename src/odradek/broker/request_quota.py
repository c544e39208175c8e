"""Request-time quotas (KIP-124): ``request_percentage`` per user / client id.

Kafka measures the time its request handler and network threads spend on a client's
requests and keeps it under a percentage of one thread (``request_percentage=50``: half
a thread) over the quota window (``quota.window.num`` samples of
``quota.window.size.seconds``). odradek has one event loop instead of thread pools, so
the time measured is the loop's time running the handler of that client's request: the
handler coroutine is driven step by step and only its own steps are clocked, so time it
spends suspended (waiting for replication, for data in a fetch purgatory, for a thread)
while the loop serves other connections is not charged to it.

The entity is resolved as for the byte-rate quotas
(:meth:`~odradek.broker.client_quotas.ClientQuotaManager.quota_for`). A request that takes
the rate over the quota is answered with ``throttle_time_ms`` = Kafka's
``(rate - quota) / quota * window``, bounded by one window
(``ClientRequestQuotaManager.throttleTime``), and the channel is muted that long
(KIP-219). Produce and Fetch ask for their request throttle themselves (:meth:`throttle_now`)
before encoding their answer, as Kafka's handlers do, so the larger of the byte-rate and
the request throttle is sent; an over-quota Fetch is answered empty. Time they spend
after that (encoding) is recorded without throttling, as Kafka records network-thread time.

Exempt, as in Kafka (``sendResponseExemptThrottle``): the inter-broker ClusterAction APIs,
followers' fetches, and Produce with ``acks=0`` (no response to carry a throttle time; a
byte-rate quota still mutes it). When no entity sets ``request_percentage``, a request
costs one set lookup; a client without a quota costs the entity lookup, no timing.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from odradek.broker import metadata_answers
from odradek.broker.client_quotas import REQUEST_PERCENTAGE, ClientQuotaManager
from odradek.broker.requests import ChunkedResponse, DeferredResponse, ResponseValues

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext

__all__ = ["EXEMPT_APIS", "RequestQuota"]

PRODUCE, FETCH = 0, 1
# Kafka's ClusterAction APIs answered with sendResponseExemptThrottle: LeaderAndIsr,
# StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, AlterPartition,
# Envelope, BrokerRegistration, BrokerHeartbeat, UnregisterBroker, AllocateProducerIds.
EXEMPT_APIS = frozenset({4, 5, 6, 7, 27, 56, 58, 62, 63, 64, 67})


def is_exempt(api_key: int, request: Any) -> bool:
    """Whether Kafka answers this request without a request-time throttle."""
    if api_key in EXEMPT_APIS:
        return True
    if api_key == FETCH:
        replica_id = getattr(request, "replica_id", -1)
        state = getattr(request, "replica_state", None)  # v15+ carries it there
        if state is not None:
            replica_id = getattr(state, "replica_id", replica_id)
        return int(replica_id) >= 0
    if api_key == PRODUCE:
        return int(request.acks) == 0
    return False


class _Timing:
    """The loop time one request's handler has used so far."""

    __slots__ = ("ctx", "recorded_s", "spent", "started", "throttle_ms")

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.spent = 0.0  # seconds of completed steps
        self.started = 0.0  # perf_counter at the start of the running step
        self.recorded_s = -1.0  # seconds already charged by throttle_now (-1: not yet)
        self.throttle_ms = 0

    def so_far(self) -> float:
        return self.spent + (time.perf_counter() - self.started)


class RequestQuota:
    """Charges handler time to clients with a ``request_percentage`` quota."""

    def __init__(self, manager: ClientQuotaManager) -> None:
        self.manager = manager
        # Kafka bounds request throttles by one quota window.
        self.bound_ms = round(manager.window_s * 1000)
        self._running: _Timing | None = None  # the timed handler step now on the loop

    def applies(self, ctx: RequestContext, request: Any) -> bool:
        manager = self.manager
        if not manager.enabled(REQUEST_PERCENTAGE):
            return False
        principal = ctx.principal
        user = principal[5:] if principal.startswith("User:") else principal
        header = ctx.header
        if manager.quota_for(REQUEST_PERCENTAGE, user, header.client_id or "") is None:
            return False
        return not is_exempt(header.api_key, request)

    async def handle(
        self,
        ctx: RequestContext,
        request: Any,
        call: Callable[[RequestContext, Any], Coroutine[Any, Any, Any]],
    ) -> Any:
        """Run the handler, charge its loop time, and answer with the throttle time."""
        timing = _Timing(ctx)
        result = await _Timed(call(ctx, request), timing, self)
        if isinstance(result, DeferredResponse):
            # The rest runs in its own task later (its responses stay in order): its steps
            # are charged too, and the throttle goes into the answer it finally gives.
            return DeferredResponse(self._finish_deferred(result.result, timing))
        return self._finish(result, timing)

    async def _finish_deferred(self, pending: Awaitable[Any], timing: _Timing) -> Any:
        async def wait() -> Any:
            return await pending

        return self._finish(await _Timed(wait(), timing, self), timing)

    def _finish(self, result: Any, timing: _Timing) -> Any:
        ctx = timing.ctx
        client_id = ctx.header.client_id or ""
        if timing.recorded_s >= 0:
            # The handler already asked (throttle_now) and put the throttle in its answer;
            # what it spent after is counted only (Kafka's network-thread time).
            extra = timing.spent - timing.recorded_s
            if extra > 0:
                self.manager.record(
                    REQUEST_PERCENTAGE, ctx.principal, client_id, extra * 100, throttle=False
                )
            throttle_ms = timing.throttle_ms
        else:
            throttle_ms = self.manager.record(
                REQUEST_PERCENTAGE,
                ctx.principal,
                client_id,
                timing.spent * 100,  # percent of one thread, times seconds (Kafka's units)
                bound_ms=self.bound_ms,
            )
            if throttle_ms:
                result = with_throttle(ctx, result, throttle_ms)
        if throttle_ms and ctx.mute is not None:
            ctx.mute(throttle_ms)
        return result

    def throttle_now(self, ctx: RequestContext) -> int:
        """For handlers that encode their own answers (Produce, Fetch): charge the time
        spent so far and return the request throttle their answer must carry (0 when
        the request is not timed: exempt, or no quota for the client)."""
        timing = self._running
        if timing is None or timing.ctx is not ctx or timing.recorded_s >= 0:
            return 0
        spent = timing.so_far()
        timing.recorded_s = spent
        timing.throttle_ms = self.manager.record(
            REQUEST_PERCENTAGE,
            ctx.principal,
            ctx.header.client_id or "",
            spent * 100,
            bound_ms=self.bound_ms,
        )
        return timing.throttle_ms


class _Timed:
    """Awaits a coroutine while clocking each of its steps (the time it holds the loop);
    the wrapped coroutine sees every value, exception and cancellation unchanged."""

    __slots__ = ("_coro", "_owner", "_timing")

    def __init__(self, coro: Coroutine[Any, Any, Any], timing: _Timing, owner: RequestQuota):
        self._coro = coro
        self._timing = timing
        self._owner = owner

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, timing, owner = self._coro, self._timing, self._owner
        value: Any = None
        error: BaseException | None = None
        while True:
            outer = owner._running  # a timed handler may await another timed one
            owner._running = timing
            timing.started = time.perf_counter()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                timing.spent += time.perf_counter() - timing.started
                owner._running = outer
            value, error = None, None
            try:
                value = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation and the like: hand it down
                error = exc


def with_throttle(ctx: RequestContext, result: Any, throttle_ms: int) -> Any:
    """``result`` answering with ``throttle_time_ms`` of at least ``throttle_ms``."""
    if isinstance(result, ResponseValues):
        current = result.values.get("throttle_time", 0)
        if isinstance(current, datetime.timedelta):
            current = current.total_seconds() * 1000
        result.values["throttle_time"] = max(int(current or 0), throttle_ms)
        return result
    if dataclasses.is_dataclass(result) and hasattr(result, "throttle_time"):
        current_td = result.throttle_time
        if current_td.total_seconds() * 1000 >= throttle_ms:
            return result
        return dataclasses.replace(
            result,  # type: ignore[type-var]
            throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        )
    if isinstance(result, ChunkedResponse):
        # Pre-encoded: a kept Metadata answer is amended; Produce and Fetch put the
        # throttle in themselves (throttle_now).
        return metadata_answers.throttled(ctx, result, throttle_ms)
    # None (no answer) or an answer without the field (old versions): the mute applies.
    return result
