"""confluent-kafka (librdkafka 2.16) consumer groups against a real odradek broker subprocess.

For each of librdkafka's assignors (range, roundrobin, cooperative-sticky):

* 3 consumers on a 6-partition topic get 2 partitions each;
* a 4th joins: the group rebalances to 2/2/1/1. With the eager assignors every old member
  first gives up everything (on_revoke with its whole assignment); with cooperative-sticky
  members are only asked to revoke the partitions that move, and keep the rest throughout;
* one closes (LeaveGroup): its partitions move at once, well before the session timeout;
* one in a child process is SIGKILLed: its partitions move only once the session timeout
  (6000 ms, the broker's group.min.session.timeout.ms) expires.

Static membership (KIP-345): a member with ``group.instance.id`` that closes and comes back
within the session timeout gets its partitions back without a rebalance: the generation
stays the same (read from librdkafka's serialized group metadata and cross-checked with
DescribeGroups) and the other member sees no callbacks at all.

Every wait is bounded; the consumers of a group are all polled from the test's thread, which
is what drives their rebalance callbacks.
"""

from __future__ import annotations

import json
import queue
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.group_admin import SyncGroupAdmin
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(150)

WAIT_S = 20.0  # bound of every wait for the group to settle
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms
PARTITIONS = 6
ASSIGNORS = ["range", "roundrobin", "cooperative-sticky"]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


@pytest.fixture(scope="module")
def group_admin(bootstrap: str) -> Iterator[SyncGroupAdmin]:
    admin = SyncGroupAdmin(bootstrap)
    try:
        yield admin
    finally:
        admin.close()


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=WAIT_S)


def consumer_config(bootstrap: str, group: str, assignor: str, **extra: object) -> dict:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "partition.assignment.strategy": assignor,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": 500,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra)
    return conf


@dataclass
class Member:
    """A group consumer that records every rebalance callback."""

    name: str
    consumer: Consumer
    events: list[tuple[str, frozenset[int]]] = field(default_factory=list)
    closed: bool = False

    @classmethod
    def join(cls, name: str, conf: dict, topic: str) -> Member:
        member = cls(name, Consumer(conf))
        member.consumer.subscribe(
            [topic],
            on_assign=lambda _c, parts: member._record("assign", parts),
            on_revoke=lambda _c, parts: member._record("revoke", parts),
        )
        return member

    def _record(self, kind: str, parts: list[TopicPartition]) -> None:
        self.events.append((kind, frozenset(p.partition for p in parts)))

    def assigned(self) -> frozenset[int]:
        return frozenset(p.partition for p in self.consumer.assignment())

    def revoked_since(self, mark: int) -> frozenset[int]:
        return frozenset().union(*(p for kind, p in self.events[mark:] if kind == "revoke"))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def pump(
    members: list[Member], settled: Callable[[], bool], what: str, timeout: float = WAIT_S
) -> float:
    """Poll every member until ``settled()``; returns the seconds it took."""
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        for member in members:
            member.consumer.poll(0.02)
        if settled():
            return time.monotonic() - started
    state = {m.name: sorted(m.assigned()) for m in members}
    raise AssertionError(f"{what}: not settled after {timeout}s; assignments {state}")


def observe(members: list[Member], seconds: float) -> None:
    """Keep polling every member for a while (several heartbeats) without a goal."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for member in members:
            member.consumer.poll(0.02)


def split_evenly(members: list[Member], sizes: list[int], expected: set[int]) -> Callable[[], bool]:
    """Settled when the members own disjoint sets covering ``expected`` with ``sizes``."""

    def check() -> bool:
        owned = [m.assigned() for m in members]
        union = frozenset().union(*owned)
        return (
            sorted(len(o) for o in owned) == sorted(sizes)
            and sum(len(o) for o in owned) == len(union)
            and union == expected
        )

    return check


CHILD = r"""
import json, sys, time
from confluent_kafka import Consumer
conf = json.loads(sys.argv[1])
topic = sys.argv[2]
c = Consumer(conf)
c.subscribe([topic])
reported = None
deadline = time.monotonic() + 120  # the parent SIGKILLs it long before
while time.monotonic() < deadline:
    c.poll(0.05)
    owned = sorted(p.partition for p in c.assignment())
    if owned != reported:
        print(json.dumps(owned), flush=True)
        reported = owned
