"""Consumer-group figures of one odradek broker: rebalance time and offset-commit throughput.

Run from the repository root: ``.venv/bin/python bench/bench_groups.py`` (``--help`` for the
knobs). It starts its own broker subprocess (data in a temporary directory, 127.0.0.1, free
port, ``group.initial.rebalance.delay.ms=0``) and prints:

1. **Rebalance after a member leaves.** 10 confluent-kafka consumers (one thread each, each
   polling its own consumer) share a 100-partition topic. One member calls ``close()``
   (LeaveGroup); the clock runs from that call until the rebalance callbacks of the 9 others
   have handed out all 100 partitions again (disjointly) — the group is Stable and
   consuming. Then a new member joins (also timed: from its ``subscribe()`` to the 10-way
   split) and the next trial starts. Done for the eager ``range`` and the incremental
   ``cooperative-sticky`` assignor, each with librdkafka's default heartbeat interval
   (3000 ms: members learn of a rebalance from a heartbeat, so this bounds the wait) and with
   100 ms (closer to what the broker itself costs).
2. **OffsetCommit vs Produce requests of the same size.** odradek's own client pipelines
   requests on one connection (``--concurrency`` in flight): OffsetCommit requests
   committing 1 and 100 offsets (a simple-consumer commit: the coordinator appends one
   record per offset to ``__consumer_offsets``, acks=all), against Produce requests (acks=-1)
   whose encoded size is the same, carrying a batch of 1 and 100 records. Requests/s of each,
   offsets/s, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.core import KafkaClient
from odradek.client.entities import build_request
from odradek.client.group_admin import GroupAdmin
from odradek.protocol.codec import encode_request
from odradek.records.batch import Record, build_batch

REPO = Path(__file__).resolve().parents[1]
PRODUCE = 0
OFFSET_COMMIT = 8
WAIT_S = 60.0


# -- 1. rebalance after a member leaves ----------------------------------------------------------


@dataclass
class GroupView:
    """Every member's current assignment, updated from the rebalance callbacks."""

    partitions: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    owned: dict[str, set[int]] = field(default_factory=dict)
    # (member names expected, time the last callback made them own everything disjointly)
    target: frozenset[str] = frozenset()
    settled_at: float | None = None
    settled: threading.Event = field(default_factory=threading.Event)

    def expect(self, members: frozenset[str]) -> None:
        with self.lock:
            self.target = members
            self.settled_at = None
            self.settled.clear()
            self._check()

    def update(self, name: str, change: Callable[[set[int]], None]) -> None:
        with self.lock:
            change(self.owned.setdefault(name, set()))
            self._check()

    def drop(self, name: str) -> None:
        with self.lock:
            self.owned.pop(name, None)
            self._check()

    def _check(self) -> None:
        if not self.target or self.settled_at is not None or set(self.owned) != self.target:
            return
        sets = [self.owned[n] for n in self.target]
        union = set().union(*sets)
        if len(union) == self.partitions == sum(len(s) for s in sets) and all(sets):
            self.settled_at = time.monotonic()
            self.settled.set()


