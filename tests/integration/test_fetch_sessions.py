"""Incremental fetch sessions (KIP-227) on the wire, and real clients that use them.

The raw-protocol tests send the requests a session-aware fetcher sends (full, then
incremental with only changed partitions, forgotten partitions, a stale epoch) and read
the answers; the client tests consume many partitions and read the broker's session
counters from its metrics endpoint to see whether the client's fetches were incremental.
One more raw test checks that a long-polling Fetch keeps its place in the connection's
answer order.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol.build import build_request
from odradek.protocol.codec import encode_request
from odradek.protocol.framing import RECEIVE_BUFFER_MIN
from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.metrics import scrape
from tests.helpers.raw import FETCH, RawClient

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FETCH_VERSION = 12
API_VERSIONS = 18
PARTITIONS = 24
REQUESTS = "odradek_fetch_session_requests_total"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    metrics_port = free_port()
    proc = BrokerProcess(
        Path(tmp_path_factory.mktemp("sessions")) / "data",
        overrides={"metrics.port": str(metrics_port)},
    ).start()
    try:
        yield proc, metrics_port
    finally:
        proc.stop()


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"sessions-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(30) == 0


def _fetch(
    raw: RawClient,
    session_id: int,
    epoch: int,
    partitions: dict[tuple[str, int], int],
    forget: dict[str, list[int]] | None = None,
    max_wait_ms: int = 50,
) -> object:
    topics: dict[str, list[dict]] = {}
    for (topic, partition), offset in partitions.items():
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": 1 << 20,
            }
        )
    return raw.call(
        FETCH,
        FETCH_VERSION,
        {
            "cluster_id": None,
            "replica_id": -1,
            "max_wait": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 50 << 20,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
            "forgotten_topics_data": [
                {"topic": t, "partitions": p} for t, p in (forget or {}).items()
            ],
            "rack_id": "",
        },
    )


def _listed(response) -> dict[int, tuple[int, int]]:
    """partition -> (high watermark, record bytes) of every partition the answer lists."""
    return {
        int(p.partition_index): (int(p.high_watermark), len(p.records or b""))
        for t in response.responses
        for p in t.partitions
    }


def test_incremental_answers_only_changed_partitions(broker) -> None:
    proc, _ = broker
    topic = _topic(proc.bootstrap, 4)
    _produce(proc.bootstrap, topic, {0: 3, 1: 3})
    raw = RawClient(proc.port)
    offsets = {(topic, p): 0 for p in range(4)}

    full = _fetch(raw, 0, 0, offsets)
    assert full.error_code == 0
    session = full.session_id
    assert session != 0
    listed = _listed(full)
    assert set(listed) == {0, 1, 2, 3}
    assert listed[0][0] == 3 and listed[0][1] > 0 and listed[2] == (0, 0)

    # The fetcher moves its offsets for 0 and 1; nothing new anywhere: nothing listed.
    moved = _fetch(raw, session, 1, {(topic, 0): 3, (topic, 1): 3})
    assert (moved.error_code, moved.session_id) == (0, session)
    assert _listed(moved) == {}

    # New data in partition 2 only: the session (not the request) says to read it.
    _produce(proc.bootstrap, topic, {2: 2})
    changed = _fetch(raw, session, 2, {})
    assert (changed.error_code, changed.session_id) == (0, session)
    assert set(_listed(changed)) == {2}
    assert _listed(changed)[2][0] == 2

    # Partition 3 is forgotten: data there is no longer read, 2 still is.
    forgot = _fetch(raw, session, 3, {(topic, 2): 2}, forget={topic: [3]})
    assert _listed(forgot) == {}
    _produce(proc.bootstrap, topic, {3: 1, 2: 1})
    after = _fetch(raw, session, 4, {})
    assert set(_listed(after)) == {2}

    # A replayed epoch is refused, with no partitions and session id 0 (Kafka's answer).
    stale = _fetch(raw, session, 4, {})
    assert (stale.error_code, stale.session_id, _listed(stale)) == (71, 0, {})
    # The session survives a bad epoch: the right one still works.
    assert _fetch(raw, session, 5, {}).error_code == 0

    # Epoch -1 closes it and is answered sessionless; the id is then unknown.
    final = _fetch(raw, session, -1, {(topic, 2): 3})
    assert (final.error_code, final.session_id) == (0, 0)
    assert set(_listed(final)) == {2}
    gone = _fetch(raw, session, 6, {})
    assert (gone.error_code, gone.session_id, _listed(gone)) == (70, 0, {})
    raw.sock.close()


def test_unknown_session_and_sessionless_fetch(broker) -> None:
    proc, _ = broker
    topic = _topic(proc.bootstrap, 1)
    raw = RawClient(proc.port)
    unknown = _fetch(raw, 12345, 1, {(topic, 0): 0})
    assert (unknown.error_code, unknown.session_id, _listed(unknown)) == (70, 0, {})
    sessionless = _fetch(raw, 0, -1, {(topic, 0): 0})
    assert (sessionless.error_code, sessionless.session_id) == (0, 0)
    assert set(_listed(sessionless)) == {0}
    raw.sock.close()


def test_long_poll_fetch_is_answered_before_a_request_sent_after_it(broker) -> None:
    """Kafka answers a connection's requests in order. A Fetch waiting for data (handled
    in the read callback, then suspended) is followed in the same write by ApiVersions:
    the broker reads both in one callback (the Fetch fills a fresh connection's receive
    buffer exactly, so uvloop reads on at once) and must still answer the Fetch first."""
    proc, _ = broker
    topic = _topic(proc.bootstrap, 1)
    raw = RawClient(proc.port)
    assert raw.call(API_VERSIONS, 0, {}).error_code == 0  # the processor now waits
    fetch_values = {
        "cluster_id": None,
        "replica_id": -1,
        "max_wait": 500,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    pad = 1
    for _ in range(5):  # padded in rack_id to fill the receive buffer exactly
        fetch_values["rack_id"] = "r" * pad
        fetch = encode_request(
            FETCH_VERSION, 1, "raw", build_request(FETCH, FETCH_VERSION, fetch_values)
        )
        pad += RECEIVE_BUFFER_MIN - len(fetch)
    assert len(fetch) == RECEIVE_BUFFER_MIN
    api_versions = encode_request(0, 2, "raw", build_request(API_VERSIONS, 0, {}))
    started = time.monotonic()
    raw.sock.sendall(fetch + api_versions)
    sent = {1: (FETCH, FETCH_VERSION), 2: (API_VERSIONS, 0)}
    first, fetched = raw.receive(sent)
    waited = time.monotonic() - started
    second, versions = raw.receive(sent)
    assert (first, second) == (1, 2)
    assert waited >= 0.4  # the Fetch did wait for data (none came)
    assert fetched.error_code == 0 and _listed(fetched) == {0: (0, 0)}
    assert versions.error_code == 0
    assert FETCH in {int(key.api_key) for key in versions.api_keys}
    raw.sock.close()


def _wait_consumed(poll, expected: int, deadline_s: float = 60.0) -> int:
    got = 0
    deadline = time.monotonic() + deadline_s
    while got < expected and time.monotonic() < deadline:
        got += poll()
    return got


def test_kafka_python_consumes_many_partitions_through_a_session(broker) -> None:
    proc, metrics_port = broker
    topic = _topic(proc.bootstrap, PARTITIONS)
    _produce(proc.bootstrap, topic, {p: 5 for p in range(PARTITIONS)})
    before = scrape(metrics_port)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=proc.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        request_timeout_ms=10_000,
    )
    try:
        consumer.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])

        def poll() -> int:
            return sum(len(v) for v in consumer.poll(timeout_ms=500).values())

        assert _wait_consumed(poll, PARTITIONS * 5) == PARTITIONS * 5
        # Idle polls go on through the session; then one partition gets data.
        for _ in range(4):
            poll()
        _produce(proc.bootstrap, topic, {7: 3})
        assert _wait_consumed(poll, 3) == 3
    finally:
        consumer.close()
    after = scrape(metrics_port)
    incremental = after.value(REQUESTS, context="incremental")
    assert incremental > before.value(REQUESTS, context="incremental") + 2
    assert after.value(REQUESTS, context="error") == before.value(REQUESTS, context="error")


def _assert_only_sessionless(before, after) -> None:
    for context in ("full", "incremental", "error"):
        assert after.value(REQUESTS, context=context) == before.value(REQUESTS, context=context)
    assert after.value(REQUESTS, context="sessionless") > before.value(
        REQUESTS, context="sessionless"
    )


def test_confluent_kafka_consumes_many_partitions(broker) -> None:
    proc, metrics_port = broker
    topic = _topic(proc.bootstrap, PARTITIONS)
    _produce(proc.bootstrap, topic, {p: 5 for p in range(PARTITIONS)})
    before = scrape(metrics_port)
    consumer = Consumer(
        {
            "bootstrap.servers": proc.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

        def poll() -> int:
            return sum(1 for m in consumer.consume(500, 1.0) if m.error() is None)

        assert _wait_consumed(poll, PARTITIONS * 5) == PARTITIONS * 5
        _produce(proc.bootstrap, topic, {3: 2})
        assert _wait_consumed(poll, 2) == 2
    finally:
        consumer.close()
    # librdkafka 2.16 does not use fetch sessions: every fetch has epoch -1.
    _assert_only_sessionless(before, scrape(metrics_port))


def test_aiokafka_consumes_many_partitions(broker) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioPartition

    proc, metrics_port = broker
    topic = _topic(proc.bootstrap, PARTITIONS)
    _produce(proc.bootstrap, topic, {p: 4 for p in range(PARTITIONS)})
    before = scrape(metrics_port)

    async def consume() -> int:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=proc.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50
        )
        await consumer.start()
        try:
            consumer.assign([AioPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            got = 0
            deadline = time.monotonic() + 60
            while got < PARTITIONS * 4 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got += sum(len(v) for v in batches.values())
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == PARTITIONS * 4
    # aiokafka 0.14 does not use fetch sessions either.
    _assert_only_sessionless(before, scrape(metrics_port))


def test_kafka_python_opens_a_new_session_after_a_broker_restart(tmp_path: Path) -> None:
    """The broker forgets its sessions when it restarts. kafka-python either sends its next
    incremental fetch and gets FETCH_SESSION_ID_NOT_FOUND, or (when a fetch was in flight
    as the connection dropped) resets the session itself; either way it opens a new
    session with a full fetch and goes on incrementally."""
    metrics_port = free_port()
    proc = BrokerProcess(tmp_path / "data", overrides={"metrics.port": str(metrics_port)})
    proc.start()
    consumer = None
    try:
        topic = _topic(proc.bootstrap, 4)
        _produce(proc.bootstrap, topic, {p: 2 for p in range(4)})
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=proc.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            request_timeout_ms=10_000,
            reconnect_backoff_ms=50,
        )
        consumer.assign([kafka.TopicPartition(topic, p) for p in range(4)])

        def poll() -> int:
            return sum(len(v) for v in consumer.poll(timeout_ms=300).values())

        assert _wait_consumed(poll, 8) == 8
        for _ in range(3):
            poll()
        assert scrape(metrics_port).value(REQUESTS, context="incremental") > 0
        proc.stop()
        proc.start()
        _produce(proc.bootstrap, topic, {1: 3})
        assert _wait_consumed(poll, 3) == 3
        for _ in range(3):
            poll()
        # Counters start again at the restart: these are the new broker's.
        after = scrape(metrics_port)
        assert after.value(REQUESTS, context="full") >= 1
        assert after.value(REQUESTS, context="incremental") >= 1
        assert after.value(REQUESTS, context="error") <= 1
    finally:
        if consumer is not None:
            consumer.close()
        proc.stop()
