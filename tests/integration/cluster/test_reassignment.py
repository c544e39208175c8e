"""Partition reassignment on a real cluster: broker subprocesses over a real ZooKeeper,
data copied by replication, read back with real clients (confluent-kafka), requests
sent with odradek's admin client (Kafka's AlterPartitionReassignments and
ListPartitionReassignments)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from odradek.client.admin import Admin, NewTopic
from odradek.client.errors import KafkaError
from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(240)]


def admin_call(cluster: BrokerCluster, method: str, *args: Any) -> Any:
    async def go() -> Any:
        admin = Admin(cluster.bootstrap(*cluster.live()))
        await admin.start()
        try:
            return await getattr(admin, method)(*args)
        finally:
            await admin.close()

    return asyncio.run(go())


def reassign(cluster: BrokerCluster, targets: dict[tuple[str, int], Any]) -> dict[Any, Any]:
    return admin_call(cluster, "alter_partition_reassignments", targets)


def in_progress(cluster: BrokerCluster) -> dict[Any, Any]:
    return admin_call(cluster, "list_partition_reassignments")


def assignment(cluster: BrokerCluster, topic: str, partition: int) -> tuple[int, ...]:
    found = cluster.zk.get_topic_assignment(topic)
    assert found is not None
    return tuple(found[0].partitions[partition])


def produce(bootstrap: str, topic: str, count: int, size: int = 1000, **conf: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode().ljust(size, b"."))
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def read_all(bootstrap: str, topic: str, partition: int, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{time.monotonic_ns()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    keys: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(keys) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    keys.append(message.key())
    finally:
        consumer.close()
    return keys


def isr(cluster: BrokerCluster, topic: str, partition: int) -> tuple[int, set[int]]:
    found = cluster.zk.get_partition_state(topic, partition)
    assert found is not None
    return found[0].leader, set(found[0].isr)


def test_move_an_rf1_partition_with_its_data(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, **{"offsets.topic.replication.factor": "1"})
    cluster.create_topic("moved", 1, replication_factor=1)
    source = assignment(cluster, "moved", 0)[0]
    target = next(b for b in (1, 2, 3) if b != source)
    produce(cluster.bootstrap(), "moved", 3000)

    results = reassign(cluster, {("moved", 0): [target]})
    assert results == {("moved", 0): None}
    wait_for(lambda: assignment(cluster, "moved", 0) == (target,), 60, "the move to finish")
    assert isr(cluster, "moved", 0) == (target, {target})
    assert in_progress(cluster) == {}
    # The old broker deleted its copy (StopReplica delete=true).
    old_dir = cluster.brokers[source].data_dir / "moved-0"
    wait_for(lambda: not old_dir.exists(), 30, f"{old_dir} deleted")
    # Every record, read from the new leader alone.
    keys = read_all(cluster.bootstrap(target), "moved", 0, 3000)
    assert keys == [str(i).encode() for i in range(3000)]


class AckRecorder:
    """A producer with acks=all writing until stopped; records what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "retries": 1000000}
        )
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append(msg.key())
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self._producer.produce(
                self._topic, key=f"k{i}".encode(), value=b"v" * 200, on_delivery=self._delivered
            )
            self._producer.poll(0.002)
            i += 1

    def __enter__(self) -> AckRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(60)


def test_replace_a_replica_while_acks_all_producer_writes(cluster_factory: Any) -> None:
    cluster = cluster_factory(4, **{"min.insync.replicas": "2"})
    cluster.create_topic("busy", 1, replication_factor=3)
    current = assignment(cluster, "busy", 0)
    spare = next(b for b in (1, 2, 3, 4) if b not in current)
    leader = isr(cluster, "busy", 0)[0]
    dropped = next(b for b in current if b != leader)
    target = [spare if b == dropped else b for b in current]
    produce(cluster.bootstrap(), "busy", 5000, size=200)
    with AckRecorder(cluster.bootstrap(), "busy") as recorder:
        wait_for(lambda: len(recorder.acked) > 200, 60, "acks before the move")
        assert reassign(cluster, {("busy", 0): target}) == {("busy", 0): None}
        wait_for(lambda: assignment(cluster, "busy", 0) == tuple(target), 90, "the move")
        settled = len(recorder.acked)
        wait_for(lambda: len(recorder.acked) > settled + 200, 60, "acks after the move")
    assert recorder.failed == []
    assert isr(cluster, "busy", 0)[1] == set(target)
    expected = 5000 + len(recorder.acked)
    keys = set(read_all(cluster.bootstrap(spare), "busy", 0, expected))
    # Every acknowledged record is there (read through any broker: the leader serves).
    missing = [k for k in recorder.acked if k not in keys]
    assert missing == [], f"{len(missing)} acknowledged records lost"


