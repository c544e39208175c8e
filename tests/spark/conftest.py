"""Fixtures of the Spark tests: one local SparkSession and one broker for the whole session.

Spark takes 6-10 s to start, so every Spark test shares one session (``local[2]``, no UI,
two shuffle partitions) and one odradek broker; tests keep apart by using their own topics
(:func:`topic_name`). Setup and checks use confluent-kafka, a client odradek did not write.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.helpers.broker import BrokerProcess

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("spark-broker") / "data",
        overrides={"num.partitions": "1", "auto.create.topics.enable": "false"},
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from odradek.spark import register

    builder = SparkSession.builder.master("local[2]").appName("odradek-tests")
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    wait_for_leaders(bootstrap, name, partitions)


def wait_for_leaders(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} has no leaders for {partitions} partitions")


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[int, bytes | None, bytes | None]],
    *,
    headers: list[list[tuple[str, bytes]]] | None = None,
    compression: str = "lz4",
) -> None:
    """Produce (partition, key, value) records with librdkafka and wait for every ack."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "compression.type": compression,
            "enable.idempotence": True,
        }
    )
    for i, (partition, key, value) in enumerate(records):
        kwargs = {"headers": headers[i]} if headers is not None else {}
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=on_delivery,
                    **kwargs,
                )  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, (remaining, errors[:3])


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> list:
    """Every record of ``topic`` (via librdkafka), up to the high watermarks seen at the start."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        ends = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        messages = []
        done: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(done) < len(ends) and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is not None:
                    continue
                messages.append(message)
                if message.offset() + 1 >= ends[message.partition()]:
                    done.add(message.partition())
        assert len(done) == len(ends), f"timed out reading {topic}"
        return messages
    finally:
        consumer.close()
