"""Compaction and retention observed from outside: a real broker and a real client."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def fast_broker(tmp_path: Path):
    proc = BrokerProcess(
        tmp_path / "data",
        overrides={
            "log.cleaner.backoff.ms": "100",
            "log.retention.check.interval.ms": "200",
            "log.segment.delete.delay.ms": "0",
        },
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


def _create(bootstrap: str, name: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(10)


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    # Batches must stay below segment.bytes, or the broker refuses them as Kafka does.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": 900})
    failures: list[object] = []
    for key, value in records:
        producer.produce(
            topic, key=key, value=value, on_delivery=lambda e, m: failures.append(e) if e else None
        )
    assert producer.flush(20) == 0
    assert not failures


def _read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 20
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            out.append((message.offset(), message.key(), message.value()))
        return out
    finally:
        consumer.close()


def test_compaction_keeps_the_latest_value_per_key(fast_broker: BrokerProcess) -> None:
    bootstrap = fast_broker.bootstrap
    _create(
        bootstrap,
        "compacted",
        {
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "0",
        },
    )
    records = [(b"k%d" % (i % 10), b"v%d" % i) for i in range(400)]
    records.append((b"k3", None))  # a tombstone
    _produce(bootstrap, "compacted", records)
    _produce(bootstrap, "compacted", [(b"filler%d" % i, b"x" * 200) for i in range(30)])

    expected = {key: value for key, value in records if value is not None}
    expected.pop(b"k3")
    deadline = time.monotonic() + 60
    while True:
        seen = _read_all(bootstrap, "compacted")
        keyed = [(k, v) for _, k, v in seen if k.startswith(b"k")]
        if len(keyed) == len(expected) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    latest = dict(keyed)
    assert latest == expected
    assert len(keyed) == len(expected), "older values of compacted keys are still there"
    offsets = [offset for offset, _, _ in seen]
    assert offsets == sorted(offsets)
    # Offsets are preserved by compaction: k9's last value was record 399.
    assert (399, b"k9", b"v399") in seen


def test_retention_deletes_old_segments(fast_broker: BrokerProcess) -> None:
    bootstrap = fast_broker.bootstrap
    _create(bootstrap, "retained", {"segment.bytes": "4096", "retention.bytes": "8192"})
    _produce(bootstrap, "retained", [(b"k", b"x" * 100) for _ in range(200)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "w"})
    try:
        deadline = time.monotonic() + 30
        low = 0
        while time.monotonic() < deadline:
            low, high = consumer.get_watermark_offsets(TopicPartition("retained", 0), timeout=10)
            if low > 0:
                break
            time.sleep(0.3)
        assert high == 200
        assert 0 < low < 200
    finally:
        consumer.close()
    remaining = _read_all(bootstrap, "retained")
    assert remaining[0][0] == low and remaining[-1][0] == 199


def test_retention_ms_empties_a_quiet_topic(fast_broker: BrokerProcess, tmp_path: Path) -> None:
    """Kafka rolls and deletes a breached active segment: with no new writes, the whole
    log goes once retention.ms has passed, and a consumer at the end carries on."""
    bootstrap = fast_broker.bootstrap
    _create(bootstrap, "quiet", {"retention.ms": "1500"})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failures: list[object] = []

    def produce(count: int, **kwargs: object) -> None:
        for i in range(count):
            producer.produce("quiet", value=b"v%d" % i, partition=0,
                             on_delivery=lambda e, m: failures.append(e) if e else None,
                             **kwargs)  # fmt: skip
        assert producer.flush(20) == 0
        assert not failures

    produce(50)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "at-the-end", "auto.offset.reset": "error",
         "enable.auto.commit": False, "fetch.wait.max.ms": 100}
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition("quiet", 0, 50)])
        deadline = time.monotonic() + 30
        low = high = 0
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            assert message is None or message.error() is None, message.error()
            low, high = consumer.get_watermark_offsets(TopicPartition("quiet", 0), timeout=10)
            if low == high:
                break
        assert (low, high) == (50, 50)
        partition_dir = tmp_path / "data" / "quiet-0"
        assert sorted(p.name for p in partition_dir.glob("*.log")) == ["00000000000000000050.log"]
        # The consumer at the end keeps working; the same idempotent producer goes on.
        # (Timestamps ahead of the clock keep these records clear of retention.ms.)
        produce(5, timestamp=int(time.time() * 1000) + 300_000)
        got: list[int] = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.offset())
        assert got == [50, 51, 52, 53, 54]
    finally:
        consumer.close()
