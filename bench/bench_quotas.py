"""Client quotas: a noisy producer with a quota does not starve a quiet one.

One broker subprocess; a quiet confluent-kafka producer sends a small message every 10 ms
(acks=1) and its delivery latencies are measured in three phases of the same run:

1. alone (the baseline);
2. with a noisy producer (another process) flooding 100 KB messages, no quota;
3. the same noisy producer with ``producer_byte_rate`` set on its client id.

Prints the quiet client's p50/p99 latency per phase with its ratio to the baseline, and the
noisy client's delivered rate. ``--seconds`` sets each phase's length (default 6).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.broker import BrokerProcess  # noqa: E402

from odradek.client.admin import Admin  # noqa: E402


def _noisy(bootstrap: str, client_id: str, seconds: float, out: multiprocessing.Queue) -> None:
    delivered = [0]

    def report(err: object, msg: object) -> None:
        if err is None:
            delivered[0] += len(msg.value())  # type: ignore[attr-defined]

    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1}
    )
    payload = b"n" * 100_000
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            producer.produce("noisy", payload, on_delivery=report)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    out.put(delivered[0] / (time.monotonic() - started))


def _quiet(bootstrap: str, seconds: float) -> list[float]:
    latencies: list[float] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": "quiet", "linger.ms": 0, "acks": 1}
    )
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        sent = time.monotonic()

        def report(err: object, _msg: object, sent: float = sent) -> None:
            if err is None:
                latencies.append((time.monotonic() - sent) * 1000)

        producer.produce("quiet", b"q" * 100, on_delivery=report)
        producer.poll(0.01)
    producer.flush(30)
    return latencies


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else 0.0


def _phase(bootstrap: str, seconds: float, noisy_client: str | None) -> tuple[list[float], float]:
    out: multiprocessing.Queue = multiprocessing.Queue()
    noisy = None
    if noisy_client is not None:
        noisy = multiprocessing.Process(
            target=_noisy, args=(bootstrap, noisy_client, seconds, out), daemon=True
        )
        noisy.start()
        time.sleep(0.5)  # let it reach full speed
    latencies = _quiet(bootstrap, seconds)
    rate = 0.0
    if noisy is not None:
        rate = out.get(timeout=120)
        noisy.join(30)
    return latencies, rate


def _set_quota(bootstrap: str, client_id: str, rate: int) -> None:
    async def work() -> None:
        admin = Admin(bootstrap)
        await admin.start()
        try:
            await admin.alter_client_quotas({"client-id": client_id}, {"producer_byte_rate": rate})
        finally:
            await admin.close()

    asyncio.run(work())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each phase")
    parser.add_argument("--quota", type=int, default=1_000_000, help="noisy bytes/s quota")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={"num.partitions": "1"}).start()
        try:
            _set_quota(broker.bootstrap, "noisy-quota", args.quota)
            _quiet(broker.bootstrap, 1.0)  # warm up: topic creation, connections
            phases = [
                ("quiet alone", None),
                ("noisy, no quota", "noisy-free"),
                (f"noisy, quota {args.quota} B/s", "noisy-quota"),
            ]
            baseline_p99 = 0.0
            print(f"{'phase':<30} {'quiet p50 ms':>12} {'quiet p99 ms':>12} {'x base p99':>10}"
                  f" {'noisy MB/s':>10}")  # fmt: skip
            for name, noisy_client in phases:
                latencies, rate = _phase(broker.bootstrap, args.seconds, noisy_client)
                p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
                baseline_p99 = baseline_p99 or p99
                print(
                    f"{name:<30} {p50:>12.2f} {p99:>12.2f} {p99 / baseline_p99:>10.2f}"
                    f" {rate / 1e6:>10.2f}"
                )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
