"""Group coordinators in a ZooKeeper cluster: ``__consumer_offsets`` created through
ZooKeeper on the first FindCoordinator, every broker naming the leader of the group's
partition, and the coordinator moving when its broker shuts down. Real ZooKeeper, three
broker subprocesses, raw requests and confluent-kafka clients."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from odradek.broker.group.partitioning import partition_for
from odradek.cluster.zk.client import ZkClient
from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.raw import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(240)]

FIND_COORDINATOR, METADATA, CREATE_TOPICS, OFFSET_FETCH, HEARTBEAT = 10, 3, 19, 9, 12
OFFSETS = "__consumer_offsets"
OTHER_HOST = "127.0.0.2"  # a second listener on every broker
ATTEMPTS = 150  # x 0.2 s: elections and the topic's creation are quick, but CI is slow


@pytest.fixture
def zk(zk_connect: str) -> Iterator[ZkClient]:
    client = ZkClient.connect(zk_connect, session_timeout_ms=6000)
    try:
        yield client
    finally:
        client.close()


class Cluster:
    def __init__(self, tmp_path: Path, zk_connect: str, size: int, replication: int) -> None:
        self.brokers: dict[int, BrokerProcess] = {}
        self.internal_ports: dict[int, int] = {}
        for broker_id in range(1, size + 1):
            port, internal = free_port(), free_port()
            self.internal_ports[broker_id] = internal
            self.brokers[broker_id] = BrokerProcess(
                tmp_path / f"b{broker_id}",
                port=port,
                overrides={
                    "zookeeper.connect": zk_connect,
                    "zookeeper.session.timeout.ms": "6000",
                    "broker.id": str(broker_id),
                    "controlled.shutdown.retry.backoff.ms": "100",
                    # A controlled shutdown asking a controller that is itself stopping
                    # waits this long per attempt (Kafka's default is 30 s).
                    "controller.socket.timeout.ms": "5000",
                    "offsets.topic.replication.factor": str(replication),
                    "offsets.topic.segment.bytes": "1048576",
                    "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://{OTHER_HOST}:{internal}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                    "inter.broker.listener.name": "PLAINTEXT",
                },
                log_path=tmp_path / f"b{broker_id}.log",
            )
        for broker in self.brokers.values():
            broker.start()

    def running(self) -> dict[int, BrokerProcess]:
        return {i: b for i, b in self.brokers.items() if b.is_running()}

    def bootstrap(self, exclude: int | None = None) -> str:
        return ",".join(b.bootstrap for i, b in self.running().items() if i != exclude)

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop(timeout=60)

    def logs(self) -> str:
        return "\n".join(f"--- broker {i}\n{b.log_text()[-3000:]}" for i, b in self.brokers.items())


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    size, replication = getattr(request, "param", (3, 3))
    cluster = Cluster(tmp_path, zk_connect, size, replication)
    try:
        yield cluster
    finally:
        cluster.stop()


def find(port: int, group: str, version: int = 3, host: str = "127.0.0.1") -> Any:
    """One FindCoordinator for a group; v4+ in its batched form."""
    raw = RawClient.__new__(RawClient)
    raw.sock, raw.correlation = socket.create_connection((host, port), timeout=30), 0
    try:
        if version >= 4:
            response: Any = raw.call(
                FIND_COORDINATOR, version, {"key_type": 0, "coordinator_keys": [group]}
            )
            [answer] = response.coordinators
            assert answer.key == group
            return answer
        values: dict[str, Any] = {"key": group}
        if version >= 1:
            values["key_type"] = 0
        return raw.call(FIND_COORDINATOR, version, values)
    finally:
        raw.sock.close()


def until(check: Callable[[], Any], what: str, cluster: Cluster, attempts: int = ATTEMPTS) -> Any:
    for _ in range(attempts):
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen; logs:\n{cluster.logs()}")


def coordinator_of(cluster: Cluster, group: str, via: int) -> int:
    port = cluster.brokers[via].port

    def found() -> int | None:
        answer = find(port, group)
        return int(answer.node_id) if answer.error_code == ErrorCode.none else None

    return until(found, f"a coordinator for {group} via broker {via}", cluster)


def offsets_leader(cluster: Cluster, partition: int, via: int) -> int:
    raw = RawClient(cluster.brokers[via].port)

    def known() -> Any:
        # Broker ``via`` learns the topic from the controller's UpdateMetadata, which may
        # arrive after another broker already answered FindCoordinator: ask until it has.
        response: Any = raw.call(
            METADATA,
            9,
            {
                "topics": [{"name": OFFSETS}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        [topic] = response.topics
        return topic if topic.error_code == ErrorCode.none else None

    topic = until(known, f"{OFFSETS} in broker {via}'s metadata", cluster)
    assert topic.is_internal
    return next(int(p.leader_id) for p in topic.partitions if p.partition_index == partition)


def test_find_coordinator_creates_the_topic_and_every_broker_agrees(
    cluster: Cluster, zk: ZkClient
) -> None:
    group = "agreeing-group"
    first = find(cluster.brokers[1].port, group)
    # The first question starts the creation; there is no coordinator yet.
    assert first.error_code == ErrorCode.coordinator_not_available
    assert (first.node_id, first.host, first.port) == (-1, "", -1)
    coordinator = coordinator_of(cluster, group, via=1)
    partition = partition_for(group, 50)
    assert coordinator == offsets_leader(cluster, partition, via=2)
    # In ZooKeeper like any topic, with Kafka's settings for the offsets topic.
    found = zk.get_topic_assignment(OFFSETS)
    assert found is not None
    assignment, _version = found
    assert sorted(assignment.partitions) == list(range(50))
    assert all(sorted(r) == [1, 2, 3] for r in assignment.partitions.values())
    assert zk.get_entity_config("topics", OFFSETS) == {
        "cleanup.policy": "compact",
        "segment.bytes": "1048576",
        "compression.type": "producer",
    }
    # Every broker, every version, both listeners: the same broker, at the address of
    # the listener the question came in on.
    for broker_id, broker in cluster.brokers.items():
        for version in range(6):
            answer = until(
                lambda b=broker, v=version: (
                    (a := find(b.port, group, v)).error_code == ErrorCode.none and a
                ),
                f"FindCoordinator v{version} via broker {broker_id}",
                cluster,
            )
            assert (answer.node_id, answer.host, answer.port) == (
                coordinator,
                "127.0.0.1",
                cluster.brokers[coordinator].port,
            )
        internal = find(cluster.internal_ports[broker_id], group, 4, host=OTHER_HOST)
        assert (internal.error_code, internal.node_id, internal.host, internal.port) == (
            ErrorCode.none,
            coordinator,
            OTHER_HOST,
            cluster.internal_ports[coordinator],
        )


def test_group_requests_to_other_brokers_answer_not_coordinator(cluster: Cluster) -> None:
    group = "asked-in-the-wrong-place"
    coordinator = coordinator_of(cluster, group, via=1)
    for broker_id, broker in cluster.brokers.items():
        raw = RawClient(broker.port)
        fetched: Any = raw.call(
            OFFSET_FETCH,
            7,
            {"group_id": group, "topics": None, "require_stable": False},
        )
        heartbeat: Any = raw.call(
            HEARTBEAT,
            4,
            {
                "group_id": group,
                "generation_id": 1,
                "member_id": "m",
                "group_instance_id": None,
            },
        )
        expected = ErrorCode.none if broker_id == coordinator else ErrorCode.not_coordinator
        assert fetched.error_code == expected, broker_id
        expected = (
            ErrorCode.unknown_member_id if broker_id == coordinator else ErrorCode.not_coordinator
        )
        assert heartbeat.error_code == expected, broker_id


@pytest.mark.parametrize("cluster", [(3, 4)], indirect=True)
def test_too_few_brokers_for_the_replication_factor(cluster: Cluster, zk: ZkClient) -> None:
    # offsets.topic.replication.factor=4 with three brokers: Kafka does not create the
    # topic (it logs why) and FindCoordinator keeps answering COORDINATOR_NOT_AVAILABLE.
    for _ in range(10):
        for broker in cluster.brokers.values():
            answer = find(broker.port, "g", 4)
            assert answer.error_code == ErrorCode.coordinator_not_available
        time.sleep(0.2)
    assert zk.get_topic_assignment(OFFSETS) is None
    assert "does not meet the required replication factor '4'" in cluster.logs()


def create_topic(cluster: Cluster, name: str, replicas: list[int]) -> None:
    raw = RawClient(cluster.brokers[replicas[0]].port)
    response: Any = raw.call(
        CREATE_TOPICS,
        5,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": replicas}],
                    "configs": [],
                }
            ],
            "timeout": 15000,
            "validate_only": False,
        },
    )
    assert response.topics[0].error_code == ErrorCode.none, response


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )


def consume(c: Consumer, count: int, cluster: Cluster) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        message = c.poll(0.5)
        if message is None or message.error():
            continue
        got.append(message.value())
    assert len(got) == count, f"consumed {got}; logs:\n{cluster.logs()}"
    return got


def consume_until(c: Consumer, last: bytes, cluster: Cluster) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while last not in got and time.monotonic() < deadline:
        message = c.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value())
    assert last in got, f"consumed {got}; logs:\n{cluster.logs()}"
    return got


def commit_until_accepted(c: Consumer, topic: str, offset: int, cluster: Cluster) -> None:
    """Commit synchronously, retrying while the coordinator moves."""
    for _ in range(ATTEMPTS):
        try:
            [result] = c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
            if result.error is None:
                return
        except Exception:  # KafkaException: NOT_COORDINATOR, ILLEGAL_GENERATION, ...
            pass
        # A member unknown to a new coordinator rejoins; the consumer's rebalance is
        # served by poll() (no records are expected meanwhile).
        assert c.poll(0.2) is None
    raise AssertionError(f"commit of {offset} never accepted; logs:\n{cluster.logs()}")


def committed(c: Consumer, topic: str) -> int:
    [tp] = c.committed([TopicPartition(topic, 0)], timeout=30)
    return tp.offset


def test_consumer_group_commits_offsets_on_a_cluster(cluster: Cluster) -> None:
    group, topic = f"g-{uuid.uuid4().hex[:8]}", "commits"
    coordinator = coordinator_of(cluster, group, via=1)
    create_topic(cluster, topic, [b for b in cluster.brokers if b != coordinator][:1])
    produce(cluster.bootstrap(), topic, [b"a", b"b", b"c"])
    c = consumer(cluster.bootstrap(), group)
    try:
        c.subscribe([topic])
        assert consume(c, 3, cluster) == [b"a", b"b", b"c"]
        commit_until_accepted(c, topic, 3, cluster)
        assert committed(c, topic) == 3
    finally:
        c.close()
    # A new member of the group starts from the committed offset.
    produce(cluster.bootstrap(), topic, [b"d"])
    again = consumer(cluster.bootstrap(), group)
    try:
        again.subscribe([topic])
        assert consume(again, 1, cluster) == [b"d"]
    finally:
        again.close()


def stop_the_coordinator(cluster: Cluster, group: str) -> tuple[int, int]:
    """SIGTERM (a controlled shutdown) of the group's coordinator; returns the old and
    the new coordinator as another broker names it."""
    old = coordinator_of(cluster, group, via=1)
    assert cluster.brokers[old].stop() == 0
    survivor = next(iter(cluster.running()))
    new = until(
        lambda: (
            (a := find(cluster.brokers[survivor].port, group)).error_code == ErrorCode.none
            and int(a.node_id) != old
            and int(a.node_id)
        ),
        "the coordinator's move",
        cluster,
    )
    return old, new


def test_coordinator_moves_when_its_broker_shuts_down(cluster: Cluster) -> None:
    group, topic = f"g-{uuid.uuid4().hex[:8]}", "moving"
    old = coordinator_of(cluster, group, via=1)
    # The data lives on a broker that stays, so only the coordinator moves.
    stays = next(b for b in cluster.brokers if b != old)
    create_topic(cluster, topic, [stays])
    produce(cluster.bootstrap(), topic, [b"1", b"2"])
    c = consumer(cluster.bootstrap(), group)
    try:
        c.subscribe([topic])
        assert consume(c, 2, cluster) == [b"1", b"2"]
        commit_until_accepted(c, topic, 2, cluster)
        stopped, new = stop_the_coordinator(cluster, group)
        assert stopped == old and new != old and new in cluster.running()
        # Every surviving broker names the new coordinator.
        for broker_id in cluster.running():
            assert coordinator_of(cluster, group, via=broker_id) == new
        # The group keeps working with its new coordinator: it consumes and commits.
        # (Without replication the new coordinator has no committed offset, so a rejoin
        # may restart from auto.offset.reset=earliest: 1 and 2 may come again.)
        produce(cluster.bootstrap(), topic, [b"3"])
        seen = consume_until(c, b"3", cluster)
        assert set(seen) <= {b"1", b"2", b"3"}, seen
        commit_until_accepted(c, topic, 3, cluster)
        assert committed(c, topic) == 3
    finally:
        c.close()


def test_offsets_survive_the_coordinators_death(cluster: Cluster) -> None:
    group, topic = f"g-{uuid.uuid4().hex[:8]}", "surviving"
    old = coordinator_of(cluster, group, via=1)
    stays = next(b for b in cluster.brokers if b != old)
    create_topic(cluster, topic, [stays])
    produce(cluster.bootstrap(), topic, [b"x", b"y"])
    c = consumer(cluster.bootstrap(), group)
    try:
        c.subscribe([topic])
        consume(c, 2, cluster)
        commit_until_accepted(c, topic, 2, cluster)
    finally:
        c.close()
    stop_the_coordinator(cluster, group)
    reader = consumer(cluster.bootstrap(exclude=old), group)
    try:
        assert committed(reader, topic) == 2
    finally:
        reader.close()
