"""Acknowledged records survive broker restarts: clean (SIGTERM) and crash (SIGKILL).

Every record the producer saw acknowledged (acks=all) must be readable afterwards, in
the order of its partition's offsets, nothing missing and nothing duplicated. The crash
case also kills the broker while an idempotent producer is mid-stream: the producer
retries into the restarted broker, which must still deduplicate by sequence number
(producer state recovered from snapshots plus the log), so no value appears twice.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(180)

WAIT_S = 30.0
PARTITIONS = 2


@pytest.fixture
def restartable_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        yield proc
    finally:
        if proc.is_running():
            proc.stop()


class Acked:
    """Thread-safe record of (partition, offset, value) for every acknowledged record."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []

    def __call__(self, err: object, msg: ck.Message) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.records.append((msg.partition(), msg.offset(), msg.value()))

    def by_partition(self) -> dict[int, list[tuple[int, bytes]]]:
        with self._lock:
            out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
            for partition, offset, value in self.records:
                out[partition].append((offset, value))
        return {p: sorted(v) for p, v in out.items()}


def make_producer(bootstrap: str, acked: Acked) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60_000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "on_delivery": acked,
        }
    )


def produce(producer: Producer, topic: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        producer.produce(topic, value=f"{i:08d}".encode(), key=str(i % 13).encode())
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(WAIT_S)
    assert remaining == 0, f"{remaining} records undelivered"


def read_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Everything stored in the topic, per partition, up to each high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"restart-check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        ends = {}
        for partition in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=WAIT_S
            )
            assert low == 0
            ends[partition] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        stored: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + WAIT_S
        while any(len(stored[p]) < ends[p] for p in stored) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=5000, timeout=0.5):
                if message.error() is not None:
                    raise KafkaException(message.error())
                stored[message.partition()].append((message.offset(), message.value()))
        for partition, records in stored.items():
            assert len(records) == ends[partition], f"partition {partition} short read"
        return stored
    finally:
        consumer.close()


def check(stored: dict[int, list[tuple[int, bytes]]], acked: Acked) -> None:
    for partition, records in stored.items():
        # Dense offsets from 0: nothing missing, nothing out of place.
        assert [offset for offset, _ in records] == list(range(len(records)))
        values = [value for _, value in records]
        assert len(values) == len(set(values)), f"duplicates in partition {partition}"
        # Per-partition order is the producer's order.
        assert values == sorted(values)
    for partition, acknowledged in acked.by_partition().items():
        # Everything acknowledged is stored at exactly the offset the producer was told.
        assert set(acknowledged) <= set(stored[partition])


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=WAIT_S)


def test_clean_restart_keeps_every_acknowledged_record(restartable_broker: BrokerProcess) -> None:
    broker = restartable_broker
    topic = "restart-clean"
    create_topic(broker.bootstrap, topic)
    acked = Acked()
    produce(make_producer(broker.bootstrap, acked), topic, 0, 5000)
    assert acked.errors == [] and len(acked.records) == 5000

    assert broker.stop() == 0
    broker.start()
    stored = read_all(broker.bootstrap, topic)
    check(stored, acked)
    assert sum(len(r) for r in stored.values()) == 5000

    # The restarted broker keeps appending after the recovered end.
    produce(make_producer(broker.bootstrap, acked), topic, 5000, 1000)
    stored = read_all(broker.bootstrap, topic)
    check(stored, acked)
    assert sum(len(r) for r in stored.values()) == 6000


def test_crash_restart_keeps_every_acknowledged_record(restartable_broker: BrokerProcess) -> None:
    broker = restartable_broker
    topic = "restart-crash"
    create_topic(broker.bootstrap, topic)
    acked = Acked()
    produce(make_producer(broker.bootstrap, acked), topic, 0, 5000)

    broker.kill()
    broker.start()
    stored = read_all(broker.bootstrap, topic)
    check(stored, acked)
    assert sum(len(r) for r in stored.values()) == 5000


def test_crash_while_an_idempotent_producer_streams(restartable_broker: BrokerProcess) -> None:
    broker = restartable_broker
    topic = "restart-streaming"
    create_topic(broker.bootstrap, topic)
    acked = Acked()
    producer = make_producer(broker.bootstrap, acked)
    total = 20_000
    stop = threading.Event()

    def stream() -> None:
        # About 5,000 records/s, so the stream spans the kill and the restart.
        for i in range(total):
            if stop.is_set():
                return
            while True:
                try:
                    producer.produce(topic, value=f"{i:08d}".encode(), key=str(i % 13).encode())
                    break
                except BufferError:  # local queue full while the broker is down
                    producer.poll(0.05)
            if i % 10 == 0:
                producer.poll(0)
                time.sleep(0.002)

    writer = threading.Thread(target=stream, name="producer")
    writer.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(acked.records) < 2000 and time.monotonic() < deadline:
            producer.poll(0.01)
        assert len(acked.records) >= 2000, "producer made no progress before the crash"
        assert writer.is_alive(), "the stream ended before the crash; slow it down"
        broker.kill()
        time.sleep(0.3)
        broker.start()
    finally:
        writer.join(WAIT_S * 2)
        stop.set()
    remaining = producer.flush(WAIT_S * 2)
    assert remaining == 0, f"{remaining} records undelivered after the restart"
    assert acked.errors == []
    assert len(acked.records) == total

    stored = read_all(broker.bootstrap, topic)
    check(stored, acked)
    # Retries across the crash must not duplicate: every value exactly once.
    assert sum(len(r) for r in stored.values()) == total


def test_restart_after_a_crash_logs_recovery_progress(
    restartable_broker: BrokerProcess,
) -> None:
    """A broker restarted over a crashed log directory says what it recovers, as Kafka's."""
    broker = restartable_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = "recover-me"
    created = admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "4096"})])
    created[topic].result(WAIT_S)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(300):
        producer.produce(topic, b"x" * 100, partition=0)
        if i % 50 == 0:
            producer.flush(WAIT_S)
    assert producer.flush(WAIT_S) == 0
    broker.kill()  # no clean shutdown: the next start must recover
    before = len(broker.log_text())
    broker.overrides["num.recovery.threads.per.data.dir"] = "3"
    broker.start()
    deadline = time.monotonic() + WAIT_S
    while "loaded " not in broker.log_text()[before:] and time.monotonic() < deadline:
        time.sleep(0.1)
    text = broker.log_text()[before:]
    assert "since no clean shutdown file was found" in text
    # Segments rolled before the crash were flushed and checkpointed when they rolled;
    # the rest (at least the active segment) are read, each named with its rank.
    pattern = rf"Recovering unflushed segment \d+\. (\d+)/(\d+) recovered for {topic}-0\."
    steps = re.findall(pattern, text)
    assert steps and [int(done) for done, _ in steps] == list(range(len(steps)))
    assert {int(total) for _, total in steps} == {len(steps)}
    assert f"Completed load of log {topic}-0 with " in text
    assert "completed in " in text
    assert "after an unclean shutdown (3 recovery threads)" in text
