"""Client quotas: a noisy producer with a quota does not starve a quiet one.

One broker subprocess; a quiet confluent-kafka producer sends a small message every 10 ms
(acks=1) and its delivery latencies are measured in five phases of the same run:

1. alone (the baseline);
2. with a noisy producer (another process) flooding 100 KB messages, no quota;
3. the same noisy producer with ``producer_byte_rate`` set on its client id;
4. with a noisy producer flooding tiny requests (100 B messages, ``linger.ms=0``, one
   message per request, many in flight: cheap in bytes, costly in broker time), no quota;
5. the same with ``request_percentage`` (KIP-124) set on its client id.

Prints the quiet client's p50/p99 latency per phase with its ratio to the baseline, and the
noisy client's delivered rate (MB/s, and messages/s). ``--seconds`` sets each phase's
length (default 6).

First, in-process, what the request-time accounting costs per request on the dispatch path
(the broker's ``RequestQuota`` in front of a handler that does nothing), beside a direct
call: with no request quota anywhere, with quotas set for other clients only, and for a
client whose requests are timed and recorded. ``--overhead-only`` stops there.
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

# Noisy kinds: (message size, producer settings).
_NOISY = {
    "bytes": (100_000, {"linger.ms": 5}),
    "requests": (100, {"linger.ms": 0, "batch.num.messages": 1, "max.in.flight": 64}),
}


def _noisy(
    bootstrap: str, client_id: str, kind: str, seconds: float, out: multiprocessing.Queue
) -> None:
    delivered = [0, 0]

    def report(err: object, msg: object) -> None:
        if err is None:
            delivered[0] += len(msg.value())  # type: ignore[attr-defined]
            delivered[1] += 1

    size, settings = _NOISY[kind]
    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1, **settings}
    )
    payload = b"n" * size
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            producer.produce("noisy", payload, on_delivery=report)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    elapsed = time.monotonic() - started
    out.put((delivered[0] / elapsed, delivered[1] / elapsed))


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


def _phase(
    bootstrap: str, seconds: float, noisy_client: str | None, kind: str
) -> tuple[list[float], tuple[float, float]]:
    out: multiprocessing.Queue = multiprocessing.Queue()
    noisy = None
    if noisy_client is not None:
        noisy = multiprocessing.Process(
            target=_noisy, args=(bootstrap, noisy_client, kind, seconds, out), daemon=True
        )
        noisy.start()
        time.sleep(0.5)  # let it reach full speed
    latencies = _quiet(bootstrap, seconds)
    rates = (0.0, 0.0)
    if noisy is not None:
        rates = out.get(timeout=120)
        noisy.join(30)
    return latencies, rates


def _accounting_overhead() -> None:
    """Per-request cost of request_percentage accounting, min of repeated loops."""
    from types import SimpleNamespace

    from odradek.broker.client_quotas import ClientQuotaManager, entity_key
    from odradek.broker.request_quota import RequestQuota

    configured = ClientQuotaManager()
    configured.update(entity_key({"client-id": "timed"}), {"request_percentage": 1e9})
    quota, unset = RequestQuota(configured), RequestQuota(ClientQuotaManager())
    request = SimpleNamespace(acks=1)

    def ctx(client_id: str) -> SimpleNamespace:
        header = SimpleNamespace(api_key=0, api_version=9, client_id=client_id)
        return SimpleNamespace(header=header, principal="User:ANONYMOUS", mute=None)

    async def handler(_ctx: object, _request: object) -> None:
        return None

    other, timed = ctx("other"), ctx("timed")

    async def direct() -> None:
        await handler(other, request)

    async def nothing_set() -> None:
        unset.applies(other, request)
        await handler(other, request)

    async def not_this_client() -> None:
        quota.applies(other, request)
        await handler(other, request)

    async def timed_and_recorded() -> None:
        quota.applies(timed, request)
        await quota.handle(timed, request, handler)

    async def per_request(body: object, n: int = 20_000) -> float:
        started = time.perf_counter()
        for _ in range(n):
            await body()  # type: ignore[operator]
        return (time.perf_counter() - started) / n * 1e6

    async def measure() -> None:
        cases = [("direct call (baseline)", direct), ("no request quota set", nothing_set),
                 ("quotas set, not this client", not_this_client),
                 ("timed and recorded", timed_and_recorded)]  # fmt: skip
        base = 0.0
        print(f"{'request-time accounting':<30} {'us/request':>10} {'over base':>10}")
        for name, body in cases:
            cost = min([await per_request(body) for _ in range(10)])
            base = base or cost
            print(f"{name:<30} {cost:>10.2f} {cost - base:>10.2f}")

    asyncio.run(measure())


def _set_quota(bootstrap: str, client_id: str, key: str, value: float) -> None:
    async def work() -> None:
        admin = Admin(bootstrap)
        await admin.start()
        try:
            await admin.alter_client_quotas({"client-id": client_id}, {key: value})
        finally:
            await admin.close()

    asyncio.run(work())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each phase")
    parser.add_argument("--quota", type=int, default=1_000_000, help="noisy bytes/s quota")
    parser.add_argument(
        "--percentage", type=float, default=10.0, help="noisy request_percentage quota"
    )
    parser.add_argument("--overhead-only", action="store_true", help="skip the broker phases")
    args = parser.parse_args()
    _accounting_overhead()
    if args.overhead_only:
        return
    print()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={"num.partitions": "1"}).start()
        try:
            _set_quota(broker.bootstrap, "noisy-quota", "producer_byte_rate", args.quota)
            _set_quota(broker.bootstrap, "chatty-quota", "request_percentage", args.percentage)
            _quiet(broker.bootstrap, 1.0)  # warm up: topic creation, connections
            phases = [
                ("quiet alone", None, "bytes"),
                ("noisy bytes, no quota", "noisy-free", "bytes"),
                (f"noisy bytes, {args.quota} B/s", "noisy-quota", "bytes"),
                ("noisy requests, no quota", "chatty-free", "requests"),
                (f"noisy requests, {args.percentage:g} %", "chatty-quota", "requests"),
            ]
            baseline_p99 = 0.0
            print(f"{'phase':<30} {'quiet p50 ms':>12} {'quiet p99 ms':>12} {'x base p99':>10}"
                  f" {'noisy MB/s':>10} {'noisy msg/s':>11}")  # fmt: skip
            for name, noisy_client, kind in phases:
                latencies, (rate, messages) = _phase(
                    broker.bootstrap, args.seconds, noisy_client, kind
                )
                p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
                baseline_p99 = baseline_p99 or p99
                print(
                    f"{name:<30} {p50:>12.2f} {p99:>12.2f} {p99 / baseline_p99:>10.2f}"
                    f" {rate / 1e6:>10.2f} {messages:>11.0f}"
                )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
