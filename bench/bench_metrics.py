"""What the Prometheus metrics cost: produce throughput with metrics on vs off, and the time
of one scrape as partitions grow.

Run from the repository root: ``.venv/bin/python bench/bench_metrics.py`` (``--help`` for the
knobs). Two broker subprocesses run side by side, identical but for ``metrics.port``. Rounds
alternate between them (off, on, on, off, ...) so drift on a shared machine hits both; each
round produces ``--records`` records of ``--size`` bytes with confluent-kafka (acks=1) to a
fresh topic, while a scraper reads the metrics broker's endpoint every
``--scrape-interval`` seconds (far more often than Prometheus would). Printed: the median
records/s of each and the ratio on / off.

Then a topic of ``--partitions`` partitions is created on the metrics broker and scrapes are
timed (median of ``--scrapes``); the baseline is the scrape time of the same broker before,
with the handful of partitions the throughput rounds left.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.broker import BrokerProcess, free_port  # noqa: E402
from tests.helpers.raw import RawClient  # noqa: E402

from odradek.broker.metrics import BrokerStats, RequestObserver  # noqa: E402
from odradek.broker.requests import RequestContext  # noqa: E402
from odradek.protocol.headers import RequestHeader  # noqa: E402

API_VERSIONS = 18


def hook_cost_us(calls: int = 200_000) -> float:
    """Microseconds the hot-path hooks add to one produce request of one partition: the
    network layer's RequestObserver.done plus the produce handler's stats.produced."""
    stats = BrokerStats()
    observer = RequestObserver(stats)
    header = RequestHeader(0, 9, 1, "bench")
    ctx = RequestContext(header, "127.0.0.1", 1, "c", 0.0, "PLAINTEXT")
    started = time.perf_counter()
    for _ in range(calls):
        observer.done(ctx, None, 0.001, 0.002)
        stats.produced("topic", 500, 60_000)
    return (time.perf_counter() - started) / calls * 1e6


class Pinger:
    """ApiVersions round trips in the background: how long the broker's event loop was
    kept from answering."""

    def summary(self) -> str:
        ms = sorted(x * 1000 for x in self.latencies)
        return (
            f"median {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms "
            f"({len(ms)} requests)"
        )

    def __init__(self, port: int) -> None:
        self.client = RawClient(port)
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self.client.call(API_VERSIONS, 0, {})
            self.latencies.append(time.perf_counter() - started)
            time.sleep(0.002)


def produce_round(bootstrap: str, topic: str, records: int, size: int) -> float:
    """Records per second for one round (from the first send to the last acknowledgement)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    producer.list_topics(topic, timeout=10)  # creates it; outside the clock
    value = b"x" * size
    started = time.perf_counter()
    for _ in range(records):
        try:
            producer.produce(topic, value)
        except BufferError:
            producer.poll(0.01)
            producer.produce(topic, value)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    if remaining:
        raise RuntimeError(f"{remaining} records not acknowledged")
    return records / elapsed


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as answer:
        return answer.read().decode()


def _value(text: str, name: str, request: str | None = None) -> float:
    """One sample from the exposition text (``request``: its request label)."""
    key = name if request is None else f'{name}{{request="{request}"}}'
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(key)


def scrape_seconds(port: int) -> tuple[float, int, int]:
    """(seconds, bytes, partitions listed) of one scrape."""
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as answer:
        body = answer.read()
    elapsed = time.perf_counter() - started
    return elapsed, len(body), body.count(b"\nkafka_log_log_size{")


