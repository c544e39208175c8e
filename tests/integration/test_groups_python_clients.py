"""kafka-python 3.x and aiokafka 0.14 consumer groups against a real odradek broker.

* Queue: consumers of one group split the partitions; each record reaches exactly one of
  them (records are produced once the group is stable, so no rebalance can replay any).
* Publish/subscribe: two groups on one topic each receive every record.
* Subscriptions by list and by regex; a topic created later that matches the regex is
  picked up once the client's metadata ages out (``metadata_max_age_ms`` set low).
* One group mixing all three clients (kafka-python, aiokafka, librdkafka) with the range
  assignor: their different subscription versions meet in one leader's assignment.
* GroupAdmin's decoder of member assignments (DescribeGroups) reads what aiokafka's own
  ``ConsumerProtocolMemberAssignment`` encodes, and rejects every truncation of it.

kafka-python consumers run in threads (each one's poll() drives its own joins); aiokafka
consumers share one event loop per test. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client.group_admin import SyncGroupAdmin, decode_consumer_assignment
from tests.helpers.broker import BrokerProcess

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas with importlib APIs Python deprecates.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.coordinator.assignors.range import RangePartitionAssignor

pytestmark = pytest.mark.timeout(120)

WAIT_S = 30.0
Record = tuple[str, int, int]  # (topic, partition, offset)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": bootstrap})


@pytest.fixture(scope="module")
def group_admin(bootstrap: str) -> Iterator[SyncGroupAdmin]:
    admin = SyncGroupAdmin(bootstrap)
    try:
        yield admin
    finally:
        admin.close()


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=WAIT_S)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not true after {timeout}s")


def stable_with(group_admin: SyncGroupAdmin, group: str, members: int) -> Callable[[], bool]:
    """The coordinator's view: Stable, with ``members`` members."""

    def check() -> bool:
        described = group_admin.describe_group(group)
        return described.state == "Stable" and len(described.members) == members

    return check


def kp_produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> set[Record]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for partition in range(partitions):
            for i in range(per_partition):
                producer.send(topic, f"{i}".encode(), partition=partition)
        producer.flush(timeout=WAIT_S)
    finally:
        producer.close(timeout=WAIT_S)
    return {(topic, p, o) for p in range(partitions) for o in range(per_partition)}


# -- kafka-python ------------------------------------------------------------------------------


class KafkaPythonMember:
    """A kafka-python group consumer polled by its own thread."""

    def __init__(self, bootstrap: str, group: str, **subscription: Any) -> None:
        self.records: list[Record] = []
        self.assigned: set[tuple[str, int]] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._config = {
            "bootstrap_servers": bootstrap,
            "group_id": group,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
            "metadata_max_age_ms": 500,
            "fetch_max_wait_ms": 100,
            "request_timeout_ms": 10_000,
            "partition_assignment_strategy": [RangePartitionAssignor],
        }
        self._subscription = subscription
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            consumer = KafkaConsumer(**self._config)
            try:
                # kafka-python 3.0.12 re-enables its heartbeat only when a poll() sees its
                # JoinGroup finish; a join that outlasts the poll timeout completes in the
                # background and the member then never heartbeats again (it is expired
                # after session.timeout.ms, against any Kafka broker). Joins wait for the
                # other members (up to a heartbeat interval), so poll well beyond that, and
                # learn the topics first so stale metadata does not force a second join.
                for topic in self._subscription.get("topics", ()):
                    consumer.partitions_for_topic(topic)
                consumer.subscribe(**self._subscription)
                deadline = time.monotonic() + 100  # far beyond any test's bound
                while not self._stop.is_set() and time.monotonic() < deadline:
                    batches = consumer.poll(timeout_ms=1500)
                    with self._lock:
                        self.assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
                        for tp, records in batches.items():
                            self.records.extend((tp.topic, tp.partition, r.offset) for r in records)
            finally:
                consumer.close()
        except BaseException as exc:  # surfaced by the test through .check()
            self.error = exc

    def snapshot(self) -> tuple[set[tuple[str, int]], list[Record]]:
        with self._lock:
            return set(self.assigned), list(self.records)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"kafka-python consumer failed: {self.error!r}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "kafka-python consumer did not stop"


