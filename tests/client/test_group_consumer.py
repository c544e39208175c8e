"""GroupConsumer against a real broker subprocess: joins, rebalances (eager and cooperative),
static membership, commits, positions, poll timeouts, pattern subscriptions."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from odradek.client import (
    Admin,
    GroupAdmin,
    GroupConsumer,
    NewTopic,
    NoOffsetForPartitionError,
    OffsetAndMetadata,
    Producer,
    RebalanceListener,
)
from tests.client.conftest import PeerBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TP = tuple[str, int]
# Fast group timings for tests; the broker's group.min.session.timeout.ms is 6000.
FAST = {"heartbeat_interval_ms": 300, "session_timeout_ms": 10000, "auto_offset_reset": "earliest"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Recorder(RebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set[TP]]] = []

    def on_partitions_assigned(self, partitions: set[TP]) -> None:
        self.events.append(("assigned", partitions))

    async def on_partitions_revoked(self, partitions: set[TP]) -> None:  # async works too
        self.events.append(("revoked", partitions))

    def on_partitions_lost(self, partitions: set[TP]) -> None:
        self.events.append(("lost", partitions))


async def setup_topic(bootstrap: str, partitions: int, records: int = 0) -> str:
    topic = unique("gc")
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    if records:
        await produce(bootstrap, topic, [(i % partitions, f"v{i}") for i in range(records)])
    return topic


async def produce(bootstrap: str, topic: str, items: list[tuple[int, str]], ts: int | None = None):
    async with Producer(bootstrap) as producer:
        for partition, value in items:
            await producer.send(topic, value.encode(), partition=partition, timestamp_ms=ts)
        await producer.flush()


async def poll_until(
    consumers: list[GroupConsumer],
    done: Callable[[], bool],
    seconds: float = 30,
    got: list[Any] | None = None,
) -> list[Any]:
    """Poll every consumer concurrently until ``done()``; return the records polled
    (appended to ``got`` if given)."""
    got = [] if got is None else got
    deadline = time.monotonic() + seconds

    async def loop(consumer: GroupConsumer) -> None:
        while not done() and time.monotonic() < deadline:
            got.extend(await consumer.poll(200))

    await asyncio.gather(*(loop(c) for c in consumers))
    assert done(), "condition not reached in time"
    return got


def parts(topic: str, *numbers: int) -> set[TP]:
    return {(topic, n) for n in numbers}


async def test_range_members_split_and_close_hands_everything_over(
    any_broker: PeerBroker,
) -> None:
    bootstrap = any_broker.bootstrap
    topic, group = await setup_topic(bootstrap, 4, records=40), unique("g")
    first, second = Recorder(), Recorder()
    async with GroupConsumer(bootstrap, group_id=group, **FAST) as c1:
        c1.subscribe([topic], listener=first)
        assert c1.subscription() == {topic}
        got = await poll_until([c1], lambda: c1.assignment() == parts(topic, 0, 1, 2, 3))
        c2 = GroupConsumer(bootstrap, group_id=group, **FAST)
        await c2.start()
        c2.subscribe([topic], listener=second)
        await poll_until(
            [c1, c2],
            lambda: len(c1.assignment()) == 2 and len(c2.assignment()) == 2 and len(got) >= 40,
            got=got,
        )
        # Range with two members: partitions 0-1 for the first member id, 2-3 for the other.
        assert {frozenset(c1.assignment()), frozenset(c2.assignment())} == {
            frozenset(parts(topic, 0, 1)),
            frozenset(parts(topic, 2, 3)),
        }
        # Eager: the first member gave everything up before the new assignment.
        assert ("revoked", parts(topic, 0, 1, 2, 3)) in first.events
        assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(40))
        started, owned = time.monotonic(), c2.assignment()
        await c2.close()  # commits, revokes, leaves: no session timeout to wait for
        assert second.events[-1] == ("revoked", owned)
        await poll_until([c1], lambda: len(c1.assignment()) == 4, seconds=15)
        assert time.monotonic() - started < 10
    async with GroupAdmin(bootstrap) as admin:
        assert not (await admin.describe_group(group)).members
        committed = await admin.fetch_offsets(group)
    assert sum(entry.offset for entry in committed.values()) == 40


async def test_cooperative_sticky_revokes_only_what_moves(any_broker: PeerBroker) -> None:
    bootstrap = any_broker.bootstrap
    topic, group = await setup_topic(bootstrap, 4, records=20), unique("g")
    options = {**FAST, "partition_assignment_strategy": ["cooperative-sticky"]}
    first, second = Recorder(), Recorder()
    async with (
        GroupConsumer(bootstrap, group_id=group, **options) as c1,
        GroupConsumer(bootstrap, group_id=group, **options) as c2,
    ):
        c1.subscribe([topic], listener=first)
        got = await poll_until([c1], lambda: len(c1.assignment()) == 4)
        c2.subscribe([topic], listener=second)
        got += await poll_until(
            [c1, c2], lambda: len(c1.assignment()) == 2 and len(c2.assignment()) == 2
        )
        await poll_until([c1, c2], lambda: len(got) >= 20, got=got)
        revoked = [p for kind, p in first.events if kind == "revoked"]
        # Only the two partitions that moved were revoked; the kept two never stopped.
        assert revoked == [parts(topic, 0, 1, 2, 3) - c1.assignment()]
        assert next(p for kind, p in first.events if kind == "assigned") == parts(topic, 0, 1, 2, 3)
        assert set().union(*(p for kind, p in second.events if kind == "assigned")) == (
            c2.assignment()
        )
        assert not [e for e in second.events if e[0] != "assigned"]
        # Auto commit before the rebalance: nothing was read twice.
        assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(20))


async def test_pattern_subscription_picks_up_a_topic_created_later(
    any_broker: PeerBroker,
) -> None:
    bootstrap = any_broker.bootstrap
    prefix = unique("pat")
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(f"{prefix}-a", 1, 1), NewTopic(f"{prefix}-x.b", 1, 1)])
    await produce(bootstrap, f"{prefix}-a", [(0, "a")])
    async with GroupConsumer(
        bootstrap, group_id=unique("g"), metadata_max_age_ms=300, **FAST
    ) as consumer:
        consumer.subscribe(pattern=rf"{prefix}-\w+")  # matched whole: not "-x.b"
        got = await poll_until([consumer], lambda: consumer.subscription() == {f"{prefix}-a"})
        async with Admin(bootstrap) as admin:
            await admin.create_topics([NewTopic(f"{prefix}-later", 2, 1)])
        await produce(bootstrap, f"{prefix}-later", [(1, "later")])
        seen: list[Any] = []

        async def until_later() -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and b"later" not in [r.value for r in seen]:
                seen.extend(await consumer.poll(200))

        await until_later()
        assert consumer.subscription() == {f"{prefix}-a", f"{prefix}-later"}
        assert {r.value for r in got + seen} == {b"a", b"later"}


async def test_static_member_keeps_its_place_and_assignment(any_broker: PeerBroker) -> None:
    bootstrap = any_broker.bootstrap
    topic, group = await setup_topic(bootstrap, 4), unique("g")
    b = GroupConsumer(bootstrap, group_id=group, group_instance_id="b", **FAST)
    await b.start()
    b_events = Recorder()
    b.subscribe([topic], listener=b_events)
    try:
        a = GroupConsumer(bootstrap, group_id=group, group_instance_id="a", **FAST)
        await a.start()
        a.subscribe([topic])
        await poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        # Range orders static members by instance id: "a" before "b".
        assert a.assignment() == parts(topic, 0, 1)
        await a.close()
        async with GroupAdmin(bootstrap) as admin:
            members = (await admin.describe_group(group)).members
        assert len(members) == 2  # a static member sends no LeaveGroup on close
        events_before = len(b_events.events)
        again = GroupConsumer(bootstrap, group_id=group, group_instance_id="a", **FAST)
        await again.start()
        try:
            again.subscribe([topic])
            await poll_until([again, b], lambda: len(again.assignment()) == 2)
            assert again.assignment() == parts(topic, 0, 1)
            assert b.assignment() == parts(topic, 2, 3)
            assert not [e for e in b_events.events[events_before:] if e[0] == "lost"]
        finally:
            await again.close()
    finally:
        await b.close()


async def test_commits_auto_manual_async_and_with_metadata(any_broker: PeerBroker) -> None:
    bootstrap = any_broker.bootstrap
    topic, group = await setup_topic(bootstrap, 2, records=20), unique("g")
    async with GroupConsumer(
        bootstrap, group_id=group, auto_commit_interval_ms=200, **FAST
    ) as consumer:
        consumer.subscribe([topic])
        got: list[Any] = []
        await poll_until([consumer], lambda: len(got) >= 20, got=got)
        assert len(got) == 20
        # The next polls (past auto_commit_interval_ms) commit what was returned.
        await asyncio.sleep(0.3)
        await consumer.poll(100)
        done = await consumer.committed([(topic, 0), (topic, 1)])
        assert {tp: e.offset for tp, e in done.items() if e} == {(topic, 0): 10, (topic, 1): 10}
        await consumer.commit({(topic, 0): OffsetAndMetadata(4, "checkpoint-7")})
        answer = (await consumer.committed([(topic, 0)]))[(topic, 0)]
        # Tansu 0.6 drops commit metadata (librdkafka's too): it answers an empty string.
        metadata = "" if any_broker.kind == "tansu" else "checkpoint-7"
        assert answer is not None and (answer.offset, answer.metadata) == (4, metadata)
        results: list[Any] = []
        await consumer.commit_async({(topic, 1): 6}, lambda offsets, error: results.append(error))
        assert results == [None]
        assert (await consumer.committed([(topic, 1)]))[(topic, 1)].offset == 6  # type: ignore[union-attr]
    # close() auto-commits the positions (10 and 10), overriding the manual commits.
    async with GroupAdmin(bootstrap) as admin:
        offsets = await admin.fetch_offsets(group)
    assert {tp: e.offset for tp, e in offsets.items()} == {(topic, 0): 10, (topic, 1): 10}


async def test_seek_pause_resume_position_and_offsets_for_times(
    any_broker: PeerBroker,
) -> None:
    bootstrap = any_broker.bootstrap
    topic = await setup_topic(bootstrap, 2)
    await produce(bootstrap, topic, [(0, f"old{i}") for i in range(5)], ts=1_000_000)
    await produce(bootstrap, topic, [(0, f"new{i}") for i in range(5)], ts=2_000_000)
    await produce(bootstrap, topic, [(1, "p1")], ts=2_000_000)
    async with GroupConsumer(
        bootstrap, group_id=unique("g"), enable_auto_commit=False, **FAST
    ) as consumer:
        consumer.subscribe([topic])
        got: list[Any] = []
        await poll_until([consumer], lambda: len(got) >= 11, got=got)
        assert consumer.position(topic, 0) == 10
        times = await consumer.offsets_for_times({(topic, 0): 1_500_000, (topic, 1): 3_000_000})
        if any_broker.kind == "tansu":
            # Tansu 0.6 answers every timestamp lookup with the log start (librdkafka's too).
            assert times[(topic, 0)][0] == 0
        else:
            assert times[(topic, 0)] == (5, 2_000_000) and times[(topic, 1)] is None
        consumer.seek(topic, 0, 7)
        again = await consumer.poll(2000)
        assert [r.value for r in again] == [b"new2", b"new3", b"new4"]
        consumer.pause((topic, 0))
        await consumer.seek_to_beginning((topic, 0))
        assert consumer.position(topic, 0) == 0
        assert await consumer.poll(300) == [] and consumer.paused() == {(topic, 0)}
        consumer.resume((topic, 0))
        resumed = await consumer.poll(2000)
        assert resumed and resumed[0].offset == 0
        await consumer.seek_to_end()
        # Tansu 0.6 answers ListOffsets(latest) with the last batch's base offset + 1.
        end = 6 if any_broker.kind == "tansu" else 10
        assert consumer.position(topic, 0) == end and consumer.position(topic, 1) == 1
        # Nothing committed (auto commit off): the group has no offsets.
        assert await consumer.committed([(topic, 0)]) == {(topic, 0): None}


async def test_auto_offset_reset_none_and_latest(
    any_broker: PeerBroker, request: pytest.FixtureRequest
) -> None:
    any_broker.expect_failure(
        request,
        "tansu",
        "0.6 answers ListOffsets(latest) with the last batch's base offset + 1 (1 for one "
        "batch of 3 records; librdkafka's watermarks say the same), so 'latest' re-reads",
    )
    bootstrap = any_broker.bootstrap
    topic = await setup_topic(bootstrap, 1, records=3)
    options = {**FAST, "auto_offset_reset": "none"}
    async with GroupConsumer(bootstrap, group_id=unique("g"), **options) as consumer:
        consumer.subscribe([topic])
        with pytest.raises(NoOffsetForPartitionError) as info:
            await poll_until([consumer], lambda: False, seconds=10)
        assert info.value.partitions == [(topic, 0)]
    options = {**FAST, "auto_offset_reset": "latest"}
    async with GroupConsumer(bootstrap, group_id=unique("g"), **options) as consumer:
        consumer.subscribe([topic])
        await poll_until([consumer], lambda: bool(consumer.assignment()))
        assert await consumer.poll(500) == []
        assert consumer.position(topic, 0) == 3


async def test_max_poll_interval_expiry_hands_partitions_over(
    any_broker: PeerBroker,
) -> None:
    bootstrap = any_broker.bootstrap
    topic, group = await setup_topic(bootstrap, 2), unique("g")
    slow_events = Recorder()
    async with (
        GroupConsumer(bootstrap, group_id=group, max_poll_interval_ms=1500, **FAST) as slow,
        GroupConsumer(bootstrap, group_id=group, **FAST) as busy,
    ):
        slow.subscribe([topic], listener=slow_events)
        busy.subscribe([topic])
        await poll_until(
            [slow, busy], lambda: len(slow.assignment()) == 1 and len(busy.assignment()) == 1
        )
        owned = slow.assignment()
        # slow stops polling: after max.poll.interval.ms it leaves and busy gets everything.
        await poll_until([busy], lambda: len(busy.assignment()) == 2, seconds=20)
        # slow is back: what it owned is reported lost, then it rejoins.
        await poll_until(
            [slow, busy],
            lambda: ("lost", owned) in slow_events.events and len(slow.assignment()) == 1,
        )


async def test_close_after_an_abandoned_join_does_not_wait_for_the_rebalance(
    any_broker: PeerBroker,
) -> None:
    """A poll cancelled while the coordinator holds its JoinGroup (the other member is not
    polling) leaves that request pending on the connection; close()'s LeaveGroup must not
    queue behind it for the whole rebalance timeout."""
    bootstrap = any_broker.bootstrap
    topic, group = await setup_topic(bootstrap, 2), unique("g")
    async with GroupConsumer(bootstrap, group_id=group, **FAST) as idle:
        idle.subscribe([topic])
        await poll_until([idle], lambda: len(idle.assignment()) == 2)
        joiner = GroupConsumer(bootstrap, group_id=group, **FAST)
        await joiner.start()
        joiner.subscribe([topic])
        polling = asyncio.create_task(joiner.poll(30000))
        await asyncio.sleep(1.5)  # its JoinGroup now waits for `idle`, which does not poll
        assert not polling.done()
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        started = time.monotonic()
        await asyncio.wait_for(joiner.close(), 20)
        assert time.monotonic() - started < 10


async def test_close_ends_heartbeats_even_if_their_cancellation_is_lost(
    any_broker: PeerBroker,
) -> None:
    """On Python 3.11 asyncio.wait_for drops a cancellation that meets the response in one
    loop iteration. A heartbeat loop that survived close()'s cancel kept close() waiting
    forever (found with 10 members on 100 partitions: the group then stalled for the
    rebalance timeout). Here the heartbeat swallows the cancel on purpose."""
    bootstrap = any_broker.bootstrap
    topic, group = await setup_topic(bootstrap, 2), unique("g")
    consumer = GroupConsumer(bootstrap, group_id=group, **FAST)
    await consumer.start()
    try:
        consumer.subscribe([topic])
        await poll_until([consumer], lambda: len(consumer.assignment()) == 2)
        coordinator = consumer._coordinator
        assert coordinator is not None
        real_heartbeat = coordinator.heartbeat
        in_heartbeat = asyncio.Event()

        async def swallowing_heartbeat() -> int:
            in_heartbeat.set()
            try:
                await asyncio.sleep(2)
            except asyncio.CancelledError:
                pass  # what wait_for did when the answer came with the cancellation
            return await real_heartbeat()

        coordinator.heartbeat = swallowing_heartbeat  # type: ignore[method-assign]
        await asyncio.wait_for(in_heartbeat.wait(), 10)
        await asyncio.wait_for(consumer.close(), 15)
    finally:
        with contextlib.suppress(TimeoutError):  # if the test failed: don't hang here too
            await asyncio.wait_for(consumer.close(), 5)
