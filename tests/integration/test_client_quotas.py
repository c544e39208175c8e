"""Client quotas (KIP-13/55/546) on a broker subprocess with real clients.

Quotas are set with AlterClientQuotas (odradek's Admin and ``odradek configs``), read
back with DescribeClientQuotas, and enforced on confluent-kafka producers, which honour
the throttle time (librdkafka reports it through ``throttle_cb`` and waits it out).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from odradek.client.admin import Admin
from odradek.client.errors import KafkaError
from tests.helpers.broker import BrokerProcess
from tests.helpers.secured import start_secured_broker

pytestmark = pytest.mark.integration

QUOTA = 200_000  # bytes/s: far below what a producer on loopback manages unthrottled


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    secured = start_secured_broker(
        tmp_path_factory.mktemp("quotas"),
        ["PLAINTEXT", "SASL_PLAINTEXT"],
        plain_users={"alice": "alice-secret", "bob": "bob-secret"},
    )
    try:
        yield secured.broker, secured.ports["SASL_PLAINTEXT"]
    finally:
        secured.stop()


def _admin(bootstrap: str, work: Any) -> Any:
    async def go() -> Any:
        admin = Admin(bootstrap)
        await admin.start()
        try:
            return await work(admin)
        finally:
            await admin.close()

    return asyncio.run(go())


def _produce_for(config: dict[str, Any], topic: str, seconds: float) -> tuple[float, list[int]]:
    """Produce 10 KB messages as fast as the client is let for ``seconds``; the delivered
    byte rate (until every message is delivered) and the throttle times librdkafka
    reported."""
    throttles: list[int] = []
    delivered = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered[0] += len(msg.value())

    producer = Producer(
        {
            **config,
            "linger.ms": 5,
            "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
            "queue.buffering.max.kbytes": 256,
        }
    )
    payload = b"x" * 10_000
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, payload, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    # Up to the end of the flush: what was queued when the time ran out counts too.
    return delivered[0] / (time.monotonic() - started), throttles


def test_alter_and_describe_client_quotas(broker: tuple[BrokerProcess, int]) -> None:
    proc = broker[0]

    async def work(admin: Admin) -> Any:
        await admin.alter_client_quotas({"client-id": "c1"}, {"producer_byte_rate": 1024.0})
        await admin.alter_client_quotas(
            {"user": "u1", "client-id": None}, {"consumer_byte_rate": 2048.0}
        )
        await admin.alter_client_quotas({"user": None}, {"request_percentage": 50.5})
        everything = await admin.describe_client_quotas([])
        clients = await admin.describe_client_quotas([("client-id", 2, None)], strict=True)
        with_user = await admin.describe_client_quotas([("user", 0, "u1")])
        default_users = await admin.describe_client_quotas([("user", 1, None)], strict=True)
        return everything, clients, with_user, default_users

    everything, clients, with_user, default_users = _admin(proc.bootstrap, work)
    assert ({"client-id": "c1"}, {"producer_byte_rate": 1024.0}) in everything
    assert clients == [({"client-id": "c1"}, {"producer_byte_rate": 1024.0})]
    # Non-strict: the (user, client-id) entity matches a filter on the user only.
    assert with_user == [({"user": "u1", "client-id": None}, {"consumer_byte_rate": 2048.0})]
    assert default_users == [({"user": None}, {"request_percentage": 50.5})]

    # Removing the last key removes the entity.
    async def remove(admin: Admin) -> Any:
        await admin.alter_client_quotas({"user": None}, {"request_percentage": None})
        await admin.alter_client_quotas({"client-id": "c1"}, {"producer_byte_rate": None})
        return await admin.describe_client_quotas([("client-id", 0, "c1")])

    assert _admin(proc.bootstrap, remove) == []


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ({"client-id": "c"}, {"producer_byte_rate": 1.5}, "whole number"),
        ({"client-id": "c"}, {"no_such_quota": 1.0}, "Invalid configuration key"),
        ({"client-id": "c"}, {"consumer_byte_rate": -5.0}, "positive"),
        ({"group": "g"}, {"producer_byte_rate": 10.0}, "entity type"),
        ({}, {"producer_byte_rate": 10.0}, "empty"),
    ],
)
def test_invalid_quota_is_invalid_request(
    broker: tuple[BrokerProcess, int], entity: dict, ops: dict, message: str
) -> None:
    async def work(admin: Admin) -> Any:
        with pytest.raises(KafkaError) as caught:
            await admin.alter_client_quotas(entity, ops)
        return caught.value

    error = _admin(broker[0].bootstrap, work)
    assert "INVALID_REQUEST" in str(error) and message in str(error)


def test_describe_filter_errors_and_validate_only(broker: tuple[BrokerProcess, int]) -> None:
    async def work(admin: Admin) -> Any:
        with pytest.raises(KafkaError) as twice:
            await admin.describe_client_quotas([("user", 2, None), ("user", 1, None)])
        with pytest.raises(KafkaError) as exact_without_name:
            await admin.describe_client_quotas([("client-id", 0, None)])
        await admin.alter_client_quotas(
            {"client-id": "only-validated"}, {"producer_byte_rate": 10.0}, validate_only=True
        )
        return twice.value, exact_without_name.value, await admin.describe_client_quotas(
            [("client-id", 0, "only-validated")]
        )

    twice, exact_without_name, validated = _admin(broker[0].bootstrap, work)
    assert "INVALID_REQUEST" in str(twice) and "INVALID_REQUEST" in str(exact_without_name)
    assert validated == []


def test_producer_over_its_client_id_quota_is_throttled(broker: tuple[BrokerProcess, int]) -> None:
    proc = broker[0]

    async def work(admin: Admin) -> None:
        await admin.alter_client_quotas({"client-id": "noisy"}, {"producer_byte_rate": QUOTA})

    _admin(proc.bootstrap, work)
    base = {"bootstrap.servers": proc.bootstrap}
    free_rate, free_throttles = _produce_for({**base, "client.id": "free"}, "q-free", 3)
    rate, throttles = _produce_for({**base, "client.id": "noisy"}, "q-noisy", 6)
    assert free_throttles == []
    assert throttles and max(throttles) > 0
    # About the quota: the 11-sample window lets the first second burst, so bound loosely.
    assert rate < QUOTA * 2.5, (rate, free_rate)
    assert free_rate > rate * 1.5, (rate, free_rate)


def test_user_quota_over_sasl_applies_to_that_user_only(
    broker: tuple[BrokerProcess, int],
) -> None:
    proc, sasl_port = broker

    async def work(admin: Admin) -> None:
        await admin.alter_client_quotas({"user": "alice"}, {"producer_byte_rate": QUOTA})

    _admin(proc.bootstrap, work)

    def config(user: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{sasl_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-secret",
            "client.id": "same-client",
        }

    bob_rate, bob_throttles = _produce_for(config("bob"), "q-bob", 3)
    alice_rate, alice_throttles = _produce_for(config("alice"), "q-alice", 6)
    assert bob_throttles == []
    assert alice_throttles and alice_rate < QUOTA * 2.5, (alice_rate, bob_rate)


def test_consumer_over_its_quota_gets_throttled_fetches(broker: tuple[BrokerProcess, int]) -> None:
    proc = broker[0]

    async def work(admin: Admin) -> None:
        await admin.alter_client_quotas({"client-id": "reader"}, {"consumer_byte_rate": QUOTA})

    _admin(proc.bootstrap, work)
    producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5})
    total = 8_000_000
    for _ in range(total // 10_000):
        producer.produce("q-read", b"y" * 10_000)
        producer.poll(0)
    assert producer.flush(60) == 0
    throttles: list[int] = []
    consumer = Consumer(
        {
            "bootstrap.servers": proc.bootstrap,
            "group.id": "quota-readers",
            "client.id": "reader",
            "auto.offset.reset": "earliest",
            "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
        }
    )
    consumer.subscribe(["q-read"])
    read = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < 6 and read < total:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read += len(message.value())
    finally:
        consumer.close()
    # Unthrottled, 8 MB is read in well under a second; at the quota the 11 s window
    # allows a burst of about 2 MB, then 200 KB/s.
    assert throttles and max(throttles) > 0
    assert read < total * 0.6, read
