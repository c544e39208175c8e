"""Throughput of odradek's own producer and consumer against aiokafka's and librdkafka's.

Run from the repository root: ``.venv/bin/python bench/bench_client_throughput.py``
(``--help`` for the knobs). It starts one odradek broker subprocess; every client talks to
that same broker in the same run. For each record size (100 B and 64 KiB) and each round,
the three clients take turns (the order rotates every round, so none always runs on a
colder or hotter machine): each produces ``N`` records to a fresh 1-partition topic, from
the first send until every record is acknowledged, then reads them back from offset 0 with
an assign-based consumer. Medians over the rounds are printed, with the ratios
odradek / aiokafka (the goal: >= 1.0) and odradek / librdkafka (confluent-kafka), and the
load average before and after (the machine is shared: absolute figures move, ratios less).
Each timed phase starts after a full garbage collection: all clients share this process and
its collector, and a full collection (tens of milliseconds with three client libraries
loaded) would otherwise land on whichever client runs when the garbage of the ones before
crosses the threshold. Each phase's CPU time (``time.process_time``: the client's, with
librdkafka's threads; the broker is another process) is printed per record too: on a loaded
machine the wall-clock rate is mostly the CPU share a client happened to get, its CPU cost
per record is not.

All three producers get the same settings: acks=1, no idempotence, no compression,
linger 5 ms, batches of up to 256 KiB. Consumers use their defaults (fetch.max.bytes 50 MB,
max.partition.fetch.bytes 1 MiB in all three), CRC checks on where the client has them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiokafka
import confluent_kafka as ck

from odradek.client import Admin, Consumer, NewTopic, Producer

REPO = Path(__file__).resolve().parents[1]
BATCH_BYTES = 256 * 1024
LINGER_MS = 5
WAIT_S = 120.0
# (wall-clock seconds, CPU seconds of this process) over the same interval. On a shared
# machine the wall clock measures the CPU share a client got as much as the client; its CPU
# time (the bench process holds only the client; the broker is another process) does not.
Timing = tuple[float, float]


# -- producers: each times from the first send to the last acknowledgement -----------------


async def odradek_produce(bootstrap: str, topic: str, value: bytes, count: int) -> Timing:
    async with Producer(
        bootstrap,
        acks=1,
        enable_idempotence=False,
        linger_ms=LINGER_MS,
        batch_size=BATCH_BYTES,
        max_request_size=4 * BATCH_BYTES,
    ) as producer:
        await producer.client.wait_for_topics([topic])
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            await producer.send(topic, value, partition=0)
        await producer.flush()
        return time.perf_counter() - started, time.process_time() - cpu


async def aiokafka_produce(bootstrap: str, topic: str, value: bytes, count: int) -> Timing:
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        enable_idempotence=False,
        linger_ms=LINGER_MS,
        max_batch_size=BATCH_BYTES,
        max_request_size=4 * BATCH_BYTES,
    )
    await producer.start()
    try:
        await producer.partitions_for(topic)
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            await producer.send(topic, value, partition=0)
        await producer.flush()
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        await producer.stop()


def confluent_produce(bootstrap: str, topic: str, value: bytes, count: int) -> Timing:
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "enable.idempotence": False,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_BYTES,
            "message.max.bytes": 4 * BATCH_BYTES,
        }
    )
    producer.list_topics(topic, timeout=10)
    failed: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    if producer.flush(WAIT_S) or failed:
        raise RuntimeError(f"librdkafka did not deliver everything: {failed[:3]}")
    return time.perf_counter() - started, time.process_time() - cpu


# -- consumers: each times from assign() to the count-th record ---------------------------
# (connected and with metadata beforehand; finding the log start is counted for all three)


async def odradek_consume(bootstrap: str, topic: str, count: int) -> Timing:
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        await consumer.client.wait_for_topics([topic])
        started, cpu = time.perf_counter(), time.process_time()
        consumer.assign([(topic, 0)])
        got = 0
        while got < count and time.perf_counter() < started + WAIT_S:
            got += len(await consumer.poll(timeout_ms=1000))
        if got < count:
            raise RuntimeError(f"odradek consumer read {got} of {count}")
        return time.perf_counter() - started, time.process_time() - cpu


async def aiokafka_consume(bootstrap: str, topic: str, count: int) -> Timing:
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        await consumer.topics()  # connected, with metadata
        started, cpu = time.perf_counter(), time.process_time()
        consumer.assign([aiokafka.TopicPartition(topic, 0)])
        got = 0
        while got < count and time.perf_counter() < started + WAIT_S:
            batches = await consumer.getmany(timeout_ms=1000)
            got += sum(len(records) for records in batches.values())
        if got < count:
            raise RuntimeError(f"aiokafka consumer read {got} of {count}")
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        await consumer.stop()


def confluent_consume(bootstrap: str, topic: str, count: int) -> Timing:
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.list_topics(topic, timeout=10)
        started, cpu = time.perf_counter(), time.process_time()
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        got = 0
        while got < count and time.perf_counter() < started + WAIT_S:
            for message in consumer.consume(num_messages=10000, timeout=1.0):
                if message.error() is None:
                    got += 1
        if got < count:
            raise RuntimeError(f"librdkafka consumer read {got} of {count}")
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        consumer.close()


def run(fn: Callable[..., Awaitable[Timing] | Timing], *args: object) -> Timing:
    if asyncio.iscoroutinefunction(fn):
        return asyncio.run(fn(*args))
    return fn(*args)  # type: ignore[return-value]


CLIENTS = {
    "odradek": (odradek_produce, odradek_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
    "librdkafka": (confluent_produce, confluent_consume),
}


def create_topic(bootstrap: str, topic: str) -> None:
    async def main() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])

    asyncio.run(main())


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def measure(bootstrap: str, size: int, count: int, rounds: int) -> dict[str, dict[str, list]]:
    """{client: {"produce": [seconds...], "consume": [seconds...]}}, clients alternating."""
    value = os.urandom(size)
    times: dict[str, dict[str, list]] = {n: {"produce": [], "consume": []} for n in CLIENTS}
    names = list(CLIENTS)
    for name, (produce, consume) in CLIENTS.items():
        # Untimed warm-up: first-use costs (lazily imported protocol modules) out of round 1.
        topic = f"bench-warmup-{name}-{size}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic)
        run(produce, bootstrap, topic, value, 20)
        run(consume, bootstrap, topic, 20)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            produce, consume = CLIENTS[name]
            topic = f"bench-{name}-{size}-{r}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic)
            gc.collect()
            times[name]["produce"].append(run(produce, bootstrap, topic, value, count))
            gc.collect()
            times[name]["consume"].append(run(consume, bootstrap, topic, count))
    return times


def report(size: int, count: int, times: dict[str, dict[str, list]]) -> None:
    unit, scale = ("k rec/s", count / 1e3) if size < 1024 else ("MB/s", count * size / 1e6)
    print(f"  {size} B records, {count} per run, medians of {len(times['odradek']['produce'])}:")
    for what in ("produce", "consume"):
        rates = {n: scale / statistics.median(w for w, _ in t[what]) for n, t in times.items()}
        cpu = {n: statistics.median(c for _, c in t[what]) / count * 1e6 for n, t in times.items()}
        figures = "  ".join(f"{n} {v:8.1f}" for n, v in rates.items())
        print(f"    {what:8} {unit:8} {figures}")
        print(
            f"    {'':8} odradek / aiokafka = {rates['odradek'] / rates['aiokafka']:.2f} "
            f"(goal >= 1.0), odradek / librdkafka = {rates['odradek'] / rates['librdkafka']:.2f}"
        )
        figures = "  ".join(f"{n} {v:8.2f}" for n, v in cpu.items())
        print(f"    {'':8} {'CPU us/record':14} {figures}")
        print(
            f"    {'':8} aiokafka's CPU per record / odradek's = "
            f"{cpu['aiokafka'] / cpu['odradek']:.2f} (above 1: odradek costs less)",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs per client and size")
    parser.add_argument("--small", type=int, default=50_000, help="100 B records per run")
    parser.add_argument("--large", type=int, default=400, help="64 KiB records per run")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from tests.helpers.broker import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="odradek-bench-client-tp-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", log_path=Path(tmp) / "broker.log").start()
        try:
            print(f"client throughput on one odradek broker; load average {load()}")
            for size, count in ((100, args.small), (64 * 1024, args.large)):
                report(size, count, measure(broker.bootstrap, size, count, args.rounds))
            print(f"load average at the end: {load()}")
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