class MemberThread:
    """One consumer polled by its own thread, as an application would run it."""

    def __init__(self, name: str, conf: dict[str, Any], topic: str, view: GroupView) -> None:
        self.name = name
        self.view = view
        self.cooperative = conf["partition.assignment.strategy"] == "cooperative-sticky"
        self._conf = conf
        self._topic = topic
        self._stop = threading.Event()
        self.subscribed_at = 0.0
        self.close_called_at = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _on_assign(self, _consumer: Consumer, parts: list[TopicPartition]) -> None:
        if self._stop.is_set():
            return  # leaving: no longer part of the group's view
        got = {p.partition for p in parts}
        if self.cooperative:
            self.view.update(self.name, lambda owned: owned.update(got))
        else:
            self.view.update(self.name, lambda owned: (owned.clear(), owned.update(got)))

    def _on_revoke(self, _consumer: Consumer, parts: list[TopicPartition]) -> None:
        if self._stop.is_set():
            return  # close() revokes everything; the view already forgot this member
        lost = {p.partition for p in parts}
        self.view.update(self.name, lambda owned: owned.difference_update(lost))

    def _run(self) -> None:
        consumer = Consumer(self._conf)
        self.subscribed_at = time.monotonic()
        consumer.subscribe([self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        deadline = time.monotonic() + 3600
        while not self._stop.is_set() and time.monotonic() < deadline:
            consumer.poll(0.05)
        self.view.drop(self.name)
        self.close_called_at = time.monotonic()
        consumer.close()

    def leave(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._thread.join(WAIT_S)


def rebalance_trials(
    bootstrap: str, assignor: str, heartbeat_ms: int, members: int, partitions: int, trials: int
) -> tuple[list[float], list[float]]:
    """(leave-to-stable seconds, join-to-stable seconds) per trial."""
    topic = f"bench-rebalance-{assignor}-{heartbeat_ms}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=WAIT_S)
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{assignor}-{heartbeat_ms}",
        "partition.assignment.strategy": assignor,
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": heartbeat_ms,
        "enable.auto.commit": False,
        "auto.offset.reset": "latest",
    }
    view = GroupView(partitions)
    running = {f"m{i}": MemberThread(f"m{i}", conf, topic, view) for i in range(members)}
    view.expect(frozenset(running))
    if not view.settled.wait(WAIT_S):
        raise RuntimeError(f"{members} members never shared {partitions} partitions")
    leaves: list[float] = []
    joins: list[float] = []
    serial = members
    try:
        for _ in range(trials):
            name = sorted(running)[0]
            leaving = running.pop(name)
            view.expect(frozenset(running))
            leaving.leave()
            if not view.settled.wait(WAIT_S):
                raise RuntimeError("the group never settled after a member left")
            leaving.join()
            assert view.settled_at is not None
            leaves.append(view.settled_at - leaving.close_called_at)

            newcomer = MemberThread(f"m{serial}", conf, topic, view)
            serial += 1
            running[newcomer.name] = newcomer
            view.expect(frozenset(running))
            if not view.settled.wait(WAIT_S):
                raise RuntimeError("the group never settled after a member joined")
            assert view.settled_at is not None
            joins.append(view.settled_at - newcomer.subscribed_at)
    finally:
        for member in running.values():
            member.leave()
        for member in running.values():
            member.join()
    return leaves, joins


# -- 2. OffsetCommit vs Produce ----------------------------------------------------------------


def commit_request(
    version: int, group: str, topic: str, count: int, base: int, metadata: str = ""
) -> Any:
    return build_request(
        OFFSET_COMMIT,
        version,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        retention_time=-1,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": base + p,
                        "committed_leader_epoch": -1,
                        "committed_metadata": metadata,
                    }
                    for p in range(count)
                ],
            }
        ],
    )


def produce_request(version: int, topic: str, value_sizes: list[int]) -> Any:
    batch = bytes(build_batch([Record(b"v" * size) for size in value_sizes]))
    return build_request(
        PRODUCE,
        version,
        transactional_id=None,
        acks=-1,
        timeout=30000,
        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    )


def size_of(version: int, request: Any) -> int:
    return len(encode_request(version, 1, "bench", request))


