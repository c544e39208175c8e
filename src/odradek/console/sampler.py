"""The console's memory of the recent past: throughput and group lag, sampled periodically.

Every ``interval_s`` the sampler asks the cluster for the log end offset of every partition
and for every group's lag, and keeps the last ``keep`` samples in memory (nothing is written
anywhere: restarting the console starts the charts afresh). Records per second of a topic is
the growth of the sum of its end offsets between two samples divided by the time between them
(a topic deleted and recreated in between shows no rate for that step rather than a negative
one).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
from dataclasses import dataclass

from odradek.client.errors import ClientError, KafkaError
from odradek.console.gateway import Gateway

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # epoch seconds
    ends: dict[str, int]  # topic -> sum of its partitions' log end offsets
    lags: dict[str, dict[str, int]]  # group -> topic -> lag


class Sampler:
    def __init__(self, gateway: Gateway, *, interval_s: float = 5.0, keep: int = 360) -> None:
        self.gateway = gateway
        self.interval_s = interval_s
        self.samples: collections.deque[Sample] = collections.deque(maxlen=keep)
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.sample_once()
            except (ClientError, KafkaError, OSError) as exc:
                # The cluster is down or busy: keep trying, and let the pages say so.
                self.last_error = str(exc) or type(exc).__name__
                log.debug("sampling failed: %s", self.last_error)
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    async def sample_once(self) -> None:
        ends: dict[str, int] = {}
        for (topic, _), offset in (await self.gateway.end_offsets()).items():
            ends[topic] = ends.get(topic, 0) + offset
        lags = await self.gateway.group_lags()
        self.samples.append(Sample(time.time(), ends, lags))
        self.last_error = None

    # -- series for the charts -----------------------------------------------------------------

    def throughput(self) -> dict[str, dict[str, list[float]]]:
        """topic -> {"t": sample times, "rate": records/s since the previous sample}."""
        series: dict[str, dict[str, list[float]]] = {}
        samples = list(self.samples)
        for before, after in itertools.pairwise(samples):
            elapsed = after.at - before.at
            if elapsed <= 0:
                continue
            for topic, end in after.ends.items():
                if topic not in before.ends or end < before.ends[topic]:
                    continue
                line = series.setdefault(topic, {"t": [], "rate": []})
                line["t"].append(after.at)
                line["rate"].append(round((end - before.ends[topic]) / elapsed, 2))
        return series

    def current_rate(self, topic: str) -> float | None:
        line = self.throughput().get(topic)
        return line["rate"][-1] if line else None

    def lag(self, group_id: str) -> dict[str, dict[str, list[float]]]:
        """topic -> {"t": sample times, "lag": the group's total lag on that topic}."""
        series: dict[str, dict[str, list[float]]] = {}
        for sample in self.samples:
            for topic, lag in sample.lags.get(group_id, {}).items():
                line = series.setdefault(topic, {"t": [], "lag": []})
                line["t"].append(sample.at)
                line["lag"].append(lag)
        return series
