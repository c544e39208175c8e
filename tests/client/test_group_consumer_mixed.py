"""One group, three clients: odradek's SyncGroupConsumer, confluent-kafka (librdkafka) and
kafka-python share a topic's partitions; every record is consumed exactly once."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client import SyncGroupAdmin, SyncGroupConsumer
from tests.helpers.broker import BrokerProcess
from tests.integration.test_groups_python_clients import (
    KafkaPythonMember,
    kp_produce,
    stable_with,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

Record = tuple[str, int, int]


class PolledMember:
    """A consumer polled by its own thread: odradek's or confluent-kafka's."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str) -> None:
        self.kind = kind
        self.records: list[Record] = []
        self.assigned: set[tuple[str, int]] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._args = (bootstrap, group, topic)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bootstrap, group, topic = self._args
        try:
            if self.kind == "odradek":
                self._run_odradek(bootstrap, group, topic)
            else:
                self._run_confluent(bootstrap, group, topic)
        except BaseException as exc:
            self.error = exc

    def _run_odradek(self, bootstrap: str, group: str, topic: str) -> None:
        with SyncGroupConsumer(
            bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=500,
            session_timeout_ms=10000,
        ) as consumer:
            consumer.subscribe([topic])
            while not self._stop.is_set():
                records = consumer.poll(200)
                with self._lock:
                    self.assigned = consumer.assignment()
                    self.records.extend((r.topic, r.partition, r.offset) for r in records)

    def _run_confluent(self, bootstrap: str, group: str, topic: str) -> None:
        consumer = CKConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "range",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
            }
        )
        try:
            consumer.subscribe([topic])
            while not self._stop.is_set():
                message = consumer.poll(0.2)
                with self._lock:
                    self.assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
                    if message is not None and message.error() is None:
                        self.records.append(
                            (message.topic(), message.partition(), message.offset())
                        )
        finally:
            consumer.close()

    def snapshot(self) -> tuple[set[tuple[str, int]], list[Record]]:
        with self._lock:
            return set(self.assigned), list(self.records)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.kind} consumer failed: {self.error!r}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.kind} consumer did not stop"


@pytest.mark.parametrize("leader", ["odradek", "confluent"])
def test_odradek_confluent_and_kafka_python_share_one_group(
    shared_broker: BrokerProcess, leader: str
) -> None:
    bootstrap = shared_broker.bootstrap
    topic, group = f"mixed-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(timeout=30)
    group_admin = SyncGroupAdmin(bootstrap)
    # The first member leads the group and computes the assignment for all three: both
    # odradek's leader code and its reading of librdkafka's assignment are exercised.
    first = PolledMember(leader, bootstrap, group, topic)
    members: list[PolledMember | KafkaPythonMember] = [first]
    try:
        wait_until(lambda: len(first.snapshot()[0]) == 6, f"{leader} alone owns everything")
        members.append(KafkaPythonMember(bootstrap, group, topics=[topic]))
        other = "confluent" if leader == "odradek" else "odradek"
        members.append(PolledMember(other, bootstrap, group, topic))

        def split_three_ways() -> bool:
            for member in members:
                member.check()
            owned = [member.snapshot()[0] for member in members]
            return (
                all(len(o) == 2 for o in owned)
                and len(set().union(*owned)) == 6
                and stable_with(group_admin, group, 3)()
            )

        wait_until(split_three_ways, "three members with two partitions each", timeout=60)
        described = group_admin.describe_group(group)
        assert described.protocol == "range"
        produced = kp_produce(bootstrap, topic, 6, 10)

        def everything_consumed() -> bool:
            for member in members:
                member.check()
            return {r for m in members for r in m.snapshot()[1]} >= produced

        wait_until(everything_consumed, "every record consumed", timeout=30)
        time.sleep(0.5)  # a duplicate would show up here
        shares = [m.snapshot() for m in members]
        everything = [r for _, records in shares for r in records]
        assert len(everything) == len(set(everything)) == len(produced)  # exactly once
        for assigned, records in shares:
            assert records and {(t, p) for t, p, _ in records} <= assigned
    finally:
        for member in members:
            member.stop()
        group_admin.close()
