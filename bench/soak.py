"""Soak test: a steady produce/consume load against one broker, watching its RSS and fds.

Run from the repository root: ``.venv/bin/python bench/soak.py`` (30 minutes by default,
``--minutes`` to change, ``--help`` for the rest). It starts its own broker subprocess
(127.0.0.1, free port, temporary data directory) and drives it with confluent-kafka:

* one producer at ``--rate`` records/s (acks=all) into a ``--partitions``-partition topic;
* one consumer in a consumer group reading them back (heartbeats, offset commits), which
  checks every record it sees against what was produced;
* connection churn: every ``--churn-seconds`` a short-lived producer connects, produces one
  record, and closes (per-connection state that is never freed shows up here).

Every ``--sample-seconds`` (10) it reads the broker's VmRSS from /proc/PID/status and counts
/proc/PID/fd. At the end it prints the samples, then the growth per minute of each over the
second half of the run (least-squares line; the first half is warm-up: caches, page cache
of the log, allocator arenas). It exits 1 if RSS grows faster than ``--max-rss-mb-per-min``
or fds faster than ``--max-fds-per-min``, if a record was lost or altered, or if the broker
died or logged a traceback.

``--tracemalloc DIR`` runs the broker under tracemalloc (bench/tracemalloc_broker.py) and
writes a snapshot to DIR every sampling interval; compare two with
``python bench/tracemalloc_broker.py --diff OLD NEW``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
TOPIC = "soak"


@dataclass
class Sample:
    elapsed_s: float
    rss_kb: int
    fds: int
    produced: int
    consumed: int


@dataclass
class Counters:
    acked: int = 0
    produce_errors: int = 0
    consumed: int = 0
    mismatches: int = 0
    churned: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def proc_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def proc_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, in value units per minute."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return sxy / sxx * 60.0


def value_for(seq: int, size: int) -> bytes:
    """The record value for sequence number ``seq``: checkable without remembering it."""
    head = f"{seq:012d}:".encode()
    return (head + bytes((seq + i) % 251 for i in range(size)))[:size].ljust(size, b".")


def run_producer(bootstrap: str, rate: float, size: int, stop: threading.Event, c: Counters):
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True}
    )

    def delivered(err, msg) -> None:
        with c.lock:
            if err is None:
                c.acked += 1
            else:
                c.produce_errors += 1
                c.errors.append(f"produce: {err}")

    seq = 0
    start = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - start) * rate)
        while seq < due:
            producer.produce(
                TOPIC, key=str(seq).encode(), value=value_for(seq, size), on_delivery=delivered
            )
            seq += 1
        producer.poll(0.01)
    producer.flush(30)


def run_consumer(bootstrap: str, size: int, stop: threading.Event, c: Counters) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "soak",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
        }
    )
    consumer.subscribe([TOPIC])
    seen: set[int] = set()
    while not stop.is_set():
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() != KafkaError._PARTITION_EOF:
                with c.lock:
                    c.errors.append(f"consume: {msg.error()}")
            continue
        key = msg.key()
        if key is None or not key.isdigit():
            continue  # a churn record
        seq = int(key)
        with c.lock:
            if msg.value() != value_for(seq, size):
                c.mismatches += 1
                c.errors.append(f"record {seq} at {msg.partition()}/{msg.offset()} altered")
            if seq not in seen:
                seen.add(seq)
                c.consumed += 1
    consumer.close()


def run_churn(bootstrap: str, every: float, stop: threading.Event, c: Counters) -> None:
    while not stop.wait(every):
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce(TOPIC, key=b"churn", value=b"x")
        if producer.flush(10) == 0:
            with c.lock:
                c.churned += 1


def broker_process(data_dir: Path, log_path: Path, snapshot_dir: Path | None, interval: float):
    sys.path.insert(0, str(REPO))
    from tests.helpers.broker import BrokerProcess

    class SoakBroker(BrokerProcess):
        def command(self) -> list[str]:
            cmd = super().command()
            if snapshot_dir is None:
                return cmd
            # python -m odradek ... -> python bench/tracemalloc_broker.py DIR SECONDS ...
            wrapper = [
                str(REPO / "bench" / "tracemalloc_broker.py"),
                str(snapshot_dir),
                str(interval),
            ]
            return [cmd[0], *wrapper, *cmd[3:]]

    return SoakBroker(data_dir, log_path=log_path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=500.0, help="records/s produced")
    parser.add_argument("--size", type=int, default=200, help="bytes per record value")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--churn-seconds", type=float, default=5.0)
    parser.add_argument("--max-rss-mb-per-min", type=float, default=0.2)
    parser.add_argument("--max-fds-per-min", type=float, default=0.5)
    parser.add_argument(
        "--tracemalloc",
        type=Path,
        default=None,
        metavar="DIR",
        help="write broker tracemalloc snapshots to DIR",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="odradek-soak-") as tmp:
        log_path = Path(tmp) / "broker.log"
        if args.tracemalloc is not None:
            args.tracemalloc.mkdir(parents=True, exist_ok=True)
        broker = broker_process(
            Path(tmp) / "data", log_path, args.tracemalloc, args.sample_seconds
        ).start()
        pid = broker.proc.pid
        try:
            return soak(args, broker.bootstrap, pid, broker)
        finally:
            broker.stop()
            print(f"broker log: {log_path.stat().st_size} bytes")


def soak(args: argparse.Namespace, bootstrap: str, pid: int, broker) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, args.partitions, 1)]).values():
        future.result(30)
    counters = Counters()
    stop = threading.Event()
    stop_consumer = threading.Event()
    producers = [
        threading.Thread(
            target=run_producer, args=(bootstrap, args.rate, args.size, stop, counters)
        ),
        threading.Thread(target=run_churn, args=(bootstrap, args.churn_seconds, stop, counters)),
    ]
    consumer = threading.Thread(
        target=run_consumer, args=(bootstrap, args.size, stop_consumer, counters)
    )
    threads = [*producers, consumer]
    for thread in threads:
        thread.start()
    samples: list[Sample] = []
    start = time.monotonic()
    end = start + args.minutes * 60
    print(f"soak: {args.minutes:g} min at {args.rate:g} rec/s x {args.size} B, broker pid {pid}")
    print(f"{'t (s)':>7} {'RSS (MB)':>9} {'fds':>5} {'acked':>9} {'consumed':>9}")
    died = False
    try:
        while True:
            now = time.monotonic()
            if not broker.is_running():
                died = True
                break
            with counters.lock:
                sample = Sample(
                    now - start, proc_rss_kb(pid), proc_fds(pid), counters.acked, counters.consumed
                )
            samples.append(sample)
            print(
                f"{sample.elapsed_s:7.0f} {sample.rss_kb / 1024:9.1f} {sample.fds:5d} "
                f"{sample.produced:9d} {sample.consumed:9d}",
                flush=True,
            )
            if now >= end:
                break
            time.sleep(max(0.0, min(args.sample_seconds, end - time.monotonic())))
    finally:
        stop.set()
        for thread in producers:
            thread.join(60)
        # Let the consumer catch up with the last acknowledged records.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and counters.consumed < counters.acked:
            time.sleep(0.2)
        stop_consumer.set()
        consumer.join(60)

    half = [s for s in samples if s.elapsed_s >= samples[-1].elapsed_s / 2]
    rss_slope = slope_per_minute([(s.elapsed_s, s.rss_kb / 1024) for s in half])
    fd_slope = slope_per_minute([(s.elapsed_s, s.fds) for s in half])
    print()
    print(
        f"RSS: start {samples[0].rss_kb / 1024:.1f} MB, end {samples[-1].rss_kb / 1024:.1f} MB,"
        f" growth over the second half {rss_slope:+.3f} MB/min"
        f" (limit {args.max_rss_mb_per_min})"
    )
    print(
        f"fds: start {samples[0].fds}, end {samples[-1].fds}, growth over the second half"
        f" {fd_slope:+.3f}/min (limit {args.max_fds_per_min})"
    )
    print(
        f"records: {counters.acked} acknowledged, {counters.consumed} consumed,"
        f" {counters.mismatches} altered, {counters.produce_errors} produce errors,"
        f" {counters.churned} churn connections"
    )
    failures = []
    if died:
        failures.append("the broker died")
    if rss_slope > args.max_rss_mb_per_min:
        failures.append(f"RSS grows {rss_slope:.3f} MB/min")
    if fd_slope > args.max_fds_per_min:
        failures.append(f"fds grow {fd_slope:.3f}/min")
    if counters.mismatches or counters.produce_errors:
        failures.append("records altered or not acknowledged")
    if counters.consumed < counters.acked:
        failures.append(f"consumer fell behind: {counters.consumed} of {counters.acked}")
    if "Traceback" in broker.log_text():
        failures.append("traceback in the broker log")
    for error in counters.errors[:10]:
        print(f"  {error}")
    print("FAIL: " + "; ".join(failures) if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
