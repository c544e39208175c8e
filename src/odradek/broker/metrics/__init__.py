"""Broker metrics for Prometheus, named as Kafka's JMX exporter names Kafka's MBeans.

* :mod:`.stats` -- counters the hot paths bump (per batch or request, never per record);
* :mod:`.requests` -- the network layer's per-request hook: request metrics and the
  slow-request log;
* :mod:`.collector` -- everything else, computed at scrape time;
* :mod:`.endpoint` -- ``GET /metrics`` on ``metrics.host:metrics.port``.

:class:`BrokerMetrics` ties them together for the server: ``None`` when ``metrics.port`` is
unset, and then the hot paths do nothing at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.broker.metrics.collector import BrokerCollector
from odradek.broker.metrics.endpoint import MetricsEndpoint
from odradek.broker.metrics.requests import RequestObserver
from odradek.broker.metrics.stats import BrokerStats

if TYPE_CHECKING:
    from odradek.broker.server import KafkaServer

__all__ = ["BrokerMetrics", "BrokerStats", "RequestObserver"]


class BrokerMetrics:
    def __init__(self, server: KafkaServer, host: str, port: int) -> None:
        self.stats = BrokerStats()
        self.collector = BrokerCollector(server, self.stats)
        self.endpoint = MetricsEndpoint(
            self.collector.collect, host, port, prepare=self.collector.prepare
        )
        self.collector.last_collect_seconds = lambda: self.endpoint.last_collect_seconds

    @property
    def port(self) -> int:
        return self.endpoint.port

    async def start(self) -> None:
        await self.endpoint.start()

    async def stop(self) -> None:
        await self.endpoint.stop()
