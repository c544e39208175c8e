"""Transactions cost: transactional produce throughput as a ratio to idempotent produce
(the baseline), measured in the same run, and the latency of commit_transaction.

Each transaction carries ``--per-txn`` records (default 1,000) of 100 B over three
partitions; the idempotent baseline sends the same records to the same partitions with
``enable.idempotence`` (acks=all), without transactions. Rounds alternate and the medians
are printed; the commit latency is commit_transaction's after the records were flushed
(EndTxn: PrepareCommit written and replicated; markers follow in the background). Against
the embedded broker by default; ``--cluster`` runs three brokers on
a real ZooKeeper (partitions replicated three times, so markers go to other brokers).

    PYTHONPATH=src python bench/bench_transactions.py [--transactions 50] [--rounds 5]
    PYTHONPATH=src python bench/bench_transactions.py --cluster
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

PAYLOAD = b"x" * 100
PARTITIONS = 3


def _send(producer: Producer, topic: str, count: int) -> None:
    for i in range(count):
        while True:
            try:
                producer.produce(topic, PAYLOAD, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)


def idempotent(bootstrap: str, topic: str, records: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    _send(producer, topic, PARTITIONS)  # producer id and connections first, as for the
    assert producer.flush(60) == 0  # transactional producer's init_transactions
    started = time.perf_counter()
    _send(producer, topic, records)
    assert producer.flush(120) == 0
    return records / (time.perf_counter() - started)


def transactional(
    bootstrap: str, topic: str, transactions: int, per_txn: int, txn_id: str
) -> tuple[float, list[float]]:
    """(records/s, commit latencies in ms)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    commits: list[float] = []
    started = time.perf_counter()
    for _ in range(transactions):
        producer.begin_transaction()
        _send(producer, topic, per_txn)
        producer.flush(60)  # the records are written: time the commit alone (EndTxn)
        before = time.perf_counter()
        producer.commit_transaction(60)
        commits.append((time.perf_counter() - before) * 1000)
    elapsed = time.perf_counter() - started
    return transactions * per_txn / elapsed, commits


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def start_brokers(root: Path, cluster: bool) -> tuple[list[BrokerProcess], ZooKeeperServer | None]:
    if not cluster:
        return [BrokerProcess(root / "b", overrides={
            "transaction.state.log.num.partitions": "5"}).start()], None  # fmt: skip
    zk = ZooKeeperServer(root / "zk").start()
    brokers = []
    for broker_id in (1, 2, 3):
        overrides = {
            "zookeeper.connect": f"127.0.0.1:{zk.port}",
            "broker.id": str(broker_id),
            "controlled.shutdown.retry.backoff.ms": "100",
        }
        brokers.append(BrokerProcess(root / f"b{broker_id}", overrides=overrides).start())
    return brokers, zk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=50, help="per round")
    parser.add_argument("--per-txn", type=int, default=1000, help="records per transaction")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cluster", action="store_true", help="3 brokers on ZooKeeper")
    parser.add_argument("--keep", help="put data and broker logs here (kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        brokers, zk = start_brokers(root, args.cluster)
        try:
            bootstrap = ",".join(b.bootstrap for b in brokers)
            replicas = 3 if args.cluster else 1
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("bench", PARTITIONS, replicas)])["bench"].result(30)
            if args.cluster:
                time.sleep(2)  # followers join the ISR
            # Warm up: connections, metadata, the state topic and its coordinator.
            idempotent(bootstrap, "bench", 1000)
            transactional(bootstrap, "bench", 2, 100, "bench-warm")
            records = args.transactions * args.per_txn
            base, txn, commits = [], [], []
            for round_ in range(args.rounds):
                base.append(idempotent(bootstrap, "bench", records))
                rate, latencies = transactional(
                    bootstrap, "bench", args.transactions, args.per_txn, f"bench-{round_}"
                )
                txn.append(rate)
                commits.extend(latencies)
            where = "3-broker cluster" if args.cluster else "embedded broker"
            b, t = statistics.median(base), statistics.median(txn)
            print(f"{where}, {args.per_txn} x 100 B per transaction, {args.rounds} rounds")
            print(f"idempotent     {b:10.0f} rec/s (baseline, median)")
            print(f"transactional  {t:10.0f} rec/s  ratio {t / b:.2f}")
            print(
                f"commit_transaction latency p50 {percentile(commits, 0.5):.1f} ms  "
                f"p99 {percentile(commits, 0.99):.1f} ms  ({len(commits)} commits)"
            )
        finally:
            for broker in brokers:
                broker.stop(timeout=60)
            if zk is not None:
                zk.stop()


if __name__ == "__main__":
    main()