def test_kafka_python_group_shares_partitions(
    bootstrap: str, admin: AdminClient, group_admin: SyncGroupAdmin
) -> None:
    topic, group = unique("kp-queue"), unique("g-kp-queue")
    create_topic(admin, topic, 4)
    members = [KafkaPythonMember(bootstrap, group, topics=[topic]) for _ in range(2)]
    try:
        wait_until(
            lambda: (
                all(len(m.snapshot()[0]) == 2 for m in members)
                and stable_with(group_admin, group, 2)()
            ),
            "two kafka-python members with two partitions each",
        )
        produced = kp_produce(bootstrap, topic, 4, 50)

        def everything_consumed() -> bool:
            for member in members:
                member.check()
            return {r for m in members for r in m.snapshot()[1]} >= produced

        wait_until(everything_consumed, "every record consumed")
        shares = [m.snapshot() for m in members]
        all_records = [r for _, records in shares for r in records]
        assert len(all_records) == len(set(all_records)) == len(produced)  # each exactly once
        for assigned, records in shares:
            assert records and {(t, p) for t, p, _ in records} <= assigned
        assert shares[0][0].isdisjoint(shares[1][0])
    finally:
        for member in members:
            member.stop()


def test_kafka_python_regex_subscription_picks_up_new_topic(
    bootstrap: str, admin: AdminClient
) -> None:
    prefix = unique("kp-regex")
    first, later = f"{prefix}-a", f"{prefix}-b"
    create_topic(admin, first, 2)
    create_topic(admin, unique("kp-other"), 1)  # does not match: never consumed
    member = KafkaPythonMember(bootstrap, unique("g-kp-regex"), pattern=f"^{prefix}-.*")
    try:
        wait_until(lambda: member.snapshot()[0] == {(first, 0), (first, 1)}, "first topic assigned")
        expected = kp_produce(bootstrap, first, 2, 10)
        create_topic(admin, later, 3)
        expected |= kp_produce(bootstrap, later, 3, 10)

        def caught_up() -> bool:
            member.check()
            return set(member.snapshot()[1]) >= expected

        # metadata_max_age_ms=500: the new topic is seen and assigned within a few seconds.
        wait_until(caught_up, "records of the topic created later", timeout=20)
        assigned, records = member.snapshot()
        assert {(later, p) for p in range(3)} <= assigned
        assert set(records) == expected
    finally:
        member.stop()


# -- aiokafka ----------------------------------------------------------------------------------


