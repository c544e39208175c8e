"""What the network layer reports when a request's response is ready.

The network layer calls :meth:`RequestObserver.done` once per request (when the response
is encoded and queued for its connection, or dropped for ``acks=0``). It feeds Kafka's
RequestMetrics (``RequestsPerSec``, ``RequestQueueTimeMs``, ``TotalTimeMs`` per API) and
the slow-request log, Kafka's ``kafka.request.logger``: a request whose total time reaches
``log.slow.request.threshold.ms`` is logged at INFO with its API, client, listener, queue
and total time.

Times: *queue time* runs from the moment the request's last byte was read to the moment
its handler starts (it waits behind earlier requests of its connection, and for the event
loop); *total time* runs from the same moment until the response is ready to be written,
including any wait in a purgatory (acks=all, a fetch's max wait).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from odradek.broker.metrics.stats import BrokerStats
from odradek.logformat import request_fields
from odradek.protocol.versions import FETCH, api_name

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext

# Kafka's logger of completed requests (kafka.network.RequestChannel's requestLogger).
request_log = logging.getLogger("kafka.request.logger")


class RequestObserver:
    def __init__(self, stats: BrokerStats | None, slow_threshold_ms: int = -1) -> None:
        self.stats = stats
        self.slow_threshold_ms = slow_threshold_ms
        self._names: dict[int, str] = {}

    def _name(self, api_key: int) -> str:
        name = self._names.get(api_key)
        if name is None:
            name = self._names[api_key] = api_name(api_key)
        return name

    def done(self, ctx: RequestContext, request: Any, started: float, finished: float) -> None:
        """``started``: when the handler began; ``finished``: response ready (the network
        clock, the same one as ``ctx.received_at``)."""
        header = ctx.header
        queue_ms = (started - ctx.received_at) * 1000
        total_ms = (finished - ctx.received_at) * 1000
        name = self._name(header.api_key)
        stats = self.stats
        if stats is not None:
            version = header.api_version
            stats.request(name, version, queue_ms, total_ms)
            if header.api_key == FETCH:
                # Kafka also counts fetches as FetchConsumer or FetchFollower.
                follower = int(getattr(request, "replica_id", -1)) >= 0
                kind = "FetchFollower" if follower else "FetchConsumer"
                stats.request(kind, version, queue_ms, total_ms)
        threshold = self.slow_threshold_ms
        if 0 <= threshold <= total_ms:
            request_log.info(
                "Slow request: %s v%d (correlation id %d) from client %s on listener %s, "
                "connection %s: queue time %.1f ms, total time %.1f ms",
                name,
                header.api_version,
                header.correlation_id,
                header.client_id,
                ctx.listener_name,
                ctx.connection_id,
                queue_ms,
                total_ms,
                extra={
                    **request_fields(ctx),
                    "queue_time_ms": round(queue_ms, 3),
                    "total_time_ms": round(total_ms, 3),
                },
            )
