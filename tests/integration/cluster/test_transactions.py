"""Transactions on a ZooKeeper cluster: real ZooKeeper, three broker subprocesses, real
confluent-kafka (librdkafka) producers and consumers.

* a transaction over partitions led by different brokers commits and aborts as Kafka
  shows it to read_committed and read_uncommitted consumers (markers reach the other
  brokers over WriteTxnMarkers);
* ``__transaction_state`` is created through ZooKeeper as Kafka creates it;
* the coordinator's broker SIGKILLed with transactions Ongoing (after AddPartitions and
  sends) and in PrepareCommit: the new leader of the state partition finishes or aborts
  them; read_committed never shows aborted data and every committed record once;
* consume-transform-produce with send_offsets_to_transaction when the group coordinator
  and the transaction coordinator are different brokers.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from odradek.broker.group.partitioning import partition_for
from tests.helpers.cluster import BrokerCluster, wait_for
from tests.helpers.raw import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(300)]

WAIT_S = 60
STATE = "__transaction_state"
OFFSETS = "__consumer_offsets"
PARTITIONS = 50  # transaction.state.log.num.partitions and offsets.topic.num.partitions
FIND_COORDINATOR, INIT_PRODUCER_ID = 10, 22
OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture
def cluster(cluster_factory: Callable[..., BrokerCluster]) -> BrokerCluster:
    return cluster_factory(3, **OVERRIDES)


@pytest.fixture
def marker_delay() -> Iterator[None]:
    """Brokers started meanwhile hold a transaction's markers 60 s after answering EndTxn
    (a testing aid of the coordinator), so a test can kill one in PrepareCommit."""
    os.environ["ODRADEK_DEBUG_TXN_MARKER_DELAY_MS"] = "60000"
    try:
        yield
    finally:
        del os.environ["ODRADEK_DEBUG_TXN_MARKER_DELAY_MS"]


def txn_producer(cluster: BrokerCluster, txn_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap(*cluster.live()),
            "transactional.id": txn_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 60000,
        }
    )
    producer.init_transactions(WAIT_S)
    return producer


def consume_all(
    cluster: BrokerCluster,
    topic: str,
    isolation: str,
    expected: int,
    settle_s: float = 2,
    timeout_s: float = WAIT_S,
) -> list[tuple[int, bytes]]:
    """Everything ``topic`` shows a fresh consumer, stopping ``settle_s`` after
    ``expected`` records (so extra ones would be seen) or at the deadline."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap(*cluster.live()),
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    # Assigned, not subscribed: no group, so no __consumer_offsets needed (it cannot be
    # created with a broker down and offsets.topic.replication.factor=3).
    partitions = cluster.metadata(cluster.live()[0], topic).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    reached: float | None = None
    try:
        while time.monotonic() < deadline:
            if reached is not None and time.monotonic() - reached > settle_s:
                break
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append((msg.partition(), msg.value()))
            if reached is None and len(out) >= expected:
                reached = time.monotonic()
    finally:
        consumer.close()
    return out


def state_leader(cluster: BrokerCluster, txn_id: str, via: int) -> int:
    return cluster.leaders(STATE, via)[partition_for(txn_id, PARTITIONS)]


def ids_led_by(
    cluster: BrokerCluster, topic: str, broker: int, via: int, count: int, prefix: str
) -> list[str]:
    """``count`` fresh keys whose partition of ``topic`` ``broker`` leads."""
    leaders = cluster.leaders(topic, via)
    found: list[str] = []
    for n in range(10_000):
        key = f"{prefix}-{uuid.uuid4().hex[:6]}-{n}"
        if leaders[partition_for(key, PARTITIONS)] == broker:
            found.append(key)
            if len(found) == count:
                return found
    raise AssertionError(f"no key of {topic} led by broker {broker}")


def wait_state_topic(cluster: BrokerCluster) -> None:
    """The first InitProducerId's FindCoordinator creates the topic; wait for leaders."""
    txn_producer(cluster, f"warm-{uuid.uuid4().hex[:6]}").flush(1)
    for broker in cluster.live():
        wait_for(
            lambda b=broker: (
                len(cluster.leaders(STATE, b)) == PARTITIONS
                and all(leader > 0 for leader in cluster.leaders(STATE, b).values())
            ),
            WAIT_S,
            f"{STATE} leaders on broker {broker}",
        )


