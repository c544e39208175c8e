"""Real clients against a three-broker cluster whose partitions are led by different
brokers, each client bootstrapping through one broker only: it must find the other
leaders from Metadata and go to them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from tests.helpers.cluster import BrokerCluster

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]

PARTITIONS = 6
PER_PARTITION = 5


def _expected() -> set[tuple[int, bytes]]:
    return {(p, f"v-{p}-{i}".encode()) for p in range(PARTITIONS) for i in range(PER_PARTITION)}


def _confluent(bootstrap: str, topic: str) -> set[tuple[int, bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1"})
    failed: list[object] = []
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(
                topic, f"v-{p}-{i}".encode(), partition=p,
                on_delivery=lambda err, _msg: err and failed.append(err),
            )  # fmt: skip
    assert producer.flush(30) == 0
    assert failed == []
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: set[tuple[int, bytes]] = set()
    try:
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add((msg.partition(), msg.value()))
            if len(seen) == PARTITIONS * PER_PARTITION:
                break
    finally:
        consumer.close()
    return seen


def _kafka_python(bootstrap: str, topic: str) -> set[tuple[int, bytes]]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    futures = [
        producer.send(topic, f"v-{p}-{i}".encode(), partition=p)
        for p in range(PARTITIONS)
        for i in range(PER_PARTITION)
    ]
    for future in futures:
        future.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    consumer.assign([KpTopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    seen: set[tuple[int, bytes]] = set()
    try:
        for _ in range(60):
            for records in consumer.poll(timeout_ms=500).values():
                seen.update((r.partition, r.value) for r in records)
            if len(seen) == PARTITIONS * PER_PARTITION:
                break
    finally:
        consumer.close()
    return seen


def _aiokafka(bootstrap: str, topic: str) -> set[tuple[int, bytes]]:
    async def run() -> set[tuple[int, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1)
        await producer.start()
        try:
            for p in range(PARTITIONS):
                for i in range(PER_PARTITION):
                    await producer.send_and_wait(topic, f"v-{p}-{i}".encode(), partition=p)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        seen: set[tuple[int, bytes]] = set()
        try:
            consumer.assign([AioTopicPartition(topic, p) for p in range(PARTITIONS)])
            for _ in range(60):
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    seen.update((r.partition, r.value) for r in records)
                if len(seen) == PARTITIONS * PER_PARTITION:
                    break
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(run())


CLIENTS: dict[str, Callable[[str, str], set[tuple[int, bytes]]]] = {
    "confluent-kafka": _confluent,
    "kafka-python": _kafka_python,
    "aiokafka": _aiokafka,
}


def test_clients_produce_and_consume_across_leaders(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(3)
    for n, (name, client) in enumerate(CLIENTS.items()):
        topic = f"spread-{n}"
        cluster.create_topic(topic, PARTITIONS, 3)
        leaders = cluster.leaders(topic, via=1)
        # Kafka's placement spreads 6 partitions' first replicas over all 3 brokers.
        assert set(leaders.values()) == {1, 2, 3}, leaders
        # Every broker tells the same story.
        assert cluster.leaders(topic, via=2) == leaders == cluster.leaders(topic, via=3)
        bootstrap = cluster.bootstrap(n % 3 + 1)  # one address only
        assert client(bootstrap, topic) == _expected(), name
