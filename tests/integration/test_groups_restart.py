"""Committed offsets survive broker restarts, and commits behave as librdkafka documents.

* A group commits (synchronously) part of what it consumed, then the broker is restarted —
  cleanly (SIGTERM) or by a crash (SIGKILL). The committed offsets read back the same
  (OffsetFetch through odradek's GroupAdmin), and a new consumer of the group resumes exactly
  at them: every record is consumed, and the only records consumed twice are those of the
  uncommitted window (consumed after the last commit).
* A consumer that stays alive while the broker crashes and restarts keeps working: it finds
  the reloaded coordinator, keeps or regains its partitions, commits again, and reads the
  rest with nothing lost.
* Deleting a group or some of its offsets survives restarts too (tombstones in the log).
* ``commit(message)`` commits the message's offset + 1; ``commit(offsets=...,
  asynchronous=True)`` reports through ``on_commit``; auto commit
  (``auto.commit.interval.ms``) commits the consumed positions without being asked and once
  more on close; with ``enable.auto.offset.store=false`` it commits only what was stored
  with ``store_offsets``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.group_admin import SyncGroupAdmin
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(180)

WAIT_S = 30.0
PARTITIONS = 3
PER_PARTITION = 100


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        yield proc
    finally:
        if proc.is_running():
            proc.stop()


def restart(broker: BrokerProcess, how: str) -> None:
    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()
    broker.start()


def fill_topic(bootstrap: str, topic: str) -> None:
    """PER_PARTITION records in each partition; the value names partition and offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its future
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=WAIT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(PARTITIONS):
        for offset in range(PER_PARTITION):
            producer.produce(topic, f"{partition}:{offset}".encode(), partition=partition)
    assert producer.flush(WAIT_S) == 0


def group_consumer(bootstrap: str, group: str, topic: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }
    conf.update(extra)
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    return consumer


Consumed = tuple[int, int]  # (partition, offset)


def consume(
    consumer: Consumer,
    count: int,
    *,
    on_message: Callable[[Message], None] | None = None,
    timeout: float = WAIT_S,
) -> list[Consumed]:
    """The next ``count`` records (fewer only if the timeout passes)."""
    got: list[Consumed] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().fatal():
                raise KafkaException(message.error())
            continue  # e.g. transport errors while the broker restarts
        assert message.value() == f"{message.partition()}:{message.offset()}".encode()
        got.append((message.partition(), message.offset()))
        if on_message is not None:
            on_message(message)
    return got


def positions(consumed: list[Consumed]) -> dict[int, int]:
    """Next offset to read per partition after ``consumed``."""
    result: dict[int, int] = {}
    for partition, offset in consumed:
        result[partition] = max(result.get(partition, 0), offset + 1)
    return result


def committed_via_admin(admin: SyncGroupAdmin, group: str, topic: str) -> dict[int, int]:
    return {p: o.offset for (t, p), o in admin.fetch_offsets(group).items() if t == topic}


