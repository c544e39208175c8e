"""Small client-side steps that several integration tests take through confluent-kafka."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition


def consume_in_group(
    bootstrap: str, topic: str, group: str, count: int, *, commit: bool, timeout: float = 60
) -> int:
    """Subscribe as ``group`` from the earliest offset and read until ``count`` records came
    (or ``timeout`` passed); commit what was read if asked, close, and return how many were
    read (the caller asserts on it when the count matters)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + timeout
    while seen < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and not message.error():
            seen += 1
    if commit:
        consumer.commit(asynchronous=False)
    consumer.close()
    return seen


def read_partition(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    """(offset, value) of partition 0 of ``topic`` from its start, assigned (no group
    membership), until ``count`` records came or 100 s of polls passed."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[int, bytes]] = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append((msg.offset(), msg.value()))
            if len(out) >= count:
                break
    finally:
        consumer.close()
    return out


def read_values(config: dict[str, Any], topic: str, expect: int, timeout: float) -> list[bytes]:
    """Values of partition 0 of ``topic`` from offset 0, read by a consumer made from
    ``config`` and assigned the partition, until ``expect`` came or ``timeout`` passed. End
    of partition is waited through; any other error fails the read."""
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(values) < expect:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            values.append(msg.value())
    finally:
        consumer.close()
    return values