def test_reassignment_that_moves_the_leader(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    cluster.create_topic("lead", 1, replication_factor=2)
    current = assignment(cluster, "lead", 0)
    leader, _ = isr(cluster, "lead", 0)
    epoch_before = cluster.zk.get_partition_state("lead", 0)[0].leader_epoch
    spare = next(b for b in (1, 2, 3) if b not in current)
    other = next(b for b in current if b != leader)
    produce(cluster.bootstrap(), "lead", 1000)
    # The leader leaves; the spare comes first, so it is the preferred leader after.
    assert reassign(cluster, {("lead", 0): [spare, other]}) == {("lead", 0): None}
    wait_for(lambda: assignment(cluster, "lead", 0) == (spare, other), 60, "the move")
    new_leader, members = isr(cluster, "lead", 0)
    assert new_leader in (spare, other) and new_leader != leader
    assert members == {spare, other}
    # Epochs as Kafka bumps them: RS sent (+1), leader elected (+1), no further change.
    assert cluster.zk.get_partition_state("lead", 0)[0].leader_epoch >= epoch_before + 2
    wait_for(
        lambda: cluster.leaders("lead", spare) == {0: new_leader}, 30, "metadata names the leader"
    )
    assert len(read_all(cluster.bootstrap(spare), "lead", 0, 1000)) == 1000


def create_on(cluster: BrokerCluster, topic: str, broker: int) -> None:
    """A one-partition topic whose only replica is on ``broker``."""
    admin_call(cluster, "create_topics", [NewTopic(topic, replica_assignment={0: [broker]})])
    wait_for(lambda: cluster.leaders(topic, broker) == {0: broker}, 30, f"{topic} led by {broker}")


def test_cancel_reverts_to_the_original_replicas(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    controller = cluster.controller_id()
    source, target = [b for b in (1, 2, 3) if b != controller]
    create_on(cluster, "cancelled", source)
    produce(cluster.bootstrap(), "cancelled", 200)
    # A broker that is not registered cannot be added.
    cluster.brokers[target].stop()
    wait_for(lambda: target not in cluster.zk.get_broker_ids(), 30, "target gone")
    bad = reassign(cluster, {("cancelled", 0): [target]})
    assert bad[("cancelled", 0)].code == ErrorCode.invalid_replica_assignment
    assert "not alive" in str(bad[("cancelled", 0)])
    cluster.brokers[target].start()
    wait_for(lambda: target in cluster.zk.get_broker_ids(), 30, "target back")
    # Paused (still registered), the target cannot catch up: the move waits.
    cluster.brokers[target].proc.send_signal(signal.SIGSTOP)
    try:
        assert reassign(cluster, {("cancelled", 0): [target]}) == {("cancelled", 0): None}
        listed = in_progress(cluster)
        assert listed[("cancelled", 0)].replicas == (target, source)
        assert listed[("cancelled", 0)].adding_replicas == (target,)
        assert listed[("cancelled", 0)].removing_replicas == (source,)
        assert reassign(cluster, {("cancelled", 0): None}) == {("cancelled", 0): None}
    finally:
        cluster.brokers[target].proc.send_signal(signal.SIGCONT)
    assert assignment(cluster, "cancelled", 0) == (source,)
    assert dict(cluster.zk.get_topic_assignment("cancelled")[0].adding_replicas) == {}
    assert in_progress(cluster) == {}
    again = reassign(cluster, {("cancelled", 0): None})
    assert again[("cancelled", 0)].code == ErrorCode.no_reassignment_in_progress
    new_dir = cluster.brokers[target].data_dir / "cancelled-0"
    wait_for(lambda: not new_dir.exists(), 30, "the added replica deleted")
    assert isr(cluster, "cancelled", 0) == (source, {source})
    assert len(read_all(cluster.bootstrap(source), "cancelled", 0, 200)) == 200


def test_new_controller_finishes_a_reassignment_waiting_for_the_isr(
    cluster_factory: Any,
) -> None:
    cluster = cluster_factory(4)
    controller = cluster.controller_id()
    source, target, _other = [b for b in (1, 2, 3, 4) if b != controller]
    create_on(cluster, "failover", source)
    produce(cluster.bootstrap(), "failover", 500)
    # The target is paused: its replica cannot join the ISR until it resumes.
    cluster.brokers[target].proc.send_signal(signal.SIGSTOP)
    try:
        assert reassign(cluster, {("failover", 0): [target]}) == {("failover", 0): None}
        found = cluster.zk.get_topic_assignment("failover")[0]
        assert dict(found.adding_replicas) == {0: (target,)}
        os.kill(cluster.brokers[controller].proc.pid, signal.SIGKILL)
    finally:
        cluster.brokers[target].proc.send_signal(signal.SIGCONT)
    wait_for(
        lambda: cluster.controller_id() not in (None, controller), 60, "a new controller"
    )
    wait_for(lambda: assignment(cluster, "failover", 0) == (target,), 90, "the move finished")
    assert isr(cluster, "failover", 0) == (target, {target})
    assert len(read_all(cluster.bootstrap(target), "failover", 0, 500)) == 500


def test_bad_input_gets_kafkas_errors_and_changes_nothing(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    cluster.create_topic("safe", 2, replication_factor=2)
    before = cluster.zk.get_topic_assignment("safe")
    results = reassign(
        cluster,
        {
            ("safe", 0): [1, 99],
            ("safe", 1): [2, 2],
            ("safe", 7): [1, 2],
            ("ghost", 0): [1],
        },
    )
    codes = {tp: (None if e is None else e.code) for tp, e in results.items()}
    assert codes == {
        ("safe", 0): ErrorCode.invalid_replica_assignment,
        ("safe", 1): ErrorCode.invalid_replica_assignment,
        ("safe", 7): ErrorCode.unknown_topic_or_partition,
        ("ghost", 0): ErrorCode.unknown_topic_or_partition,
    }
    empty = reassign(cluster, {("safe", 0): []})
    assert empty[("safe", 0)].code == ErrorCode.invalid_replica_assignment
    assert cluster.zk.get_topic_assignment("safe") == before
    assert in_progress(cluster) == {}
    # A broker that is not the controller answers NOT_CONTROLLER (top level).
    other = next(b for b in cluster.live() if b != cluster.controller_id())

    async def direct() -> Any:
        admin = Admin(cluster.bootstrap(other))
        await admin.start()
        try:
            from odradek.client.entities import build_request

            return await admin._client.request(
                other,
                45,
                lambda v: build_request(45, v, timeout=1000, topics=[]),
            )
        finally:
            await admin.close()

    response = asyncio.run(direct())
    assert response.error_code == ErrorCode.not_controller
    assert isinstance(results[("safe", 0)], KafkaError)
