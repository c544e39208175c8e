"""Replication cost, three broker processes over a real ZooKeeper, every figure against a
baseline measured in the same run:

    PYTHONPATH=src python bench/bench_replication.py [--messages 10000] [--rounds 3]
        [--rate 1000] [--seconds 5] [--linger-ms 5] [--max-in-flight 5]

1. Throughput: one confluent-kafka producer (100 B records, linger.ms=5) to a partition
   with replication factor 1 and acks=1 (the baseline, as Kafka's 2014 benchmark: "no
   replication"), then factor 3 with acks=1 ("3x asynchronous replication") and acks=all
   ("3x synchronous"); rounds alternate, medians are printed with their ratio to the
   baseline (Kafka 2014: 0.96 and 0.51), and the records per Produce request the leader
   received (librdkafka batches more while requests wait, and the broker's cost is mostly
   per request) and the CPU seconds the three broker processes spent per million
   records (what replication costs the brokers, less sensitive to the machine's load).
2. Latency of ``--single`` records produced one at a time (each flushed before the next:
   the replication round trip itself), then at a steady rate (``--rate`` records/s for
   ``--seconds``, ``--linger-ms`` 5 as librdkafka's default, ``--max-in-flight`` 5 as
   Java's producer: a broker answers one request per connection at a time, so with
   librdkafka's 1,000,000 a connection whose requests each wait a replication round trip
   queues them instead of batching): p50 and p99 of each record's produce latency
   (librdkafka's ``Message.latency()``: from ``produce()`` to its acknowledgement) for the
   same three setups.
3. Replication lag in steady factor-3 runs of their own: a sampler reads the leader's and
   both followers' ``kafka_log_log_logendoffset`` (GET /metrics, the three scraped
   in parallel) and reports how many records each follower's log end is behind the
   leader's (p50, p99, max), and in milliseconds how long after the leader reached an
   offset the follower had it (p50, p99; resolution: one sampling round, printed). Scrapes
   cost the brokers' event loops CPU, so the latency runs of 2. are not sampled.

The leader of every partition is broker 1 (explicit assignments), so the followers are
brokers 2 and 3.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.helpers.broker import BrokerProcess, free_port

from odradek.cluster.zookeeper_server import ZooKeeperServer

PAYLOAD = b"x" * 100
# (topic, replicas, acks): the first is the baseline.
SETUPS = (("rf1", [1], "1"), ("rf3-acks1", [1, 2, 3], "1"), ("rf3-acksall", [1, 2, 3], "all"))


def produce(bootstrap: str, topic: str, count: int, acks: str) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, PAYLOAD, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(120) == 0
    return count / (time.perf_counter() - started)


def steady(
    bootstrap: str,
    topic: str,
    acks: str,
    rate: int,
    seconds: float,
    linger_ms: int,
    max_in_flight: int,
) -> list[float]:
    """Produce ``rate`` records/s for ``seconds``; every record's latency in ms."""
    settings = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": linger_ms}
    if max_in_flight:
        settings["max.in.flight"] = max_in_flight
    producer = Producer(settings)
    latencies: list[float] = []
    failures: list[object] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            failures.append(error)
        else:
            latencies.append(message.latency() * 1000)  # type: ignore[attr-defined]

    producer.produce(topic, PAYLOAD, partition=0)  # connections and metadata first
    assert producer.flush(30) == 0
    total = int(rate * seconds)
    started = time.perf_counter()
    for i in range(total):
        due = started + i / rate
        while (now := time.perf_counter()) < due:
            producer.poll(min(due - now, 0.005))
        producer.produce(topic, PAYLOAD, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not failures, failures[:3]
    return latencies


def one_at_a_time(bootstrap: str, topic: str, acks: str, count: int) -> list[float]:
    """``count`` records, each produced and flushed before the next; latencies in ms."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    producer.produce(topic, PAYLOAD, partition=0)  # connections and metadata first
    assert producer.flush(30) == 0
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        producer.produce(topic, PAYLOAD, partition=0)
        assert producer.flush(30) == 0
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


_LEO = re.compile(r'^kafka_log_log_logendoffset\{([^}]*)\} ([0-9.e+]+)$', re.MULTILINE)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        return answer.read().decode()


def cpu_seconds(brokers: dict[int, BrokerProcess]) -> float:
    """User + system CPU seconds the broker processes have used (/proc/<pid>/stat)."""
    total = 0
    for broker in brokers.values():
        assert broker.proc is not None
        fields = Path(f"/proc/{broker.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / os.sysconf("SC_CLK_TCK")


def produce_requests(port: int) -> int:
    """Produce requests the broker has answered (its request-time histogram's count)."""
    key = 'kafka_network_requestmetrics_totaltimems_count{request="Produce"} '
    for line in scrape(port).splitlines():
        if line.startswith(key):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def log_end(port: int, topic: str) -> int:
    text = scrape(port)
    for labels, value in _LEO.findall(text):
        if f'topic="{topic}"' in labels and 'partition="0"' in labels:
            return int(float(value))
    return -1


class LagSampler:
    """Samples (time, leader LEO, follower LEOs) until stopped, the brokers in parallel."""

    def __init__(
        self, leader_port: int, follower_ports: list[int], topic: str, pause_ms: float
    ) -> None:
        self.pause_s = pause_ms / 1000
        self.ports = [leader_port, *follower_ports]
        self.topic = topic
        self.samples: list[tuple[float, list[int]]] = []
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(len(self.ports))
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self._pool.shutdown()

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.perf_counter()
            ends = list(self._pool.map(lambda p: log_end(p, self.topic), self.ports))
            self.samples.append((at, ends))
            time.sleep(self.pause_s)

    def records_behind(self) -> list[int]:
        return [ends[0] - f for _at, ends in self.samples for f in ends[1:] if ends[0] >= 0]

    def ms_behind(self) -> list[float]:
        """For each leader sample: ms until each follower's sample showed that offset."""
        delays: list[float] = []
        times = [at for at, _ends in self.samples]
        for column in range(1, len(self.ports)):
            reached = [ends[column] for _at, ends in self.samples]
            # Follower LEOs never decrease here (no truncation), so bisect the first
            # sample at or above the leader's offset.
            for at, ends in self.samples:
                index = bisect.bisect_left(reached, ends[0])
                if index < len(reached):
                    delays.append(max(0.0, (times[index] - at) * 1000))
        return delays

    def interval_ms(self) -> float:
        if len(self.samples) < 2:
            return float("nan")
        return (self.samples[-1][0] - self.samples[0][0]) / (len(self.samples) - 1) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=1000, help="records/s of the steady runs")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each steady run")
    parser.add_argument(
        "--linger-ms", type=int, default=5, help="linger.ms of the steady runs (librdkafka's)"
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=5,
        help="max.in.flight of the steady runs: 5 as Java's producer (0: librdkafka's 1000000)",
    )
    parser.add_argument(
        "--single", type=int, default=300, help="records produced one at a time per setup"
    )
    parser.add_argument(
        "--sample-pause-ms",
        type=float,
        default=20,
        help="pause between two lag samples (each scrapes the three brokers)",
    )
    parser.add_argument("--keep", help="put data and broker logs here (kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-repl-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        zk = ZooKeeperServer(root / "zk").start()
        brokers: dict[int, BrokerProcess] = {}
        metrics_ports = {broker_id: free_port() for broker_id in (1, 2, 3)}
        try:
            for broker_id in (1, 2, 3):
                overrides = {
                    "zookeeper.connect": f"127.0.0.1:{zk.port}",
                    "broker.id": str(broker_id),
                    "controlled.shutdown.retry.backoff.ms": "100",
                    # The last broker's controlled shutdown asks a controller that is gone.
                    "controller.socket.timeout.ms": "5000",
                    "metrics.port": str(metrics_ports[broker_id]),
                }
                brokers[broker_id] = BrokerProcess(
                    root / f"b{broker_id}", overrides=overrides, log_path=root / f"b{broker_id}.log"
                ).start()
            bootstrap = ",".join(b.bootstrap for b in brokers.values())
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for topic, replicas, _acks in SETUPS:
                new = NewTopic(topic, 1, replica_assignment=[replicas])
                admin.create_topics([new])[topic].result(30)
            time.sleep(2)  # followers join the ISR
            for topic, _replicas, acks in SETUPS:  # warm up: connections, metadata
                produce(bootstrap, topic, 1000, acks)

            # 1. Throughput. Alternate and take medians: the machine is shared.
            rates: dict[str, list[float]] = {topic: [] for topic, _r, _a in SETUPS}
            requests = dict.fromkeys(rates, 0)
            cpu = dict.fromkeys(rates, 0.0)
            for _ in range(args.rounds):
                for topic, _replicas, acks in SETUPS:
                    before, cpu_before = produce_requests(metrics_ports[1]), cpu_seconds(brokers)
                    rates[topic].append(produce(bootstrap, topic, args.messages, acks))
                    cpu[topic] += cpu_seconds(brokers) - cpu_before
                    requests[topic] += produce_requests(metrics_ports[1]) - before
            base = statistics.median(rates["rf1"])
            millions = args.messages * args.rounds / 1e6
            print(
                f"throughput, {args.messages} records of 100 B, median of {args.rounds}; "
                "CPU of the three brokers per million records:"
            )
            for topic, replicas, acks in SETUPS:
                rate = statistics.median(rates[topic])
                print(
                    f"  RF {len(replicas)} acks={acks:3}  {rate:10,.0f} rec/s"
                    f"  ratio {rate / base:.2f}"
                    f"  {args.messages * args.rounds / max(requests[topic], 1):6.0f} rec/request"
                    f"  CPU {cpu[topic] / millions:5.2f} s/M (x{cpu[topic] / cpu['rf1']:.2f})"
                    + ("  (baseline)" if topic == "rf1" else "")
                )

            # 2. Latency: one record at a time (the replication round trip itself), then at
            # a steady rate; 3. lag in steady RF 3 runs of their own.
            print(f"one record at a time ({args.single} each, linger.ms=0), latency (ms):")
            single: dict[str, list[float]] = {}
            for topic, replicas, acks in SETUPS:
                single[topic] = one_at_a_time(bootstrap, topic, acks, args.single)
                p50, p99 = percentile(single[topic], 0.5), percentile(single[topic], 0.99)
                print(
                    f"  RF {len(replicas)} acks={acks:3}  p50 {p50:7.2f}  p99 {p99:7.2f}"
                    f"  (x baseline: p50 {p50 / percentile(single['rf1'], 0.5):.2f},"
                    f" p99 {p99 / percentile(single['rf1'], 0.99):.2f})"
                )
            print(
                f"steady {args.rate} rec/s for {args.seconds:g} s, linger.ms={args.linger_ms}"
                f", max.in.flight={args.max_in_flight or 'default'}; produce latency (ms):"
            )
            latency: dict[str, list[float]] = {}
            def run_steady(topic: str, acks: str) -> list[float]:
                return steady(
                    bootstrap,
                    topic,
                    acks,
                    args.rate,
                    args.seconds,
                    args.linger_ms,
                    args.max_in_flight,
                )

            for topic, replicas, acks in SETUPS:
                latency[topic] = run_steady(topic, acks)
                p50, p99 = percentile(latency[topic], 0.5), percentile(latency[topic], 0.99)
                base50 = percentile(latency["rf1"], 0.5)
                base99 = percentile(latency["rf1"], 0.99)
                print(
                    f"  RF {len(replicas)} acks={acks:3}  p50 {p50:7.2f}  p99 {p99:7.2f}"
                    f"  (x baseline: p50 {p50 / base50:.2f}, p99 {p99 / base99:.2f})"
                )
            # Lag in runs of their own: the scrapes cost the brokers' event loops CPU, which
            # the latency figures above must not pay.
            follower_ports = [metrics_ports[2], metrics_ports[3]]
            for topic, replicas, acks in SETUPS:
                if len(replicas) < 3:
                    continue
                with LagSampler(
                    metrics_ports[1], follower_ports, topic, args.sample_pause_ms
                ) as sampler:
                    sampled = run_steady(topic, acks)
                behind = sampler.records_behind()
                delays = sampler.ms_behind()
                print(
                    f"replication lag, RF 3 acks={acks} at {args.rate} rec/s "
                    f"({len(sampler.samples)} samples, one every {sampler.interval_ms():.1f} ms;"
                    f" produce p50 {percentile(sampled, 0.5):.2f} ms while sampled):"
                )
                p50_records, p99_records = percentile(behind, 0.5), percentile(behind, 0.99)
                print(
                    f"  follower LEO behind the leader: p50 {p50_records:.0f}"
                    f"  p99 {p99_records:.0f}  max {max(behind)} records"
                    f"  (at {args.rate} rec/s: p50 {p50_records / args.rate * 1000:.0f},"
                    f" p99 {p99_records / args.rate * 1000:.0f} ms of production)"
                )
                print(
                    "  time until a follower has the leader's LEO:"
                    f" p50 {percentile(delays, 0.5):.1f}  p99 {percentile(delays, 0.99):.1f} ms"
                )
        finally:
            for broker in brokers.values():
                try:
                    broker.stop(timeout=60)
                except RuntimeError:
                    pass  # killed after the timeout: the figures are printed already
            zk.stop()


if __name__ == "__main__":
    main()