def wait_committed(
    admin: SyncGroupAdmin, group: str, topic: str, expected: dict[int, int], pump: Consumer | None
) -> None:
    """Poll (pumping ``pump`` so its auto commit runs) until the group's offsets match."""
    deadline = time.monotonic() + WAIT_S
    seen: dict[int, int] = {}
    while time.monotonic() < deadline:
        seen = committed_via_admin(admin, group, topic)
        if seen == expected:
            return
        if pump is not None:
            pump.poll(0.1)
        else:
            time.sleep(0.1)
    raise AssertionError(f"committed {seen}, expected {expected}")


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_committed_offsets_survive_restart(restartable: BrokerProcess, how: str) -> None:
    broker = restartable
    topic, group = unique("resume"), unique("g-resume")
    fill_topic(broker.bootstrap, topic)

    first = group_consumer(broker.bootstrap, group, topic)
    try:
        before_commit = consume(first, 120)
        assert len(before_commit) == 120
        answer = first.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in answer if tp.offset >= 0}
        assert committed == positions(before_commit)
        window = consume(first, 30)  # consumed but never committed
        assert len(window) == 30
    finally:
        first.close()  # auto commit is off: closing commits nothing

    with SyncGroupAdmin(broker.bootstrap) as admin:
        assert committed_via_admin(admin, group, topic) == committed
    restart(broker, how)
    with SyncGroupAdmin(broker.bootstrap) as admin:
        assert committed_via_admin(admin, group, topic) == committed

    resumed: list[Consumed] = []
    second = group_consumer(broker.bootstrap, group, topic)
    try:
        total = PARTITIONS * PER_PARTITION
        resumed = consume(second, total - sum(committed.values()))
        # It resumed exactly at the committed offsets (0 where nothing was committed).
        for partition in range(PARTITIONS):
            offsets = [o for p, o in resumed if p == partition]
            assert offsets == list(range(committed.get(partition, 0), PER_PARTITION))
        second.commit(asynchronous=False)
    finally:
        second.close()

    everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    seen = before_commit + window + resumed
    assert set(seen) == everything  # nothing lost
    duplicates = {r for r in seen if seen.count(r) > 1}
    assert duplicates == set(window)  # re-read: exactly the uncommitted window

    # The final commit survives the same kind of restart too.
    restart(broker, how)
    with SyncGroupAdmin(broker.bootstrap) as admin:
        assert committed_via_admin(admin, group, topic) == dict.fromkeys(
            range(PARTITIONS), PER_PARTITION
        )


