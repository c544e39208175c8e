"""Small client-side steps that several integration tests take through confluent-kafka."""

from __future__ import annotations

import time

from confluent_kafka import Consumer


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
