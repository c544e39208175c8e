"""Replication cost: one producer, acks=1 (the baseline) vs acks=all, to a partition
replicated three times across three broker processes over a real ZooKeeper.

    PYTHONPATH=src python bench/bench_replication.py [--messages 10000] [--rounds 3]

Prints the median messages/s of each (rounds alternate) and the ratio acks=all / acks=1,
measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.helpers.broker import BrokerProcess

from odradek.cluster.zookeeper_server import ZooKeeperServer


def produce(bootstrap: str, topic: str, count: int, acks: str) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    payload = b"x" * 100
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(120) == 0
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", help="put data and broker logs here (kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-repl-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        zk = ZooKeeperServer(root / "zk").start()
        brokers = []
        try:
            for broker_id in (1, 2, 3):
                overrides = {
                    "zookeeper.connect": f"127.0.0.1:{zk.port}",
                    "broker.id": str(broker_id),
                    "controlled.shutdown.retry.backoff.ms": "100",
                }
                brokers.append(BrokerProcess(root / f"b{broker_id}", overrides=overrides).start())
            bootstrap = ",".join(b.bootstrap for b in brokers)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for topic in ("one", "all"):
                admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
            time.sleep(2)  # followers join the ISR
            for topic, acks in (("one", "1"), ("all", "all")):  # warm up: connections, metadata
                produce(bootstrap, topic, 1000, acks)
            # Alternate and take medians: the machine is shared, single runs are noisy.
            ones, alls = [], []
            for _ in range(args.rounds):
                ones.append(produce(bootstrap, "one", args.messages, "1"))
                alls.append(produce(bootstrap, "all", args.messages, "all"))
            one, every = statistics.median(ones), statistics.median(alls)
            print(f"acks=1   {one:10.0f} msg/s (baseline, median of {args.rounds})")
            print(f"acks=all {every:10.0f} msg/s  ratio {every / one:.2f}")
        finally:
            for broker in brokers:
                broker.stop(timeout=60)
            zk.stop()


if __name__ == "__main__":
    main()