def test_consumer_lives_through_a_broker_crash(restartable: BrokerProcess) -> None:
    broker = restartable
    topic, group = unique("alive"), unique("g-alive")
    fill_topic(broker.bootstrap, topic)
    consumer = group_consumer(broker.bootstrap, group, topic)
    try:
        seen = consume(consumer, 90)
        answer = consumer.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in answer if tp.offset >= 0}
        assert committed == positions(seen)
        broker.kill()
        time.sleep(0.5)  # the consumer notices the broker is gone
        broker.start()
        total = PARTITIONS * PER_PARTITION
        deadline = time.monotonic() + WAIT_S
        while len(set(seen)) < total and time.monotonic() < deadline:
            seen += consume(consumer, total - len(set(seen)), timeout=1.0)
        assert set(seen) == {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
        # Whatever it re-read (if the restart cost it its assignment) is at or after what
        # it had committed: nothing before the commit came back.
        after = seen[90:]
        for partition, offset in set(after) & set(seen[:90]):
            assert offset >= committed[partition]
        # Its commits work against the restarted coordinator.
        final = None
        deadline = time.monotonic() + WAIT_S
        while final is None and time.monotonic() < deadline:
            try:
                final = consumer.commit(asynchronous=False)
            except KafkaException:
                consumer.poll(0.2)  # e.g. REBALANCE_IN_PROGRESS right after the restart
        assert final is not None, "no commit succeeded after the restart"
        assert {tp.partition: tp.offset for tp in final} == dict.fromkeys(
            range(PARTITIONS), PER_PARTITION
        )
    finally:
        consumer.close()


def test_commit_message_and_async_commit(restartable: BrokerProcess) -> None:
    broker = restartable
    topic, group = unique("manual"), unique("g-manual")
    fill_topic(broker.bootstrap, topic)
    results: list[tuple[object, list[TopicPartition]]] = []
    consumer = group_consumer(
        broker.bootstrap,
        group,
        topic,
        on_commit=lambda err, parts: results.append((err, parts)),
    )
    admin = SyncGroupAdmin(broker.bootstrap)
    try:
        last: list[Message] = []
        consume(consumer, 10, on_message=last.append)
        # commit(message): the offset of the *next* record to read, as documented.
        message = last[-1]
        consumer.commit(message=message, asynchronous=False)
        assert committed_via_admin(admin, group, topic)[message.partition()] == (
            message.offset() + 1
        )

        # Asynchronous commit of explicit offsets: reported through on_commit.
        results.clear()
        wanted = [TopicPartition(topic, p, 7 + p) for p in range(PARTITIONS)]
        assert consumer.commit(offsets=wanted, asynchronous=True) is None
        deadline = time.monotonic() + WAIT_S
        while not results and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert results, "on_commit was never called"
        error, parts = results[-1]
        assert error is None
        assert {(tp.partition, tp.offset) for tp in parts} == {(p, 7 + p) for p in range(3)}
        assert committed_via_admin(admin, group, topic) == {p: 7 + p for p in range(3)}
    finally:
        consumer.close()
        admin.close()


def test_auto_commit(restartable: BrokerProcess) -> None:
    broker = restartable
    topic, group = unique("auto"), unique("g-auto")
    fill_topic(broker.bootstrap, topic)
    admin = SyncGroupAdmin(broker.bootstrap)
    try:
        consumer = group_consumer(
            broker.bootstrap,
            group,
            topic,
            **{"enable.auto.commit": True, "auto.commit.interval.ms": 200},
        )
        try:
            first = consume(consumer, 60)
            # Nobody calls commit(): the interval commits the consumed positions. Paused, the
            # consumer keeps running its timers in poll() without reading further.
            consumer.pause(consumer.assignment())
            wait_committed(admin, group, topic, positions(first), consumer)
            consumer.resume(consumer.assignment())
            more = consume(consumer, 15)
        finally:
            consumer.close()  # auto commit commits once more on close
        consumed = first + more
        wait_committed(admin, group, topic, positions(consumed), None)

        broker.kill()
        broker.start()
        resumed_consumer = group_consumer(broker.bootstrap, group, topic)
        try:
            rest = consume(resumed_consumer, PARTITIONS * PER_PARTITION - len(consumed))
        finally:
            resumed_consumer.close()
        everything = consumed + rest
        assert len(everything) == len(set(everything)) == PARTITIONS * PER_PARTITION

        # enable.auto.offset.store=false: only offsets stored explicitly get auto-committed.
        group2 = unique("g-store")
        consumer = group_consumer(
            broker.bootstrap,
            group2,
            topic,
            **{
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
                "enable.auto.offset.store": False,
            },
        )
        try:
            messages: list[Message] = []
            consume(consumer, 20, on_message=messages.append)
            stored = messages[4]
            consumer.store_offsets(message=stored)
            wait_committed(
                admin, group2, topic, {stored.partition(): stored.offset() + 1}, consumer
            )
        finally:
            consumer.close()
        assert committed_via_admin(admin, group2, topic) == {
            stored.partition(): stored.offset() + 1
        }
    finally:
        admin.close()


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_deletions_survive_restart(restartable: BrokerProcess, how: str) -> None:
    broker = restartable
    topic = unique("deletions")
    fill_topic(broker.bootstrap, topic)
    gone, partial, kept = unique("g-gone"), unique("g-partial"), unique("g-kept")
    with SyncGroupAdmin(broker.bootstrap) as admin:
        admin.commit_offsets(gone, {(topic, 0): 5})
        admin.commit_offsets(partial, {(topic, 0): 5, (topic, 1): 6})
        admin.commit_offsets(kept, {(topic, 2): 9})
        admin.delete_groups([gone])
        admin.delete_offsets(partial, [(topic, 0)])
    restart(broker, how)
    with SyncGroupAdmin(broker.bootstrap) as admin:
        assert {g.group_id for g in admin.list_groups()} >= {partial, kept}
        assert gone not in {g.group_id for g in admin.list_groups()}
        assert admin.describe_group(gone).state == "Dead"
        assert admin.fetch_offsets(gone) == {}
        assert committed_via_admin(admin, partial, topic) == {1: 6}
        assert committed_via_admin(admin, kept, topic) == {2: 9}
