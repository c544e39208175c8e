"""Several PLAINTEXT listeners: each is bound, serves real clients, and advertises itself.

Kafka answers Metadata with the endpoints of the listener the request came in on; so does
odradek. Before, only the first listener of ``listeners`` was bound, silently.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.raw import RawClient
from tests.integration.conftest import OTHER_HOST  # the host of two_listeners' INTERNAL

pytestmark = pytest.mark.integration

FIND_COORDINATOR = 10


def _advertised(bootstrap: str) -> list[tuple[str, int]]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return [(b.host, b.port) for b in metadata.brokers.values()]


def test_both_listeners_answer_and_advertise_themselves(
    two_listeners: tuple[BrokerProcess, int],
) -> None:
    broker, second = two_listeners
    first_bootstrap, second_bootstrap = broker.bootstrap, f"{OTHER_HOST}:{second}"
    assert _advertised(first_bootstrap) == [("127.0.0.1", broker.port)]
    assert _advertised(second_bootstrap) == [(OTHER_HOST, second)]

    # Produce through one listener, consume through the other: one broker behind both.
    producer = Producer({"bootstrap.servers": second_bootstrap})
    for i in range(5):
        producer.produce("across", value=f"m{i}".encode())
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": first_bootstrap,
            "group.id": "listeners",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["across"])
    values = []
    try:
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) == 5:
                break
    finally:
        consumer.close()
    assert values == [f"m{i}".encode() for i in range(5)]


def test_kafka_python_sees_the_listener_it_connected_to(
    two_listeners: tuple[BrokerProcess, int],
) -> None:
    from kafka import KafkaAdminClient

    _broker, second = two_listeners
    admin = KafkaAdminClient(bootstrap_servers=f"{OTHER_HOST}:{second}")
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [(OTHER_HOST, second)]


def test_advertised_listeners_name_what_each_listener_tells_clients(tmp_path: Path) -> None:
    first, second = free_port(), free_port()
    broker = BrokerProcess(
        tmp_path / "data",
        port=first,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{first},INTERNAL://{OTHER_HOST}:{second}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "advertised.listeners": f"INTERNAL://localhost:{second}",
        },
    ).start()
    try:
        assert _advertised(f"{OTHER_HOST}:{second}") == [("localhost", second)]
        # Not in advertised.listeners: advertised as bound.
        assert _advertised(broker.bootstrap) == [("127.0.0.1", first)]
    finally:
        broker.stop()


def test_find_coordinator_names_the_listener_it_came_in_on(
    two_listeners: tuple[BrokerProcess, int],
) -> None:
    broker, second = two_listeners
    for host, port in (("127.0.0.1", broker.port), (OTHER_HOST, second)):
        raw = RawClient.__new__(RawClient)
        raw.sock, raw.correlation = socket.create_connection((host, port), timeout=30), 0
        try:
            # The first call creates __consumer_offsets (50 partitions, fsynced): a loaded
            # machine may take seconds, so wait on a deadline rather than a count.
            deadline = time.monotonic() + 30
            while True:
                found: Any = raw.call(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
                if found.error_code == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        finally:
            raw.sock.close()
        assert (found.error_code, found.host, found.port) == (0, host, port)
