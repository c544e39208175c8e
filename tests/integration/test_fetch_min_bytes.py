"""fetch.min.bytes through confluent-kafka: a consumer asking for 100 KB per fetch, with
300 KB already in the partition as 1 KB batches, gets them at once, not after
fetch.wait.max.ms. The broker used to count min_bytes as the whole batches a read of
min_bytes would return, which fall short of it whenever the next batch does not fit, and
so parked such fetches for their whole max wait."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RECORDS = 300
MAX_WAIT_MS = 60_000  # no answer may wait this out: the test gives up after 20 s


def test_a_fetch_with_min_bytes_there_is_answered_without_waiting(broker: BrokerProcess) -> None:
    topic = f"min-bytes-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(topic, value=i.to_bytes(4, "big") * 256, partition=0)
        producer.flush(30)  # one batch per record
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{topic}",
            "enable.auto.commit": False,
            "fetch.min.bytes": 100_000,
            "fetch.wait.max.ms": MAX_WAIT_MS,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        deadline = time.monotonic() + 20
        while len(values) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        assert len(values) == RECORDS, f"{len(values)} of {RECORDS} records in 20 s"
        assert values == [i.to_bytes(4, "big") * 256 for i in range(RECORDS)]
    finally:
        consumer.close()
