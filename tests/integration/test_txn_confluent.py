"""Transactions with confluent-kafka (librdkafka) against a real broker subprocess:
commit, abort, several partitions, read_committed vs read_uncommitted, offsets in the
transaction, zombie fencing and the coordinator's timeout abort."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess

WAIT_S = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root: Path = tmp_path_factory.mktemp("txn")
    proc = BrokerProcess(
        root / "data",
        overrides={
            "transaction.state.log.num.partitions": "5",
            "offsets.topic.num.partitions": "5",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
        },
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


def create_topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=WAIT_S)
    return name


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra}
    )
    producer.init_transactions(WAIT_S)
    return producer


def consume_all(
    bootstrap: str, topic: str, isolation: str, expected: int | None = None, idle_s: float = 3
) -> list[tuple[int, int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + WAIT_S
    last_data = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                if expected is not None and len(out) >= expected:
                    if time.monotonic() - last_data > 1:
                        break
                elif expected is None and out and time.monotonic() - last_data > idle_s:
                    break
                continue
            last_data = time.monotonic()
            out.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def test_commit_and_abort_visibility(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    producer = txn_producer(broker.bootstrap, f"tx-{uuid.uuid4().hex[:6]}")
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"c1-{i}".encode(), partition=i % 3)
    producer.commit_transaction(WAIT_S)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"a-{i}".encode(), partition=i % 3)
    producer.flush(WAIT_S)  # librdkafka drops unsent messages on abort: make them land
    producer.abort_transaction(WAIT_S)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"c2-{i}".encode(), partition=i % 3)
    producer.commit_transaction(WAIT_S)

    committed = consume_all(broker.bootstrap, topic, "read_committed", expected=60)
    values = [v.decode() for _, _, v in committed]
    assert sorted(values) == sorted([f"c1-{i}" for i in range(30)] + [f"c2-{i}" for i in range(30)])
    for p in range(3):  # in order per partition
        in_partition = [v.decode() for part, _, v in committed if part == p]
        expect = [f"c1-{i}" for i in range(30) if i % 3 == p] + [
            f"c2-{i}" for i in range(30) if i % 3 == p
        ]
        assert in_partition == expect
    uncommitted = consume_all(broker.bootstrap, topic, "read_uncommitted", expected=90)
    assert len(uncommitted) == 90  # aborted data is there for read_uncommitted; no markers
    producer.flush()


def test_open_transaction_holds_back_read_committed(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"before", partition=0)
    plain.flush(WAIT_S)
    producer = txn_producer(broker.bootstrap, f"tx-{uuid.uuid4().hex[:6]}")
    producer.begin_transaction()
    producer.produce(topic, b"in-txn", partition=0)
    producer.flush(WAIT_S)
    plain.produce(topic, b"after", partition=0)
    plain.flush(WAIT_S)
    # LSO stops at the open transaction: "after" is not visible yet to read_committed.
    seen = consume_all(broker.bootstrap, topic, "read_committed", idle_s=2)
    assert [v for _, _, v in seen] == [b"before"]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x",
                         "isolation.level": "read_committed"})  # fmt: skip
    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=WAIT_S)
    consumer.close()
    assert high == 1  # ListOffsets latest with read_committed answers the LSO
    producer.commit_transaction(WAIT_S)
    seen = consume_all(broker.bootstrap, topic, "read_committed", expected=3)
    assert [v for _, _, v in seen] == [b"before", b"in-txn", b"after"]


def test_zombie_is_fenced(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, partitions=1)
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    old = txn_producer(broker.bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic, b"zombie", partition=0)
    old.flush(WAIT_S)
    new = txn_producer(broker.bootstrap, txn_id)  # aborts the old one's transaction
    new.begin_transaction()
    new.produce(topic, b"fresh", partition=0)
    new.commit_transaction(WAIT_S)
    with pytest.raises(KafkaException) as info:
        old.produce(topic, b"late", partition=0)
        old.commit_transaction(WAIT_S)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower()
    seen = consume_all(broker.bootstrap, topic, "read_committed", expected=1)
    assert [v for _, _, v in seen] == [b"fresh"]


def test_timed_out_transaction_is_aborted(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, partitions=1)
    producer = txn_producer(
        broker.bootstrap, f"tx-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 2000}
    )
    producer.begin_transaction()
    producer.produce(topic, b"forgotten", partition=0)
    producer.flush(WAIT_S)
    time.sleep(4)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"later", partition=0)
    plain.flush(WAIT_S)
    # The coordinator aborted it: read_committed moves past it without the data.
    seen = consume_all(broker.bootstrap, topic, "read_committed", expected=1)
    assert [v for _, _, v in seen] == [b"later"]
    with pytest.raises(KafkaException):
        producer.commit_transaction(WAIT_S)


def test_send_offsets_to_transaction(broker: BrokerProcess) -> None:
    source = create_topic(broker.bootstrap, partitions=1)
    sink = create_topic(broker.bootstrap, partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        plain.produce(source, f"in-{i}".encode(), partition=0)
    plain.flush(WAIT_S)
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    producer = txn_producer(broker.bootstrap, f"tx-{uuid.uuid4().hex[:6]}")
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg)
    producer.begin_transaction()
    for msg in got[:5]:
        producer.produce(sink, msg.value().replace(b"in", b"out"), partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, got[4].offset() + 1)],
        consumer.consumer_group_metadata(),
        WAIT_S,
    )
    # Pending: a read-committed fetch of the group's offsets is unstable until the commit.
    producer.commit_transaction(WAIT_S)
    committed = consumer.committed([TopicPartition(source, 0)], timeout=WAIT_S)
    assert committed[0].offset == 5
    consumer.close()
    # An aborted transaction leaves the group's offset where it was.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})  # fmt: skip
    producer.begin_transaction()
    producer.produce(sink, b"x", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, 9)], consumer.consumer_group_metadata(), WAIT_S
    )
    producer.abort_transaction(WAIT_S)
    committed = consumer.committed([TopicPartition(source, 0)], timeout=WAIT_S)
    consumer.close()
    assert committed[0].offset == 5


def test_pending_offsets_are_unstable_for_require_stable(broker: BrokerProcess) -> None:
    """KIP-447: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT while a
    transactional commit of that partition is pending; without it, the last stable one."""
    import asyncio

    from odradek.client.core import KafkaClient
    from odradek.client.entities import build_request

    topic = create_topic(broker.bootstrap, partitions=1)
    group = f"g-{uuid.uuid4().hex[:6]}"
    producer = txn_producer(broker.bootstrap, f"tx-{uuid.uuid4().hex[:6]}")
    meta_consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 7)], meta_consumer.consumer_group_metadata(), WAIT_S
    )

    async def fetch(require_stable: bool) -> tuple[int, int]:
        async with KafkaClient(broker.bootstrap) as client:
            request = build_request(
                9, 7, group_id=group, require_stable=require_stable,
                topics=[{"name": topic, "partition_indexes": [0]}],
            )  # fmt: skip
            response = await client.send(0, request)
            part = response.topics[0].partitions[0]
            return int(part.error_code), int(part.committed_offset)

    assert asyncio.run(fetch(True)) == (88, -1)  # UNSTABLE_OFFSET_COMMIT
    assert asyncio.run(fetch(False)) == (0, -1)  # nothing committed yet
    producer.commit_transaction(WAIT_S)
    assert asyncio.run(fetch(True)) == (0, 7)
    meta_consumer.close()


def test_list_transactions_filters(broker: BrokerProcess) -> None:
    import asyncio

    from odradek.client.core import KafkaClient
    from odradek.client.entities import build_request

    topic = create_topic(broker.bootstrap, partitions=1)
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    producer = txn_producer(broker.bootstrap, txn_id)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    producer.flush(WAIT_S)

    async def listing(states: list[str], duration: int) -> tuple[list[str], set[str]]:
        async with KafkaClient(broker.bootstrap) as client:
            request = build_request(
                66, 1, state_filters=states, producer_id_filters=[], duration_filter=duration
            )
            response = await client.send(0, request)
            ids = {str(t.transactional_id) for t in response.transaction_states}
            return list(response.unknown_state_filters), ids

    unknown, ids = asyncio.run(listing(["Ongoing", "Bogus"], -1))
    assert unknown == ["Bogus"] and txn_id in ids
    _, ids = asyncio.run(listing(["CompleteCommit"], -1))
    assert txn_id not in ids
    _, ids = asyncio.run(listing(["Ongoing"], 3_600_000))  # open for less than an hour
    assert txn_id not in ids
    producer.commit_transaction(WAIT_S)
    _, ids = asyncio.run(listing(["CompleteCommit"], -1))
    assert txn_id in ids
