"""Rebalance time of odradek's own GroupConsumer, against librdkafka's in the same run.

Run from the repository root: ``.venv/bin/python bench/bench_clients.py`` (``--help`` for the
knobs). It starts its own broker subprocess and, for the eager ``range`` and the cooperative
``cooperative-sticky`` assignor, runs 10 consumers on a 100-partition topic: one member
closes (LeaveGroup), and the clock runs from that ``close()`` until the rebalance listeners
of the 9 others have handed out all 100 partitions again, disjointly; then a new member
subscribes and the clock runs until the 10-way split. The odradek members are
:class:`~odradek.client.group_consumer.GroupConsumer` objects (each with its own client),
all polled by tasks of one event loop. The baseline is the same trial with 10
confluent-kafka consumers (``bench_groups.rebalance_trials``), on the same broker, with the
same heartbeat interval; the ratio odradek / librdkafka is printed (below 1: faster).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_groups import rebalance_trials, summary

from odradek.client import Admin, GroupConsumer, NewTopic, RebalanceListener

REPO = Path(__file__).resolve().parents[1]
WAIT_S = 60.0
TP = tuple[str, int]


class View:
    """Every member's partitions, from the listeners; settles when ``expected`` own all."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.owned: dict[str, set[TP]] = {}
        self.expected: frozenset[str] = frozenset()
        self.settled = asyncio.Event()
        self.settled_at = 0.0

    def expect(self, members: frozenset[str]) -> None:
        self.expected = members
        self.settled.clear()
        self.check()

    def check(self) -> None:
        if self.settled.is_set() or set(self.owned) != set(self.expected):
            return
        sets = [self.owned[name] for name in self.expected]
        if all(sets) and len(set().union(*sets)) == self.partitions == sum(map(len, sets)):
            self.settled_at = time.monotonic()
            self.settled.set()


class Tracker(RebalanceListener):
    def __init__(self, name: str, view: View) -> None:
        self.name = name
        self.view = view
        self.leaving = False

    def _change(self, added: set[TP], removed: set[TP]) -> None:
        if self.leaving:
            return
        owned = self.view.owned.setdefault(self.name, set())
        owned -= removed
        owned |= added
        self.view.check()

    def on_partitions_assigned(self, partitions: set[TP]) -> None:
        self._change(partitions, set())

    def on_partitions_revoked(self, partitions: set[TP]) -> None:
        self._change(set(), partitions)


class Member:
    def __init__(self, name: str, bootstrap: str, group: str, topic: str, view: View, **config):
        self.tracker = Tracker(name, view)
        self.consumer = GroupConsumer(bootstrap, group_id=group, **config)
        self.topic = topic
        self.view = view
        self.name = name
        self.task: asyncio.Task[None] | None = None
        self.stopping = False
        self.subscribed_at = 0.0

    async def start(self) -> None:
        await self.consumer.start()
        self.subscribed_at = time.monotonic()
        self.consumer.subscribe([self.topic], listener=self.tracker)
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self.stopping:
            await self.consumer.poll(50)

    async def leave(self) -> float:
        """Stop polling (after the current poll, as an application would) and close;
        returns when close() was called."""
        assert self.task is not None
        self.stopping = True
        await asyncio.wait_for(self.task, WAIT_S)
        self.tracker.leaving = True
        self.view.owned.pop(self.name, None)
        called = time.monotonic()
        await self.consumer.close()
        return called


async def odradek_trials(
    bootstrap: str, assignor: str, heartbeat_ms: int, members: int, partitions: int, trials: int
) -> tuple[list[float], list[float]]:
    topic = f"bench-clients-{assignor}-{heartbeat_ms}"
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    view = View(partitions)
    config = {
        "partition_assignment_strategy": [assignor],
        "heartbeat_interval_ms": heartbeat_ms,
        "session_timeout_ms": 30000,
        "enable_auto_commit": False,
    }
    group = f"bench-odradek-{assignor}-{heartbeat_ms}"
    running = {
        f"m{i}": Member(f"m{i}", bootstrap, group, topic, view, **config) for i in range(members)
    }
    view.expect(frozenset(running))
    await asyncio.gather(*(m.start() for m in running.values()))
    await asyncio.wait_for(view.settled.wait(), WAIT_S)
    leaves: list[float] = []
    joins: list[float] = []
    serial = members
    try:
        for _ in range(trials):
            leaving = running.pop(sorted(running)[0])
            view.expect(frozenset(running))
            called = await leaving.leave()
            await asyncio.wait_for(view.settled.wait(), WAIT_S)
            leaves.append(view.settled_at - called)
            newcomer = Member(f"m{serial}", bootstrap, group, topic, view, **config)
            serial += 1
            running[newcomer.name] = newcomer
            view.expect(frozenset(running))
            await newcomer.start()
            await asyncio.wait_for(view.settled.wait(), WAIT_S)
            joins.append(view.settled_at - newcomer.subscribed_at)
    finally:
        for member in running.values():
            try:
                await member.leave()
            except TimeoutError:
                await member.consumer.close()
    return leaves, joins


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--trials", type=int, default=3, help="leaves (and joins) per setting")
    parser.add_argument("--heartbeat", type=int, default=100, help="heartbeat.interval.ms")
    parser.add_argument("--assignors", default="range,cooperative-sticky")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from tests.helpers.broker import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="odradek-bench-clients-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", log_path=Path(tmp) / "broker.log").start()
        try:
            print(
                f"rebalance: {args.members} consumers, {args.partitions} partitions, "
                f"heartbeat {args.heartbeat} ms; one member leaves (close) / a new one joins"
            )
            for assignor in args.assignors.split(","):
                try:
                    ours = asyncio.run(
                        odradek_trials(
                            broker.bootstrap,
                            assignor,
                            args.heartbeat,
                            args.members,
                            args.partitions,
                            args.trials,
                        )
                    )
                except TimeoutError:
                    print(f"   {assignor:18} odradek: the group did not settle in {WAIT_S:.0f} s")
                    continue
                print(f"   {assignor:18} odradek     leave -> stable: {summary(ours[0])}")
                print(f"   {'':18}             join  -> stable: {summary(ours[1])}", flush=True)
                theirs = rebalance_trials(
                    broker.bootstrap,
                    assignor,
                    args.heartbeat,
                    args.members,
                    args.partitions,
                    args.trials,
                )
                print(f"   {'':18} librdkafka  leave -> stable: {summary(theirs[0])}")
                print(f"   {'':18}             join  -> stable: {summary(theirs[1])}")
                for what, mine, base in (
                    ("leave", ours[0], theirs[0]),
                    ("join", ours[1], theirs[1]),
                ):
                    ratio = statistics.median(mine) / statistics.median(base)
                    print(f"   {'':18} {what:5} odradek / librdkafka (medians) = {ratio:.2f}")
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
