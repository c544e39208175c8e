"""ListOffsets MAX_TIMESTAMP (KIP-734) through confluent-kafka's AdminClient.

The answer is the offset of the record with the largest timestamp (Kafka since
KAFKA-16310), also when that record sits in the middle of a (compressed) batch, and
it stays the same across a clean restart (SIGTERM) and a crash (SIGKILL).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from odradek.records.header import iter_headers
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

WAIT_S = 30.0
BASE_TS = 1_700_000_000_000
# One producer batch per partition: the largest timestamp is on its 3rd record (and
# again on its 6th: the first one is the answer).
OFFSETS_TS = [5, 7, 90, 12, 40, 90, 3]


def produce(bootstrap: str, topic: str, codec: str, shift: int = 0) -> dict[int, int]:
    """Produce OFFSETS_TS (+ shift) as one batch; return timestamp delta -> first offset."""
    offsets: dict[int, int] = {}
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
            return
        delta = msg.timestamp()[1] - BASE_TS - shift  # type: ignore[attr-defined]
        offset = msg.offset()  # type: ignore[attr-defined]
        offsets[delta] = min(offsets.get(delta, offset), offset)

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 200,
         "compression.type": codec, "on_delivery": on_delivery}
    )  # fmt: skip
    for i, delta in enumerate(OFFSETS_TS):
        timestamp = BASE_TS + delta + shift
        producer.produce(topic, value=b"value-%d" % i, partition=0, timestamp=timestamp)
    assert producer.flush(WAIT_S) == 0
    assert errors == []
    return offsets


def max_timestamp(admin: AdminClient, topic: str) -> tuple[int, int]:
    tp = TopicPartition(topic, 0)
    info = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=WAIT_S)
    return info.offset, info.timestamp


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_max_timestamp_record_in_the_middle_of_a_batch(tmp_path: Path, codec: str) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    topic = f"max-ts-{codec}"
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=WAIT_S)
        # Earlier batches with smaller timestamps, then the one under test.
        for shift in (-300, -200, -100):
            produce(broker.bootstrap, topic, codec, shift)
        offsets = produce(broker.bootstrap, topic, codec)
        expected = (offsets[90], BASE_TS + 90)
        [segment] = (tmp_path / "data" / f"{topic}-0").glob("*.log")
        last = list(iter_headers(segment.read_bytes()))[-1][1]
        # The setup holds: one batch, the answer before its last offset.
        assert last.records_count == len(OFFSETS_TS) and last.last_offset > expected[0]
        assert max_timestamp(admin, topic) == expected

        assert broker.stop() == 0
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert max_timestamp(admin, topic) == expected

        broker.kill()
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert max_timestamp(admin, topic) == expected
    finally:
        broker.stop()