def test_transaction_across_brokers_commit_and_abort(cluster: BrokerCluster) -> None:
    topic = "orders"
    cluster.create_topic(topic, 3, replication_factor=3)
    leaders = cluster.leaders(topic, 1)
    assert len(set(leaders.values())) == 3, leaders  # one partition led by each broker

    producer = txn_producer(cluster, "across")
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

    committed = consume_all(cluster, topic, "read_committed", expected=60)
    for p in range(3):  # every committed record once, in order, per partition
        assert [v.decode() for part, v in committed if part == p] == [
            f"c1-{i}" for i in range(30) if i % 3 == p
        ] + [f"c2-{i}" for i in range(30) if i % 3 == p]
    uncommitted = consume_all(cluster, topic, "read_uncommitted", expected=90)
    assert sorted(v.decode() for _, v in uncommitted) == sorted(
        [f"{k}-{i}" for k in ("c1", "a", "c2") for i in range(30)]
    )

    # __transaction_state as Kafka creates it: 50 partitions, 3 replicas, min.isr 2.
    found = cluster.zk.get_topic_assignment(STATE)
    assert found is not None
    assignment, _version = found
    assert len(assignment.partitions) == PARTITIONS
    assert all(len(replicas) == 3 for replicas in assignment.partitions.values())
    config = cluster.zk.get_entity_config("topics", STATE)
    assert config["min.insync.replicas"] == "2"
    assert config["cleanup.policy"] == "compact"
    # Every broker names the leader of the id's state partition as its coordinator, and
    # only that broker coordinates it.
    leader = state_leader(cluster, "across", 1)
    idempotent_ids: dict[int, int] = {}
    for broker_id, broker in cluster.brokers.items():
        raw = RawClient(broker.port)
        found: Any = raw.call(FIND_COORDINATOR, 3, {"key": "across", "key_type": 1})
        assert (found.error_code, found.node_id) == (ErrorCode.none, leader)
        init: Any = raw.call(
            INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": "across",
                "transaction_timeout": 60000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        expected = ErrorCode.none if broker_id == leader else ErrorCode.not_coordinator
        assert init.error_code == expected
        # An idempotent producer's id comes from this broker's block in ZooKeeper.
        idempotent: Any = raw.call(
            INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": None,
                "transaction_timeout": 60000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        assert idempotent.error_code == ErrorCode.none
        idempotent_ids[broker_id] = int(idempotent.producer_id)
        raw.sock.close()
    # Three brokers, three blocks of 1,000: no id handed out twice.
    assert len({pid // 1000 for pid in idempotent_ids.values()}) == 3, idempotent_ids
    latest, _version = cluster.zk.get_producer_id_block()
    assert latest is not None and latest.size == 1000
    producer.flush(1)


def test_coordinator_killed_with_transactions_ongoing(cluster: BrokerCluster) -> None:
    topic = "payments"
    cluster.create_topic(topic, 3, replication_factor=3)
    wait_state_topic(cluster)
    controller = cluster.controller_id()
    victim = next(b for b in (1, 2, 3) if b != controller)
    survivor = next(b for b in (1, 2, 3) if b != victim)
    finish_id, fenced_id = ids_led_by(cluster, STATE, victim, survivor, 2, "ongoing")

    finisher = txn_producer(cluster, finish_id)
    zombie = txn_producer(cluster, fenced_id)
    finisher.begin_transaction()
    finisher.produce(topic, b"before", partition=0)
    finisher.commit_transaction(WAIT_S)
    for producer, tag in ((finisher, "keep"), (zombie, "lost")):
        producer.begin_transaction()
        for i in range(30):
            producer.produce(topic, f"{tag}-{i}".encode(), partition=i % 3)
        producer.flush(WAIT_S)  # AddPartitions done and every record acknowledged
    cluster.brokers[victim].kill()

    # The new leader of the state partition loads both ids as Ongoing. The first producer
    # commits through it; a new instance of the second id fences the old one, whose
    # transaction the coordinator aborts.
    finisher.commit_transaction(WAIT_S * 2)
    successor = txn_producer(cluster, fenced_id)  # retries until the load is done
    with pytest.raises(KafkaException):
        zombie.commit_transaction(WAIT_S)
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=1)
    successor.commit_transaction(WAIT_S)
    assert state_leader(cluster, finish_id, survivor) != victim

    expected = ["before", "successor", *(f"keep-{i}" for i in range(30))]
    seen = consume_all(cluster, topic, "read_committed", expected=len(expected))
    assert sorted(v.decode() for _, v in seen) == sorted(expected)
    everything = consume_all(cluster, topic, "read_uncommitted", expected=len(expected) + 30)
    assert sum(v.startswith(b"lost-") for _, v in everything) == 30  # written, then aborted
    for producer in (finisher, successor):  # the zombie is fenced for good
        producer.flush(1)


def test_coordinator_killed_in_prepare_commit(
    marker_delay: None, cluster: BrokerCluster
) -> None:
    topic = "ledger"
    cluster.create_topic(topic, 3, replication_factor=3)
    wait_state_topic(cluster)
    controller = cluster.controller_id()
    victim = next(b for b in (1, 2, 3) if b != controller)
    survivor = next(b for b in (1, 2, 3) if b != victim)
    (txn_id,) = ids_led_by(cluster, STATE, victim, survivor, 1, "prepared")

    producer = txn_producer(cluster, txn_id)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"p-{i}".encode(), partition=i % 3)
    producer.commit_transaction(WAIT_S)  # answered once PrepareCommit is written
    # The markers are held back: the transaction is still open in every partition.
    assert consume_all(cluster, topic, "read_committed", expected=1, timeout_s=5) == []
    cluster.brokers[victim].kill()

    # The new coordinator finds PrepareCommit and writes the markers itself.
    seen = consume_all(cluster, topic, "read_committed", expected=30)
    assert sorted(v.decode() for _, v in seen) == sorted(f"p-{i}" for i in range(30))
    # The id is usable again through the new coordinator.
    again = txn_producer(cluster, txn_id)
    again.begin_transaction()
    again.produce(topic, b"after", partition=0)
    again.abort_transaction(WAIT_S)
    seen = consume_all(cluster, topic, "read_committed", expected=31, settle_s=3)
    assert len(seen) == 30
    producer.flush(1)


def test_consume_transform_produce_with_two_coordinators(cluster: BrokerCluster) -> None:
    source, sink = "raw", "enriched"
    cluster.create_topic(source, 2, replication_factor=3)
    cluster.create_topic(sink, 2, replication_factor=3)
    plain = Producer({"bootstrap.servers": cluster.bootstrap()})
    for i in range(40):
        plain.produce(source, f"in-{i}".encode(), partition=i % 2)
    plain.flush(WAIT_S)
    wait_state_topic(cluster)
    # The group's first FindCoordinator creates __consumer_offsets.
    warm = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "warm"})
    warm.committed([TopicPartition(source, 0)], timeout=WAIT_S)
    warm.close()
    wait_for(
        lambda: all(leader > 0 for leader in cluster.leaders(OFFSETS, 1).values()),
        WAIT_S,
        f"{OFFSETS} leaders",
    )
    (group,) = ids_led_by(cluster, OFFSETS, 1, 1, 1, "group")
    (txn_id,) = ids_led_by(cluster, STATE, 2, 1, 1, "ctp")  # another broker

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    producer = txn_producer(cluster, txn_id)
    done = 0
    deadline = time.monotonic() + WAIT_S * 2
    while done < 40 and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(10, 1.0) if not m.error()]
        if not batch:
            continue
        producer.begin_transaction()
        for msg in batch:
            producer.produce(sink, msg.value().replace(b"in", b"out"), partition=msg.partition())
        positions = {}
        for msg in batch:
            positions[msg.partition()] = msg.offset() + 1
        producer.send_offsets_to_transaction(
            [TopicPartition(source, p, o) for p, o in positions.items()],
            consumer.consumer_group_metadata(),
            WAIT_S,
        )
        producer.commit_transaction(WAIT_S)
        done += len(batch)
    assert done == 40
    committed = consumer.committed([TopicPartition(source, p) for p in (0, 1)], timeout=WAIT_S)
    assert [tp.offset for tp in committed] == [20, 20]

    # An aborted transaction leaves the group's offsets and the sink as they were.
    producer.begin_transaction()
    producer.produce(sink, b"never", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, 5)], consumer.consumer_group_metadata(), WAIT_S
    )
    producer.abort_transaction(WAIT_S)
    committed = consumer.committed([TopicPartition(source, p) for p in (0, 1)], timeout=WAIT_S)
    assert [tp.offset for tp in committed] == [20, 20]
    consumer.close()

    out = consume_all(cluster, sink, "read_committed", expected=40)
    assert sorted(v.decode() for _, v in out) == sorted(f"out-{i}" for i in range(40))
    producer.flush(1)
