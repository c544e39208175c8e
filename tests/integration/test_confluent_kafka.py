"""confluent-kafka (librdkafka 2.16) against a real odradek broker subprocess.

Producer: acks 0/1/all, every compression codec, keys, headers, delivery callbacks,
idempotence. Consumer: assign, seek, offsets_for_times, watermarks. AdminClient: create,
describe, alter (legacy and incremental) and delete topics and their configs, partitions,
cluster description and per-item Kafka error codes.

librdkafka insists on a ``group.id`` even for assign-only consumers; these tests never
commit and always assign explicit offsets, so no group coordinator is involved.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

WAIT_S = 20.0  # upper bound of every poll/flush loop


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": bootstrap})


def create_topic(admin: AdminClient, name: str, partitions: int = 1, **config: str) -> None:
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)],
        operation_timeout=10,
    )
    futures[name].result(timeout=WAIT_S)


def make_consumer(bootstrap: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": unique("assign-only"),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra)
    return Consumer(conf)


def consume(
    bootstrap: str, assignments: list[TopicPartition], count: int, **extra: object
) -> list[Message]:
    """Assign explicit offsets and poll until ``count`` messages arrived (bounded)."""
    consumer = make_consumer(bootstrap, **extra)
    try:
        consumer.assign(assignments)
        received: list[Message] = []
        deadline = time.monotonic() + WAIT_S
        while len(received) < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is not None:
                    raise KafkaException(message.error())
                received.append(message)
        return received
    finally:
        consumer.close()


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    consumer = make_consumer(bootstrap)
    try:
        _low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=WAIT_S
        )
        return high
    finally:
        consumer.close()


class Deliveries:
    """Collects delivery reports so a test can check every one of them."""

    def __init__(self) -> None:
        self.ok: list[tuple[int, int, bytes]] = []
        self.failed: list[KafkaError] = []

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed.append(err)
        else:
            self.ok.append((msg.partition(), msg.offset(), msg.value()))


def flush(producer: Producer) -> None:
    remaining = producer.flush(WAIT_S)
    assert remaining == 0, f"{remaining} messages still undelivered after {WAIT_S}s"


# -- producer ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips_keys_values_and_headers(bootstrap: str, codec: str) -> None:
    topic = unique(f"codec-{codec}")
    deliveries = Deliveries()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.codec": codec,
            "acks": "all",
            "linger.ms": 5,
        }
    )
    count = 300
    for i in range(count):
        producer.produce(
            topic,
            value=(f"value-{i}-" + "x" * (i % 50)).encode(),
            key=f"key-{i % 7}".encode() if i % 3 else None,
            partition=0,
            headers=[("n", str(i).encode()), ("empty", None)] if i % 2 else None,
            on_delivery=deliveries,
        )
    flush(producer)
    assert deliveries.failed == []
    assert sorted(offset for _p, offset, _v in deliveries.ok) == list(range(count))

    messages = consume(bootstrap, [TopicPartition(topic, 0, OFFSET_BEGINNING)], count)
    assert [m.offset() for m in messages] == list(range(count))
    for i, message in enumerate(messages):
        assert message.value() == (f"value-{i}-" + "x" * (i % 50)).encode()
        assert message.key() == (f"key-{i % 7}".encode() if i % 3 else None)
        expected_headers = [("n", str(i).encode()), ("empty", None)] if i % 2 else None
        assert message.headers() == expected_headers
    assert high_watermark(bootstrap, topic, 0) == count


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_levels_deliver_everything(bootstrap: str, acks: str) -> None:
    topic = unique(f"acks-{acks}")
    deliveries = Deliveries()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2})
    count = 500
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=0, on_delivery=deliveries)
    flush(producer)
    assert deliveries.failed == []
    assert len(deliveries.ok) == count
    if acks != "0":
        # With acks=0 nobody answers, so librdkafka cannot know offsets.
        assert [offset for _p, offset, _v in deliveries.ok] == list(range(count))
    messages = consume(bootstrap, [TopicPartition(topic, 0, OFFSET_BEGINNING)], count)
    assert [m.value() for m in messages] == [str(i).encode() for i in range(count)]


def test_idempotent_producer_writes_each_record_once_in_order(
    bootstrap: str, admin: AdminClient
) -> None:
    topic = unique("idempotent")
    create_topic(admin, topic, partitions=3)
    deliveries = Deliveries()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 1,
            "batch.num.messages": 50,  # many batches, several in flight per partition
        }
    )
    count = 3000
    for i in range(count):
        producer.produce(
            topic, value=str(i).encode(), key=str(i % 11).encode(), on_delivery=deliveries
        )
        if i % 500 == 0:
            producer.poll(0)
    flush(producer)
    assert deliveries.failed == []
    assert len(deliveries.ok) == count

    by_partition: dict[int, list[tuple[int, bytes]]] = {}
    for partition, offset, value in deliveries.ok:
        by_partition.setdefault(partition, []).append((offset, value))
    assignments = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)]
    messages = consume(bootstrap, assignments, count)
    assert len(messages) == count
    for partition, acked in by_partition.items():
        stored = [(m.offset(), m.value()) for m in messages if m.partition() == partition]
        # Offsets are dense from 0, and what each offset holds is what the producer was told.
        assert [offset for offset, _ in stored] == list(range(len(stored)))
        assert sorted(acked) == stored
        # Per-partition order is the order of produce() calls (same key -> same partition).
        values = [int(v) for _, v in stored]
        assert values == sorted(values)
        assert high_watermark(bootstrap, topic, partition) == len(stored)


def test_record_larger_than_topic_max_message_bytes_is_rejected(
    bootstrap: str, admin: AdminClient
) -> None:
    topic = unique("too-large")
    create_topic(admin, topic, **{"max.message.bytes": "2000"})
    deliveries = Deliveries()
    producer = Producer({"bootstrap.servers": bootstrap, "compression.codec": "none"})
    producer.produce(topic, value=b"small", partition=0, on_delivery=deliveries)
    flush(producer)  # its own batch: the broker rejects whole batches, not single records
    producer.produce(topic, value=b"x" * 10_000, partition=0, on_delivery=deliveries)
    flush(producer)
    assert [v for _p, _o, v in deliveries.ok] == [b"small"]
    assert [e.code() for e in deliveries.failed] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert high_watermark(bootstrap, topic, 0) == 1


# -- consumer ----------------------------------------------------------------------------


def test_seek_and_offsets_for_times(bootstrap: str) -> None:
    topic = unique("seek")
    base_ms = int(time.time() * 1000) - 3_600_000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.num.messages": 10})
    deliveries = Deliveries()
    count = 100
    for i in range(count):
        producer.produce(
            topic,
            value=str(i).encode(),
            partition=0,
            timestamp=base_ms + i * 1000,
            on_delivery=deliveries,
        )
    flush(producer)
    assert deliveries.failed == []

    consumer = make_consumer(bootstrap)
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, 0, base_ms + 42_500)], timeout=WAIT_S
        )
        assert found[0].error is None
        assert found[0].offset == 43  # first record with timestamp >= the query
        exact = consumer.offsets_for_times([TopicPartition(topic, 0, base_ms)], timeout=WAIT_S)
        assert exact[0].offset == 0
        beyond = consumer.offsets_for_times(
            [TopicPartition(topic, 0, base_ms + 10_000_000)], timeout=WAIT_S
        )
        assert beyond[0].offset == -1  # Kafka answers -1 when no record is that new

        consumer.assign([TopicPartition(topic, 0, 10)])
        first = _poll_one(consumer)
        assert first.offset() == 10 and first.value() == b"10"
        assert first.timestamp() == (ck.TIMESTAMP_CREATE_TIME, base_ms + 10_000)
        consumer.seek(TopicPartition(topic, 0, 75))
        after_seek = _poll_one(consumer)
        assert after_seek.offset() == 75 and after_seek.value() == b"75"
        consumer.seek(TopicPartition(topic, 0, 3))
        rewound = _poll_one(consumer)
        assert rewound.offset() == 3
    finally:
        consumer.close()


def _poll_one(consumer: Consumer) -> Message:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error() is not None:
            raise KafkaException(message.error())
        return message
    raise AssertionError("no message within the time bound")


def test_consume_from_offset_beyond_end_resets_per_auto_offset_reset(bootstrap: str) -> None:
    topic = unique("reset")
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, value=str(i).encode(), partition=0)
    flush(producer)
    messages = consume(
        bootstrap, [TopicPartition(topic, 0, 1000)], 5, **{"auto.offset.reset": "earliest"}
    )
    assert [m.offset() for m in messages] == [0, 1, 2, 3, 4]


# -- admin ---------------------------------------------------------------------------------


def describe_topic_configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=WAIT_S)


# Legacy AlterConfigs is deprecated in clients but still part of the protocol we serve.
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_admin_topic_lifecycle(bootstrap: str, admin: AdminClient) -> None:
    topic = unique("admin")
    create_topic(admin, topic, partitions=3, **{"retention.ms": "3600000"})

    metadata = admin.list_topics(topic, timeout=WAIT_S)
    assert metadata.topics[topic].error is None
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    for partition in metadata.topics[topic].partitions.values():
        assert partition.leader == 0 and partition.replicas == [0] and partition.isrs == [0]

    # Creating it again is a per-topic error, not a failed request.
    again = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    with pytest.raises(KafkaException) as excinfo:
        again[topic].result(timeout=WAIT_S)
    assert excinfo.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    configs = describe_topic_configs(admin, topic)
    assert configs["retention.ms"].value == "3600000"
    assert ConfigSource(configs["retention.ms"].source) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].is_default

    # Incremental: set one key, delete another, leave the rest alone.
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("max.message.bytes", "500000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=WAIT_S)
    configs = describe_topic_configs(admin, topic)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["max.message.bytes"].value == "500000"
    assert configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert configs["retention.ms"].is_default

    # Legacy AlterConfigs replaces the whole set: what is not named returns to its default.
    legacy = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.ms": "600000"})
    admin.alter_configs([legacy])[legacy].result(timeout=WAIT_S)
    configs = describe_topic_configs(admin, topic)
    assert configs["segment.ms"].value == "600000"
    assert configs["cleanup.policy"].value == "delete"
    assert configs["max.message.bytes"].is_default

    # Partitions only grow.
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=WAIT_S)
    assert len(admin.list_topics(topic, timeout=WAIT_S).topics[topic].partitions) == 5
    shrink = admin.create_partitions([NewPartitions(topic, 2)])
    with pytest.raises(KafkaException) as excinfo:
        shrink[topic].result(timeout=WAIT_S)
    assert excinfo.value.args[0].code() == KafkaError.INVALID_PARTITIONS

    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while topic in admin.list_topics(timeout=WAIT_S).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in admin.list_topics(timeout=WAIT_S).topics
    gone = admin.delete_topics([topic], operation_timeout=10)
    with pytest.raises(KafkaException) as excinfo:
        gone[topic].result(timeout=WAIT_S)
    assert excinfo.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_rejects_bad_configs_per_item(admin: AdminClient) -> None:
    bad_value = unique("bad-value")
    unknown_key = unique("unknown-key")
    good = unique("good")
    futures = admin.create_topics(
        [
            NewTopic(bad_value, 1, 1, config={"retention.ms": "soon"}),
            NewTopic(unknown_key, 1, 1, config={"no.such.config": "1"}),
            NewTopic(good, 1, 1),
        ]
    )
    for name in (bad_value, unknown_key):
        with pytest.raises(KafkaException) as excinfo:
            futures[name].result(timeout=WAIT_S)
        assert excinfo.value.args[0].code() == KafkaError.INVALID_CONFIG
    futures[good].result(timeout=WAIT_S)

    bad_partitions = unique("zero-partitions")
    future = admin.create_topics([NewTopic(bad_partitions, num_partitions=0)])[bad_partitions]
    with pytest.raises(KafkaException) as excinfo:
        future.result(timeout=WAIT_S)
    assert excinfo.value.args[0].code() == KafkaError.INVALID_PARTITIONS

    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        good,
        incremental_configs=[
            ConfigEntry("retention.ms", "-5x", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as excinfo:
        admin.incremental_alter_configs([resource])[resource].result(timeout=WAIT_S)
    assert excinfo.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_admin_describes_broker_and_cluster(bootstrap: str, admin: AdminClient) -> None:
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(timeout=WAIT_S)
    assert configs["num.partitions"].value == "1"
    assert configs["log.retention.hours"].value == "168"

    cluster = admin.describe_cluster(request_timeout=WAIT_S).result(timeout=WAIT_S)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [
        (0, "127.0.0.1", int(bootstrap.rsplit(":", 1)[1]))
    ]
    assert cluster.cluster_id
    assert cluster.controller is not None and cluster.controller.id == 0


def test_admin_list_offsets_and_delete_records(bootstrap: str, admin: AdminClient) -> None:
    from confluent_kafka.admin import OffsetSpec

    topic = unique("delete-records")
    create_topic(admin, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i in range(20):
        producer.produce(topic, value=str(i).encode(), partition=0)
    flush(producer)

    tp = TopicPartition(topic, 0)
    latest = admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(timeout=WAIT_S)
    assert latest.offset == 20
    deleted = admin.delete_records([TopicPartition(topic, 0, 8)])
    assert deleted[tp].result(timeout=WAIT_S).low_watermark == 8  # the new low watermark
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=WAIT_S)
    assert earliest.offset == 8
    messages = consume(bootstrap, [TopicPartition(topic, 0, OFFSET_BEGINNING)], 12)
    assert [m.offset() for m in messages] == list(range(8, 20))