async def _aio_produce(bootstrap: str, topic: str, partitions: int, count: int) -> set[Record]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for partition in range(partitions):
            for i in range(count):
                await producer.send(topic, f"{i}".encode(), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()
    return {(topic, p, o) for p in range(partitions) for o in range(count)}


class AioMember:
    """An aiokafka group consumer with a task that keeps fetching."""

    def __init__(self, bootstrap: str, group: str, **extra: Any) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            metadata_max_age_ms=500,
            fetch_max_wait_ms=100,
            **extra,
        )
        self.records: list[Record] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self, *topics: str, pattern: str | None = None) -> AioMember:
        await self.consumer.start()
        if pattern is not None:
            self.consumer.subscribe(pattern=pattern)
        else:
            self.consumer.subscribe(list(topics))
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=100)
            for tp, records in batches.items():
                self.records.extend((tp.topic, tp.partition, r.offset) for r in records)

    def assigned(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            if self._task.done() and not self._task.cancelled() and self._task.exception():
                raise AssertionError(f"aiokafka member failed: {self._task.exception()!r}")
        await self.consumer.stop()


async def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not true after {timeout}s")


def test_aiokafka_publish_subscribe_and_queue(bootstrap: str, admin: AdminClient) -> None:
    topic = unique("aio-pubsub")
    create_topic(admin, topic, 4)
    queue_group, other_group = unique("g-aio-queue"), unique("g-aio-other")

    async def scenario() -> None:
        queue = [await AioMember(bootstrap, queue_group).start(topic) for _ in range(2)]
        other = [await AioMember(bootstrap, other_group).start(topic)]
        try:
            await wait_for(
                lambda: (
                    [len(m.assigned()) for m in queue] == [2, 2] and len(other[0].assigned()) == 4
                ),
                "both groups stable",
            )
            produced = await _aio_produce(bootstrap, topic, 4, 50)
            await wait_for(
                lambda: (
                    {r for m in queue for r in m.records} >= produced
                    and set(other[0].records) >= produced
                ),
                "every record in both groups",
            )
            # Publish/subscribe: the other group got everything, once.
            assert sorted(other[0].records) == sorted(produced)
            # Queue: the two members of one group split the records, each exactly once.
            shared = queue[0].records + queue[1].records
            assert sorted(shared) == sorted(produced)
            assert queue[0].records and queue[1].records
            assert queue[0].assigned().isdisjoint(queue[1].assigned())
        finally:
            for member in queue + other:
                await member.stop()

    asyncio.run(scenario())


def test_aiokafka_regex_subscription_picks_up_new_topic(bootstrap: str, admin: AdminClient) -> None:
    prefix = unique("aio-regex")
    first, later = f"{prefix}-a", f"{prefix}-b"
    create_topic(admin, first, 2)
    create_topic(admin, unique("aio-other"), 1)

    async def scenario() -> None:
        member = await AioMember(bootstrap, unique("g-aio-regex")).start(pattern=f"^{prefix}-.*")
        try:
            await wait_for(lambda: member.assigned() == {(first, 0), (first, 1)}, "first topic")
            expected = await _aio_produce(bootstrap, first, 2, 10)
            create_topic(admin, later, 2)
            expected |= await _aio_produce(bootstrap, later, 2, 10)
            await wait_for(lambda: set(member.records) >= expected, "topic created later", 20)
            assert member.assigned() == {(t, p) for t in (first, later) for p in range(2)}
            assert sorted(member.records) == sorted(expected)
        finally:
            await member.stop()

    asyncio.run(scenario())


# -- all three clients in one group ------------------------------------------------------------


def test_one_group_of_three_different_clients(
    bootstrap: str, admin: AdminClient, group_admin: SyncGroupAdmin
) -> None:
    topic, group = unique("mixed"), unique("g-mixed")
    create_topic(admin, topic, 6)
    kp = KafkaPythonMember(bootstrap, group, topics=[topic])
    librdkafka = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "partition.assignment.strategy": "range",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    librdkafka.subscribe([topic])
    confluent_records: list[Record] = []

    async def scenario() -> None:
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor as AioRange

        aio = await AioMember(bootstrap, group, partition_assignment_strategy=(AioRange,)).start(
            topic
        )
        try:

            async def pump_confluent() -> None:
                message = librdkafka.poll(0.02)
                if message is not None and message.error() is None:
                    confluent_records.append((topic, message.partition(), message.offset()))

            async def until(condition: Callable[[], bool], what: str) -> None:
                deadline = time.monotonic() + WAIT_S
                while time.monotonic() < deadline:
                    await pump_confluent()
                    kp.check()
                    if condition():
                        return
                    await asyncio.sleep(0.02)
                raise AssertionError(f"{what}: not true after {WAIT_S}s")

            def split() -> bool:
                owned = [
                    kp.snapshot()[0],
                    aio.assigned(),
                    {(topic, p.partition) for p in librdkafka.assignment()},
                ]
                return [len(o) for o in owned] == [2, 2, 2] and len(set().union(*owned)) == 6

            await until(lambda: split() and stable_with(group_admin, group, 3)(), "3-client split")
            described = group_admin.describe_group(group)
            assert described.protocol == "range"
            assert sorted(len(m.partitions) for m in described.members) == [2, 2, 2]
            produced = await _aio_produce(bootstrap, topic, 6, 20)

            def all_in() -> bool:
                return {*kp.snapshot()[1], *aio.records, *confluent_records} >= produced

            await until(all_in, "every record consumed by one of the three")
            shares = [kp.snapshot()[1], aio.records, confluent_records]
            assert all(shares)
            assert sorted(r for share in shares for r in share) == sorted(produced)
        finally:
            await aio.stop()

    try:
        asyncio.run(scenario())
    finally:
        kp.stop()
        librdkafka.close()


# -- the assignment bytes GroupAdmin decodes ---------------------------------------------------

_topics = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)


@settings(max_examples=100, deadline=None)
@given(
    version=st.integers(0, 3),
    assignment=st.dictionaries(
        _topics, st.lists(st.integers(0, 2**31 - 1), max_size=8, unique=True), max_size=5
    ),
    user_data=st.one_of(st.none(), st.binary(max_size=16)),
)
def test_assignment_decoder_reads_aiokafka_encoding(
    version: int, assignment: dict[str, list[int]], user_data: bytes | None
) -> None:
    encoded = ConsumerProtocolMemberAssignment(
        version, [(t, p) for t, p in assignment.items()], user_data
    ).encode()
    decoded = decode_consumer_assignment(encoded)
    assert decoded.version == version
    assert decoded.partitions == tuple((t, p) for t, parts in assignment.items() for p in parts)
    # Everything shorter than the topic list is refused with ValueError, never a crash.
    user_data_length = 4 + len(user_data or b"")
    for cut in range(1, len(encoded) - user_data_length):
        with pytest.raises(ValueError):
            decode_consumer_assignment(encoded[:cut])
