"""kafka-python 3.x against a real odradek broker subprocess.

kafka-python guesses the broker's release from the advertised API maxima and turns
features on from that guess; with its defaults the producer is idempotent (acks=all,
InitProducerId, sequence numbers), which only happens if odradek looks new enough. The
consumer uses assign() without a group, so no coordinator is involved.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Iterator

import pytest

from tests.helpers.broker import BrokerProcess

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas with importlib APIs Python deprecates.
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import MessageSizeTooLargeError

pytestmark = pytest.mark.timeout(120)

WAIT_S = 20.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


@pytest.fixture
def producer(bootstrap: str) -> Iterator[KafkaProducer]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        yield producer
    finally:
        producer.close(timeout=WAIT_S)


def consume(
    bootstrap: str, partitions: list[TopicPartition], count: int
) -> list[kafka.consumer.fetcher.ConsumerRecord]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        request_timeout_ms=10_000,
    )
    try:
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        received = []
        deadline = time.monotonic() + WAIT_S
        while len(received) < count and time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=500)
            for tp in sorted(batches, key=lambda tp: tp.partition):
                received.extend(batches[tp])
        return received
    finally:
        consumer.close()


def test_default_producer_is_idempotent_and_records_round_trip(
    bootstrap: str, producer: KafkaProducer
) -> None:
    topic = unique("kp-defaults")
    futures = [
        producer.send(
            topic,
            value=f"v{i}".encode(),
            key=f"k{i}".encode() if i % 2 else None,
            headers=[("i", str(i).encode())],
            partition=0,
        )
        for i in range(200)
    ]
    producer.flush(timeout=WAIT_S)
    metadata = [f.get(timeout=WAIT_S) for f in futures]
    assert [m.offset for m in metadata] == list(range(200))
    assert all(m.topic == topic and m.partition == 0 for m in metadata)

    # Idempotence stayed on (kafka-python silently turns it off for "old" brokers) and the
    # broker handed out a real producer id.
    assert producer.config["enable_idempotence"] is True
    manager = producer._transaction_manager
    assert manager is not None and manager.producer_id_and_epoch.producer_id >= 0

    records = consume(bootstrap, [TopicPartition(topic, 0)], 200)
    assert [r.offset for r in records] == list(range(200))
    for i, record in enumerate(records):
        assert record.value == f"v{i}".encode()
        assert record.key == (f"k{i}".encode() if i % 2 else None)
        assert list(record.headers) == [("i", str(i).encode())]


def test_keyed_records_spread_over_partitions_and_keep_order(bootstrap: str) -> None:
    topic = unique("kp-keys")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=5)
    try:
        futures = [
            producer.send(topic, value=str(i).encode(), key=f"user-{i % 10}".encode())
            for i in range(1000)
        ]
        producer.flush(timeout=WAIT_S)
        metadata = [f.get(timeout=WAIT_S) for f in futures]
    finally:
        producer.close(timeout=WAIT_S)
    partitions_used = {m.partition for m in metadata}
    assert len(partitions_used) > 1

    records = consume(bootstrap, [TopicPartition(topic, p) for p in range(4)], 1000)
    assert len(records) == 1000
    for partition in range(4):
        values = [int(r.value) for r in records if r.partition == partition]
        assert values == sorted(values)
    # One key always lands in one partition (murmur2, as every Kafka client computes it).
    key_partitions: dict[bytes, set[int]] = {}
    for record in records:
        key_partitions.setdefault(record.key, set()).add(record.partition)
    assert all(len(parts) == 1 for parts in key_partitions.values())


def test_consumer_assign_with_seek(bootstrap: str, producer: KafkaProducer) -> None:
    topic = unique("kp-seek")
    for i in range(50):
        producer.send(topic, value=str(i).encode(), partition=0)
    producer.flush(timeout=WAIT_S)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=100
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        assert consumer.end_offsets([tp])[tp] == 50
        assert consumer.beginning_offsets([tp])[tp] == 0
        consumer.seek(tp, 40)
        received = []
        deadline = time.monotonic() + WAIT_S
        while len(received) < 10 and time.monotonic() < deadline:
            received.extend(consumer.poll(timeout_ms=500).get(tp, []))
        assert [r.offset for r in received] == list(range(40, 50))
        assert consumer.position(tp) == 50
    finally:
        consumer.close()


def test_broker_rejects_record_over_max_message_bytes(bootstrap: str) -> None:
    topic = unique("kp-large")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"max.message.bytes": "1000"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
    try:
        future = producer.send(topic, value=b"x" * 5000, partition=0)
        with pytest.raises(MessageSizeTooLargeError):
            future.get(timeout=WAIT_S)
    finally:
        producer.close(timeout=WAIT_S)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_passes_produce_validation(bootstrap: str, codec: str | None) -> None:
    # The broker walks every record of every batch (decompressing it) before storing
    # it; kafka-python's batches in each codec must pass, headers and null keys included.
    topic = unique(f"kp-codec-{codec or 'none'}")
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5)
    try:
        futures = [
            producer.send(
                topic,
                value=b"value-%d" % i * (i % 7),
                key=None if i % 3 == 0 else b"key-%d" % i,
                headers=[("h", b"%d" % i)] if i % 2 else [],
            )
            for i in range(300)
        ]
        producer.flush(timeout=WAIT_S)
        offsets = [f.get(timeout=WAIT_S).offset for f in futures]
    finally:
        producer.close(timeout=WAIT_S)
    assert sorted(offsets) == list(range(300))
    records = consume(bootstrap, [TopicPartition(topic, 0)], 300)
    assert [r.value for r in records] == [b"value-%d" % i * (i % 7) for i in range(300)]
