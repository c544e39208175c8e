"""A segment torn after a clean shutdown: the broker recovers it on restart.

The broker is stopped with SIGTERM (the clean-shutdown marker is written), then the last
batch of the partition's last ``.log`` is cut in the middle, as a disk or an operator
copying files might. The restart must notice (the file is not the size the shutdown
recorded), cut the torn batch and put the log end offset right after the last whole
batch: records produced afterwards are acknowledged at readable offsets, ListOffsets by
timestamp answers, and a crash (SIGKILL) later keeps every one of them.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.records.header import iter_headers
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(180)

WAIT_S = 30.0
TOPIC = "torn-tail"
BASE_TS = 1_700_000_000_000


def produce(bootstrap: str, values: list[bytes], timestamps: list[int]) -> list[int]:
    """Produce with acks=all; return the acknowledged offsets in order."""
    acked: list[tuple[int, bytes]] = []
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.offset(), msg.value()))  # type: ignore[attr-defined]

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
         "batch.num.messages": 20, "on_delivery": on_delivery}
    )  # fmt: skip
    for value, timestamp in zip(values, timestamps, strict=True):
        producer.produce(TOPIC, value=value, partition=0, timestamp=timestamp)
    assert producer.flush(WAIT_S) == 0
    assert errors == []
    by_value = dict((v, o) for o, v in acked)
    return [by_value[v] for v in values]


def read_all(bootstrap: str) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"torn-{uuid.uuid4().hex[:6]}",
         "enable.auto.commit": False, "fetch.wait.max.ms": 100}
    )  # fmt: skip
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=WAIT_S)
        consumer.assign([TopicPartition(TOPIC, 0, low)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + WAIT_S
        while len(out) < high - low and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is not None:
                    raise KafkaException(message.error())
                out.append((message.offset(), message.value()))
        return out
    finally:
        consumer.close()


def offset_for_time(bootstrap: str, timestamp: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "torn-times"})
    try:
        [found] = consumer.offsets_for_times([TopicPartition(TOPIC, 0, timestamp)], WAIT_S)
        assert found.error is None
        return found.offset
    finally:
        consumer.close()


def test_torn_tail_after_a_clean_shutdown(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=WAIT_S)
        first = [b"before-%04d" % i for i in range(300)]
        offsets = produce(broker.bootstrap, first, [BASE_TS + i for i in range(300)])
        assert offsets == list(range(300))
        assert broker.stop() == 0

        segment = sorted((tmp_path / "data" / f"{TOPIC}-0").glob("*.log"))[-1]
        data = segment.read_bytes()
        batches = list(iter_headers(data))
        assert len(batches) > 2
        torn_pos, torn = batches[-1]
        with open(segment, "r+b") as f:
            f.truncate(torn_pos + torn.size // 2)
        kept = torn.base_offset  # records before the torn batch survive

        broker.start()
        later = [b"after-%04d" % i for i in range(200)]
        later_ts = [BASE_TS + 10_000 + i for i in range(200)]
        acked = produce(broker.bootstrap, later, later_ts)
        assert acked == list(range(kept, kept + 200))  # right after the last whole batch
        expected = list(enumerate(first[:kept])) + list(zip(acked, later, strict=True))
        assert read_all(broker.bootstrap) == expected
        assert offset_for_time(broker.bootstrap, later_ts[57]) == acked[57]
        assert offset_for_time(broker.bootstrap, BASE_TS + 5) == 5
        assert "not trusting the clean shutdown" in broker.log_text()  # the warning

        broker.kill()
        broker.start()
        assert read_all(broker.bootstrap) == expected
        assert offset_for_time(broker.bootstrap, later_ts[199]) == acked[199]
    finally:
        broker.stop()