class Scraper:
    """Scrapes in the background, as Prometheus would (but more often)."""

    def __init__(self, port: int, interval: float) -> None:
        self.port = port
        self.interval = interval
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            scrape_seconds(self.port)
            self.count += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per broker")
    parser.add_argument("--scrape-interval", type=float, default=1.0)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        metrics_port = free_port()
        common = {"num.partitions": "1", "log.flush.interval.ms": str(2**62)}
        off = BrokerProcess(Path(tmp) / "off", overrides=common).start()
        on = BrokerProcess(
            Path(tmp) / "on", overrides={**common, "metrics.port": str(metrics_port)}
        ).start()
        try:
            rates: dict[str, list[float]] = {"off": [], "on": []}
            scrapes = 0
            order = ["off", "on", "on", "off"]
            for round_ in range(args.rounds * 2):
                which = order[round_ % 4]
                broker = on if which == "on" else off
                topic = f"bench-{round_}"
                if which == "on":
                    with Scraper(metrics_port, args.scrape_interval) as scraper:
                        rate = produce_round(broker.bootstrap, topic, args.records, args.size)
                    scrapes += scraper.count
                else:
                    rate = produce_round(broker.bootstrap, topic, args.records, args.size)
                rates[which].append(rate)
                print(f"round {round_ + 1}: metrics {which:3}  {rate:>10,.0f} records/s")
            off_median = statistics.median(rates["off"])
            on_median = statistics.median(rates["on"])
            print(
                f"\nproduce {args.records:,} x {args.size} B, acks=1, {args.rounds} rounds each "
                f"({scrapes} scrapes during the metrics rounds):"
            )
            print(f"  metrics off: {off_median:>10,.0f} records/s (median)")
            print(f"  metrics on:  {on_median:>10,.0f} records/s (median)")
            print(f"  ratio on / off: {on_median / off_median:.3f}")

            cost = hook_cost_us()
            text = scrape(metrics_port)
            busy_us = _value(text, "odradek_event_loop_busy_seconds_total") * 1e6
            produces = _value(text, "kafka_network_requestmetrics_totaltimems_count", "Produce")
            per_request = busy_us / produces
            print(
                f"  hooks per produce request: {cost:.2f} us in-process, against "
                f"{per_request:.0f} us of event-loop CPU per Produce request in the metrics "
                f"rounds ({cost / per_request * 100:.2f}%)"
            )

            base = [scrape_seconds(metrics_port) for _ in range(args.scrapes)]
            base_ms = statistics.median(s for s, _, _ in base) * 1000
            admin = AdminClient({"bootstrap.servers": on.bootstrap})
            started = time.perf_counter()
            admin.create_topics([NewTopic("wide", args.partitions, 1)])["wide"].result(300)
            print(
                f"\ncreated a {args.partitions}-partition topic in "
                f"{time.perf_counter() - started:.1f} s"
            )
            time.sleep(1)
            with Pinger(on.port) as quiet:
                time.sleep(2)
            with Pinger(on.port) as pinged:
                wide = [scrape_seconds(metrics_port) for _ in range(args.scrapes)]
            wide_ms = statistics.median(s for s, _, _ in wide) * 1000
            for label, runs, ms in (("before", base, base_ms), ("after", wide, wide_ms)):
                _, size, partitions = runs[-1]
                print(
                    f"scrape {label}: {partitions:>6} partitions {ms:8.1f} ms (median of "
                    f"{len(runs)}), {size:,} bytes"
                )
            # Each scrape reports the collection time of the one before it.
            collect_ms = statistics.median(
                _value(scrape(metrics_port), "odradek_metrics_collect_seconds") * 1000
                for _ in range(args.scrapes)
            )
            print(
                f"  of which on the event loop (gathering the figures): {collect_ms:.1f} ms "
                f"(median of {args.scrapes})"
            )
            added = wide[-1][2] - base[-1][2]
            print(
                f"  ratio after / before: {wide_ms / base_ms:.1f}; "
                f"{(wide_ms - base_ms) / max(added, 1) * 1000:.1f} us per added partition"
            )
            print(f"  ApiVersions round trips while scraping: {pinged.summary()}")
            print(f"  ApiVersions round trips, no scrape:     {quiet.summary()}")
            del admin  # before the brokers stop, or it keeps reconnecting
        finally:
            off.stop()
            on.stop()


if __name__ == "__main__":
    main()
