"""Scaling out across cores: the same produce workload against 1, 2 and 3 brokers.

Run from the repository root: ``.venv/bin/python bench/bench_scale.py`` (``--help`` for the
knobs). It starts one standalone ZooKeeper (the Debian ``zookeeper`` package) and, in
turn, clusters of 1, 2 and 3 brokers on 127.0.0.1 (each cluster under its own chroot).
Each cluster gets a topic with one partition per broker (replication factor 1, leaders
spread one per broker, checked), and one producer process per partition (confluent-kafka,
acks=1, 100-byte values) writes ``--records`` records to its partition. All producers
start together behind a barrier; throughput is every record over the time from the first
start to the last acknowledgement. Printed: records/s per cluster size, the ratio to one
broker, the brokers' CPU seconds, and the load average.

An odradek broker is one Python process whose event loop runs on one core at a time (the
I/O and network thread pools release the GIL only around system calls), so the scale-out
path is one broker process per core, as Redpanda runs one thread per core: partitions
spread over the processes and clients talk to each leader directly.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from produce_consume import process_cpu_s  # noqa: E402
from tests.helpers.cluster import BrokerCluster  # noqa: E402

from odradek.cluster.zookeeper_server import ZooKeeperServer  # noqa: E402


def _producer(bootstrap: str, topic: str, partition: int, count: int, barrier, out) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "enable.idempotence": False,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "compression.codec": "none",
        }
    )
    value = os.urandom(100)
    p.produce(topic, value, partition=partition)  # warm-up: connect, learn the leader
    p.flush(30)
    barrier.wait(60)
    started = time.time()
    cpu = time.process_time()  # this producer and librdkafka's threads
    for i in range(count):
        try:
            p.produce(topic, value, partition=partition)
        except BufferError:
            p.poll(0.001)
            p.produce(topic, value, partition=partition)
        if i & 0xFFF == 0:
            p.poll(0)
    remaining = p.flush(120)
    out.put((started, time.time(), remaining, time.process_time() - cpu))


def run(base: Path, zk_connect: str, size: int, records: int) -> tuple[float, float, float]:
    """(records/s of all producers together, brokers' CPU seconds, producers' CPU seconds)
    for ``size`` brokers."""
    cluster = BrokerCluster(base / f"brokers-{size}", f"{zk_connect}/scale{size}", size).start()
    try:
        topic = f"scale-{size}"
        cluster.create_topic(topic, size, 1)
        leaders = cluster.leaders(topic, via=1)
        if sorted(leaders.values()) != sorted(cluster.brokers):
            raise RuntimeError(f"leaders not spread one per broker: {leaders}")
        pids = [b.proc.pid for b in cluster.brokers.values() if b.proc is not None]
        ctx = mp.get_context("spawn")
        barrier, out = ctx.Barrier(size + 1), ctx.Queue()
        procs = [
            ctx.Process(
                target=_producer,
                args=(cluster.brokers[leaders[p]].bootstrap, topic, p, records, barrier, out),
            )
            for p in range(size)
        ]
        for proc in procs:
            proc.start()
        barrier.wait(120)
        cpu = sum(process_cpu_s(pid) for pid in pids)
        results = [out.get(timeout=300) for _ in procs]
        cpu = sum(process_cpu_s(pid) for pid in pids) - cpu
        for proc in procs:
            proc.join(30)
        if any(r[2] for r in results):
            raise RuntimeError(f"undelivered records: {results}")
        elapsed = max(r[1] for r in results) - min(r[0] for r in results)
        return size * records / elapsed, cpu, sum(r[3] for r in results)
    finally:
        cluster.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per producer")
    parser.add_argument("--max-brokers", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.2f}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        base = Path(tmp)
        zookeeper = ZooKeeperServer(base / "zookeeper").start()
        try:
            for size in range(1, args.max_brokers + 1):
                rate, cpu, client = run(base, zookeeper.connect, size, args.records)
                rows.append((size, rate, cpu, client, os.getloadavg()[0]))
        finally:
            zookeeper.stop()
    base_rate = rows[0][1]
    print(
        f"{'brokers':>7} {'rec/s':>11} {'x 1 broker':>10} {'broker CPU s/M rec':>18} "
        f"{'producer CPU s/M rec':>20} {'load':>6}"
    )
    for size, rate, cpu, client, load in rows:
        million = size * args.records / 1e6
        print(
            f"{size:>7} {rate:>11,.0f} {rate / base_rate:>10.2f} {cpu / million:>18.2f} "
            f"{client / million:>20.2f} {load:>6.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
