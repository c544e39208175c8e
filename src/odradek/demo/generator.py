"""The demo's event generator: a thread producing activity events at a steady rate.

Kept free of PySpark imports: it only needs odradek's own client. It counts what it has
produced (``produced``, read by the progress display) and ends with one heartbeat event dated
after the last window, so that the streaming job's watermark passes and every window closes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from odradek.demo.config import WATERMARK_MS, WINDOW_MS, DemoConfig
from odradek.demo.events import ActivityGenerator, closing_time, event_time, heartbeat


async def ensure_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create the demo's topics unless they exist."""
    from odradek.client.admin import Admin, NewTopic
    from odradek.client.errors import KafkaError

    async with Admin(bootstrap) as admin:
        existing = set((await admin.list_topics()).topics)
        wanted = [NewTopic(name, n, 1) for name, n in topics.items() if name not in existing]
        if wanted:
            try:
                await admin.create_topics(wanted)
            except KafkaError as exc:
                if exc.name != "TOPIC_ALREADY_EXISTS":
                    raise
        await admin.client.wait_for_topics(list(topics))


class GeneratorThread(threading.Thread):
    """Produces activity events at a steady rate for a while, then one heartbeat."""

    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__(name="odradek-demo-generator", daemon=True)
        self.cfg = cfg
        self.produced = 0
        self.error: BaseException | None = None
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    async def _produce(self) -> None:
        from odradek.client.producer import Producer

        cfg = self.cfg
        generator = ActivityGenerator(seed=cfg.seed)
        async with Producer(cfg.bootstrap_server, linger_ms=20, compression_type="lz4") as producer:
            # A previous run's heartbeat moved event time ahead of the wall clock; start after
            # it, or the checkpointed watermark would drop this run's events as late.
            resume_at = await last_event_time(producer.client, cfg.events_topic)
            skew_ms = max(0, resume_at + 1000 - int(time.time() * 1000))
            last_ts = now_ms = int(time.time() * 1000) + skew_ms
            started = time.monotonic()
            pending = []
            while not self._stopping.is_set():
                elapsed = time.monotonic() - started
                if elapsed >= cfg.duration:
                    break
                due = int(elapsed * cfg.events_per_second) - self.produced
                now_ms = int(time.time() * 1000) + skew_ms
                for _ in range(max(due, 0)):
                    event = generator.event(now_ms)
                    last_ts = max(last_ts, event.ts)
                    pending.append(await producer.send(cfg.events_topic, event.value, event.key))
                    self.produced += 1
                if len(pending) > 10_000:
                    await asyncio.gather(*pending)
                    pending.clear()
                await asyncio.sleep(0.02)
            await asyncio.gather(*pending)
            # One record is enough to close every window: the watermark follows the largest
            # event time seen.
            close_at = closing_time(max(last_ts, now_ms), WINDOW_MS, WATERMARK_MS)
            await producer.send_and_wait(cfg.events_topic, heartbeat(close_at))


async def last_event_time(client: Any, topic: str) -> int:
    """The largest ``ts`` among the last record of each partition of ``topic`` (0 if none)."""
    from odradek.client.fetcher import Consumer
    from odradek.records.batch import decode_batches

    consumer = Consumer(client)
    await consumer.start()
    partitions = (await client.metadata([topic])).partitions_for(topic)
    ends = await consumer.list_offsets({(topic, p): -1 for p in partitions})
    latest = 0
    for (_, partition), (end, _) in ends.items():
        if end <= 0:
            continue
        fetched = await consumer.fetch_raw(topic, partition, end - 1, 1_048_576)
        for batch in decode_batches(fetched.records):
            for record in batch.records:
                latest = max(latest, event_time(record.value) or 0)
    return latest
