"""Partition reassignment: how long a new replica of an N-MiB partition takes to join
the ISR, against baselines measured in the same run on the same bytes.

    PYTHONPATH=src python bench/bench_reassign.py [--mib 64] [--throttle BYTES_PER_S]
    PYTHONPATH=src python bench/bench_reassign.py --mib 1024     # the long run

Two brokers over a real ZooKeeper. The partition is written on broker 1 (replication
factor 1), then reassigned to [1, 2] (AlterPartitionReassignments): broker 2 starts
following, copies the log by replica fetches and joins the ISR; the controller then
completes the reassignment. Baselines: a consumer (confluent-kafka) fetching the whole
partition from broker 1, and a plain copy of the partition's files (``shutil.copyfile``).
With ``--throttle`` the copy runs under leader/follower.replication.throttled.rate (and
``replication.quota.window.num=2``) and the measured rate is printed beside the limit.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition
from tests.helpers.broker import BrokerProcess

from odradek.client.admin import Admin, ConfigResource, NewTopic
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zookeeper_server import ZooKeeperServer

MiB = 1024 * 1024
TOPIC = "moved"
VALUE = 64 * 1024


async def admin_do(bootstrap: str, action: Callable[[Admin], Awaitable[object]]) -> object:
    admin = Admin(bootstrap)
    await admin.start()
    try:
        return await action(admin)
    finally:
        await admin.close()


def fill(bootstrap: str, nbytes: int) -> int:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1048576, "acks": "1"}
    )
    payload = b"r" * VALUE
    count = nbytes // VALUE
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(300) == 0
    return count


def consume_all(bootstrap: str, count: int) -> float:
    """Seconds for a consumer to fetch every record of the partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen = 0
    started = time.perf_counter()
    deadline = started + 600
    while seen < count and time.perf_counter() < deadline:
        seen += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    assert seen >= count, f"consumed {seen} of {count}"
    return elapsed


def copy_files(source: Path, target: Path) -> tuple[int, float]:
    target.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    total = 0
    for path in sorted(source.iterdir()):
        if path.is_file():
            shutil.copyfile(path, target / path.name)
            total += path.stat().st_size
    return total, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="partition size (1024 = 1 GiB)")
    parser.add_argument("--throttle", type=int, default=-1, help="bytes/s, as --throttle")
    parser.add_argument("--keep", help="put data and broker logs here (kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-reassign-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        zk = ZooKeeperServer(root / "zk").start()
        connect = f"127.0.0.1:{zk.port}/bench"
        brokers: dict[int, BrokerProcess] = {}
        zkc = None
        try:
            for broker_id in (1, 2):
                overrides = {
                    "zookeeper.connect": connect,
                    "broker.id": str(broker_id),
                    "offsets.topic.replication.factor": "1",
                    "controlled.shutdown.retry.backoff.ms": "100",
                }
                if args.throttle >= 0:
                    # Kafka's rate counts at least window.num - 1 windows, so by default a
                    # copy may run unthrottled for its first ~10 s worth; two windows keep
                    # that burst to about one second's worth on a short run.
                    overrides["replication.quota.window.num"] = "2"
                brokers[broker_id] = BrokerProcess(
                    root / f"b{broker_id}",
                    overrides=overrides,
                    log_path=root / f"b{broker_id}.log",
                ).start()
            zkc = ZkClient.connect(connect)
            deadline = time.monotonic() + 60
            while zkc.get_broker_ids() != [1, 2] and time.monotonic() < deadline:
                time.sleep(0.1)
            bootstrap = brokers[1].bootstrap
            asyncio.run(
                admin_do(
                    bootstrap,
                    lambda a: a.create_topics([NewTopic(TOPIC, replica_assignment={0: [1]})]),
                )
            )
            count = fill(bootstrap, args.mib * MiB)
            log_dir = brokers[1].data_dir / f"{TOPIC}-0"
            size = sum(p.stat().st_size for p in log_dir.glob("*.log"))

            fetch_s = consume_all(bootstrap, count)
            copied, copy_s = copy_files(log_dir, root / "plain-copy")

            if args.throttle >= 0:
                throttles = {
                    ConfigResource("topic", TOPIC): [
                        ("leader.replication.throttled.replicas", "set", "0:1"),
                        ("follower.replication.throttled.replicas", "set", "0:2"),
                    ]
                }
                for b in (1, 2):
                    throttles[ConfigResource("broker", str(b))] = [
                        ("leader.replication.throttled.rate", "set", str(args.throttle)),
                        ("follower.replication.throttled.rate", "set", str(args.throttle)),
                    ]

                async def set_throttles(a: Admin) -> None:
                    for resource, changes in throttles.items():
                        await a.incremental_alter_configs({resource: changes})

                asyncio.run(admin_do(bootstrap, set_throttles))
                time.sleep(1)  # the brokers apply the change notifications

            started = time.perf_counter()
            asyncio.run(
                admin_do(bootstrap, lambda a: a.alter_partition_reassignments({(TOPIC, 0): [1, 2]}))
            )
            while time.perf_counter() - started < 3600:
                state = zkc.get_partition_state(TOPIC, 0)
                if state is not None and 2 in state[0].isr:
                    break
                time.sleep(0.02)
            join_s = time.perf_counter() - started
            while time.perf_counter() - started < 3600:
                found = zkc.get_topic_assignment(TOPIC)
                if found is not None and not found[0].adding_replicas:
                    break
                time.sleep(0.02)
            done_s = time.perf_counter() - started

            def rate(nbytes: int, seconds: float) -> float:
                return nbytes / MiB / seconds

            print(f"partition: {size / MiB:.1f} MiB in {count} records of {VALUE} B")
            print(
                f"new replica joins the ISR   {join_s:7.2f} s  {rate(size, join_s):7.1f} MiB/s"
                f"  (reassignment complete at {done_s:.2f} s)"
            )
            print(
                f"baseline: consumer fetch    {fetch_s:7.2f} s  {rate(size, fetch_s):7.1f} MiB/s"
                f"  ratio join/fetch {join_s / fetch_s:.2f}"
            )
            print(
                f"baseline: plain file copy   {copy_s:7.2f} s  {rate(copied, copy_s):7.1f} MiB/s"
                f"  ratio join/copy {join_s / copy_s:.1f}"
            )
            if args.throttle >= 0:
                print(
                    f"throttle {args.throttle / MiB:.2f} MiB/s: measured "
                    f"{rate(size, join_s):.2f} MiB/s "
                    f"({size / join_s / max(args.throttle, 1):.2f} x the limit)"
                )
        finally:
            if zkc is not None:
                zkc.close()
            for broker in brokers.values():
                broker.stop(timeout=60)
            zk.stop()


if __name__ == "__main__":
    main()