"""


class ChildMember:
    """A consumer in a child process (so it can be SIGKILLed); reports each assignment."""

    def __init__(self, conf: dict, topic: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(conf), topic],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.assignments: queue.Queue[frozenset[int]] = queue.Queue()
        self.latest: frozenset[int] = frozenset()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.assignments.put(frozenset(json.loads(line)))

    def owned(self) -> frozenset[int]:
        while not self.assignments.empty():
            self.latest = self.assignments.get_nowait()
        return self.latest

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_group_lifecycle(bootstrap: str, assignor: str) -> None:
    topic, group = unique(f"grp-{assignor}"), unique(f"g-{assignor}")
    create_topic(bootstrap, topic)
    conf = consumer_config(bootstrap, group, assignor)
    everything = set(range(PARTITIONS))
    members = [Member.join(f"m{i}", conf, topic) for i in range(3)]
    child: ChildMember | None = None
    try:
        # Three members: two partitions each.
        pump(members, split_evenly(members, [2, 2, 2], everything), "3 members")
        before = {m.name: m.assigned() for m in members}
        marks = {m.name: len(m.events) for m in members}

        # A fourth joins: 2/2/1/1.
        members.append(Member.join("m3", conf, topic))
        pump(members, split_evenly(members, [2, 2, 1, 1], everything), "4th member joined")
        for member in members[:3]:
            old, new = before[member.name], member.assigned()
            revoked = member.revoked_since(marks[member.name])
            if assignor == "cooperative-sticky":
                # Incremental: only what moved away was revoked; what stayed never was.
                assert revoked == old - new, (member.name, old, new, revoked)
                assert new <= old  # sticky: nobody gains when a member joins
            else:
                # Eager: everything is revoked before the new assignment.
                assert old <= revoked, (member.name, old, new, revoked)
        assert len(members[3].assigned()) in (1, 2)

        # One closes (LeaveGroup): its partitions move at once, not after the session timeout.
        leaving = members.pop(0)
        leaving.close()
        elapsed = pump(members, split_evenly(members, [2, 2, 2], everything), "after close")
        assert elapsed < SESSION_TIMEOUT_MS / 1000 * 0.75, f"close took {elapsed:.2f}s to move"

        # One in a child process joins, then is SIGKILLed: the session timeout moves its share.
        child = ChildMember(conf, topic)

        def child_joined() -> bool:
            assert child is not None
            got = child.owned()
            if len(got) not in (1, 2):
                return False
            sizes = [2, 2, 1, 1]
            sizes.remove(len(got))
            return split_evenly(members, sizes, everything - got)()

        pump(members, child_joined, "child joined")
        owned_by_child = child.owned()
        child.kill()
        killed_at = time.monotonic()
        pump(members, split_evenly(members, [2, 2, 2], everything), "after SIGKILL", timeout=30)
        elapsed = time.monotonic() - killed_at
        # The dead member's last heartbeat was at most one heartbeat interval (0.5 s) before
        # the kill, so its session cannot expire much earlier than 5.5 s after it.
        assert elapsed >= SESSION_TIMEOUT_MS / 1000 - 1.0, (
            f"partitions {sorted(owned_by_child)} moved {elapsed:.2f}s after the SIGKILL, "
            "before the session timeout"
        )
        assert elapsed < SESSION_TIMEOUT_MS / 1000 + 10
    finally:
        if child is not None:
            child.kill()
        for member in members:
            member.close()


def cgmd_generation(consumer: Consumer) -> tuple[int, str]:
    """(generation id, member id) from librdkafka's serialized ConsumerGroupMetadata: the
    magic ``CGMDv2:``, the generation as a host-order int32, then NUL-terminated group id
    and member id."""
    raw = bytes(consumer.consumer_group_metadata())
    magic = b"CGMDv2:"
    assert raw.startswith(magic), raw[:16]
    (generation,) = struct.unpack_from("=i", raw, len(magic))
    _group, member_id = raw[len(magic) + 4 :].split(b"\x00")[:2]
    return generation, member_id.decode()


def test_static_member_restart_keeps_assignment_without_rebalance(
    bootstrap: str, group_admin: SyncGroupAdmin
) -> None:
    topic, group = unique("static"), unique("g-static")
    create_topic(bootstrap, topic, partitions=4)

    def static(name: str) -> Member:
        conf = consumer_config(bootstrap, group, "range", **{"group.instance.id": name})
        return Member.join(name, conf, topic)

    a, b = static("instance-a"), static("instance-b")
    try:
        pump([a, b], split_evenly([a, b], [2, 2], set(range(4))), "two static members")
        # Let both see the final generation (the first member's JoinGroup may have been
        # answered before the second arrived).
        pump(
            [a, b],
            lambda: cgmd_generation(a.consumer)[0] == cgmd_generation(b.consumer)[0],
            "same generation",
        )
        generation, old_member_id = cgmd_generation(a.consumer)
        a_partitions, b_partitions = a.assigned(), b.assigned()
        b_mark = len(b.events)
        described = group_admin.describe_group(group)
        assert described.state == "Stable"
        by_instance = {m.group_instance_id: m for m in described.members}
        assert by_instance["instance-a"].member_id == old_member_id

        # A static member does not leave the group on close; it comes back under the same
        # instance id well within the session timeout.
        a.close()
        a = static("instance-a")
        pump([a, b], lambda: a.assigned() == a_partitions, "static member back")
        new_generation, new_member_id = cgmd_generation(a.consumer)
        assert new_generation == generation  # no rebalance: same generation
        assert new_member_id != old_member_id  # KIP-345: a new member id for the instance
        # b kept polling all along (and a few heartbeats more) and never saw a callback.
        observe([a, b], 1.5)
        assert b.events[b_mark:] == []
        assert b.assigned() == b_partitions
        assert cgmd_generation(b.consumer)[0] == generation

        described = group_admin.describe_group(group)
        assert described.state == "Stable"
        by_instance = {m.group_instance_id: m for m in described.members}
        assert set(by_instance) == {"instance-a", "instance-b"}
        assert by_instance["instance-a"].member_id == new_member_id
        assert {p for _, p in by_instance["instance-a"].partitions} == a_partitions
        assert {p for _, p in by_instance["instance-b"].partitions} == b_partitions
    finally:
        a.close()
        b.close()