def matching_pair(
    commit_version: int, produce_version: int, group: str, topics: tuple[str, str], count: int
) -> tuple[list[Any], int, Any, int]:
    """OffsetCommit requests of ``count`` offsets and a Produce request of ``count`` records
    with the same encoded size: record values grow one byte at a time (spread over the
    records) until the Produce request is as big as the commit; when even empty records are
    bigger, the commits carry offset metadata until they catch up."""
    commit_topic, produce_topic = topics
    metadata = ""
    while True:
        commit = commit_request(commit_version, group, commit_topic, count, 0, metadata)
        target = size_of(commit_version, commit)
        sizes = [0] * count
        produce = produce_request(produce_version, produce_topic, sizes)
        size = size_of(produce_version, produce)
        if size > target:
            # Each metadata character adds one byte per offset.
            metadata += "m" * max(1, (size - target) // count)
            continue
        step = 0
        while size < target and step < 100_000:
            sizes[step % count] += 1
            step += 1
            produce = produce_request(produce_version, produce_topic, sizes)
            size = size_of(produce_version, produce)
        commits = [
            commit_request(commit_version, group, commit_topic, count, base, metadata)
            for base in range(64)
        ]
        return commits, target, produce, size


async def pipelined(
    client: KafkaClient, node: int, requests: list[Any], concurrency: int, seconds: float
) -> float:
    """Requests/s over ``seconds`` with ``concurrency`` requests in flight; every answer is
    checked for errors."""
    sent = 0
    stop_at = 0.0

    async def worker(offset: int) -> None:
        nonlocal sent
        index = offset
        while time.monotonic() < stop_at:
            response = await client.send(node, requests[index % len(requests)])
            check_answer(response)
            sent += 1
            index += concurrency

    stop_at = time.monotonic() + 0.3  # warm up
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    sent = 0
    started = time.monotonic()
    stop_at = started + seconds
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return sent / (time.monotonic() - started)


def check_answer(response: Any) -> None:
    for topic in getattr(response, "topics", None) or getattr(response, "responses", ()):
        for part in getattr(topic, "partitions", None) or getattr(topic, "partition_responses", ()):
            if int(part.error_code):
                raise RuntimeError(f"request failed: {part.error_code!r}")


async def commit_vs_produce(
    bootstrap: str, concurrency: int, seconds: float
) -> list[tuple[int, int, float, int, float]]:
    """Per offsets-per-request: (count, commit size, commits/s, produce size, produces/s)."""
    topic_commit, topic_produce = "bench-commit-target", "bench-produce-target"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic_commit, 100, 1), NewTopic(topic_produce, 1, 1)])
    for future in futures.values():
        future.result(timeout=WAIT_S)
    results = []
    async with KafkaClient(bootstrap, client_id="bench") as client:
        group_admin = GroupAdmin(client)
        coordinator = await group_admin.find_coordinator("bench-commits")
        await client.wait_for_topics([topic_commit, topic_produce])
        leader = await client.leader_for(topic_produce, 0)
        commit_version = min(await client.api_version(coordinator, OFFSET_COMMIT), 9)
        produce_version = await client.api_version(leader, PRODUCE)
        for count in (1, 100):
            commits, commit_size, produce, produce_size = matching_pair(
                commit_version,
                produce_version,
                "bench-commits",
                (topic_commit, topic_produce),
                count,
            )
            commit_rates, produce_rates = [], []
            for _ in range(2):  # alternate, keep the best of each: the machine is shared
                commit_rates.append(
                    await pipelined(client, coordinator, commits, concurrency, seconds)
                )
                produce_rates.append(
                    await pipelined(client, leader, [produce], concurrency, seconds)
                )
            results.append(
                (count, commit_size, max(commit_rates), produce_size, max(produce_rates))
            )
    return results


# -- main --------------------------------------------------------------------------------------


def summary(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return (
        f"median {statistics.median(ms):7.0f} ms   min {ms[0]:6.0f}   max {ms[-1]:6.0f}"
        f"   (n={len(ms)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--trials", type=int, default=5, help="leaves (and joins) per setting")
    parser.add_argument("--heartbeats", default="3000,100", help="heartbeat.interval.ms values")
    parser.add_argument("--assignors", default="range,cooperative-sticky")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--seconds", type=float, default=2.0, help="per throughput run")
    args = parser.parse_args()

    # The same broker launcher the integration tests use (subprocess, free port, SIGTERM).
    sys.path.insert(0, str(REPO))
    from tests.helpers.broker import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="odradek-bench-groups-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", log_path=Path(tmp) / "broker.log").start()
        try:
            print(
                f"1. rebalance: {args.members} confluent-kafka consumers, "
                f"{args.partitions} partitions, one member leaves (close) / a new one joins"
            )
            for assignor in args.assignors.split(","):
                for heartbeat in (int(h) for h in args.heartbeats.split(",")):
                    leaves, joins = rebalance_trials(
                        broker.bootstrap,
                        assignor,
                        heartbeat,
                        args.members,
                        args.partitions,
                        args.trials,
                    )
                    label = f"{assignor:18} heartbeat {heartbeat:4} ms"
                    print(f"   {label}  leave -> stable: {summary(leaves)}")
                    print(f"   {'':37}  join  -> stable: {summary(joins)}")

            print(
                f"2. OffsetCommit vs Produce of the same encoded size, "
                f"{args.concurrency} in flight on one connection"
            )
            rows = asyncio.run(commit_vs_produce(broker.bootstrap, args.concurrency, args.seconds))
            for count, commit_size, commits, produce_size, produces in rows:
                print(
                    f"   {count:3} offsets/request ({commit_size} B): {commits:8.0f} commits/s"
                    f" = {commits * count:9.0f} offsets/s | Produce {count:3} records"
                    f" ({produce_size} B): {produces:8.0f} requests/s"
                    f" | commit/produce = {commits / produces:.2f}"
                )
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
