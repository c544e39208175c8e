"""Request-time quotas (KIP-124 ``request_percentage``) on a broker subprocess.

A confluent-kafka producer whose client id has a small ``request_percentage`` gets
throttle times back (librdkafka's ``throttle_cb``) and delivers much less than an
unlimited one measured in the same run; the quota removed, it is throttled no more.
Exempt requests (a follower's Fetch) carry no throttle time even for a client whose other
requests are throttled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from odradek.client.admin import Admin
from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.raw import FETCH, METADATA, RawClient

pytestmark = pytest.mark.integration

PERCENT = 2.0  # of one thread: far below what a producer with linger.ms=0 makes it spend


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("request-quota")
    proc = BrokerProcess(root / "data", port=free_port(), overrides={"num.partitions": "1"})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _set(bootstrap: str, entity: dict[str, str | None], value: float | None) -> None:
    async def go() -> None:
        admin = Admin(bootstrap)
        await admin.start()
        try:
            await admin.alter_client_quotas(entity, {"request_percentage": value})
        finally:
            await admin.close()

    asyncio.run(go())


def _produce_for(bootstrap: str, client_id: str, seconds: float) -> tuple[float, list[int]]:
    """Small messages with linger.ms=0 (one request each, as far as the client keeps up)
    for ``seconds``: messages delivered per second and the throttle times reported."""
    throttles: list[int] = []
    delivered = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 0,
            "acks": 1,
            "max.in.flight": 1,
            "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
        }
    )
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        producer.produce(f"rq-{client_id}", b"v" * 100, on_delivery=on_delivery)
        producer.poll(0.0005 if len(producer) > 10 else 0)
        while len(producer) > 100 and time.monotonic() - started < seconds:
            producer.poll(0.01)
    assert producer.flush(30) == 0
    return delivered[0] / (time.monotonic() - started), throttles


def test_client_over_its_request_quota_is_throttled(broker: BrokerProcess) -> None:
    _set(broker.bootstrap, {"client-id": "busy"}, PERCENT)
    free_rate, free_throttles = _produce_for(broker.bootstrap, "free", 3)
    busy_rate, busy_throttles = _produce_for(broker.bootstrap, "busy", 5)
    assert free_throttles == []
    assert busy_throttles and max(busy_throttles) > 0
    # Kafka bounds a request throttle by one quota window (1 s here).
    assert max(busy_throttles) <= 1000
    assert busy_rate * 2 < free_rate, (busy_rate, free_rate)

    # The quota removed, the same client id is no longer throttled.
    _set(broker.bootstrap, {"client-id": "busy"}, None)
    after_rate, after_throttles = _produce_for(broker.bootstrap, "busy", 2)
    assert after_throttles == []
    assert after_rate > busy_rate * 2, (after_rate, busy_rate)


def test_exempt_requests_carry_no_throttle(broker: BrokerProcess) -> None:
    # RawClient's requests say client id "raw": every one of its requests is over 0.001 %.
    _set(broker.bootstrap, {"client-id": "raw"}, 0.001)
    try:
        fetch = {
            "max_wait": 0,
            "min_bytes": 0,
            "topics": [
                {"topic": "rq-exempt", "partitions": [{"partition": 0, "fetch_offset": 0}]}
            ],
        }
        consumer_side = RawClient(broker.port)
        follower_side = RawClient(broker.port)
        try:
            # A cached Metadata answer takes tens of microseconds, so a few of them may stay
            # within even this quota (the rate is over a 10 s window): ask until one is
            # throttled, as a busy client would be.
            metadata = []
            for _ in range(500):
                metadata.append(consumer_side.call(METADATA, 9, {"topics": None}).throttle_time)  # type: ignore[attr-defined]
                if metadata[-1].total_seconds() > 0:
                    break
            consumer_fetch = consumer_side.call(FETCH, 11, {**fetch, "replica_id": -1})
            follower_fetches = [
                follower_side.call(FETCH, 11, {**fetch, "replica_id": 1}) for _ in range(5)
            ]
        finally:
            consumer_side.sock.close()
            follower_side.sock.close()
        assert max(m.total_seconds() for m in metadata) > 0
        assert consumer_fetch.throttle_time.total_seconds() > 0  # type: ignore[attr-defined]
        # A follower's fetch is inter-broker traffic: exempt, whoever sends it.
        assert all(f.throttle_time.total_seconds() == 0 for f in follower_fetches)  # type: ignore[attr-defined]
    finally:
        _set(broker.bootstrap, {"client-id": "raw"}, None)
