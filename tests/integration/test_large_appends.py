"""Large batches appended on the broker's append thread (``append.thread.min.bytes``, off
by default, on here): order and crash safety.

One raw connection pipelines Produce requests to one partition, large batches (taken
off the event loop) mixed with small ones (which queue behind them), with acks 0, 1 and
all, and a request naming two partitions. The answers must come back in request order
with offsets in request order; after a SIGKILL and a restart every record is read back
in the order it was sent.
"""

from __future__ import annotations

import socket
import struct
import threading
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response, encode_request
from odradek.records.batch import Record, build_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import METADATA, PRODUCE, RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "large-appends"
LARGE = 300 * 1024  # two of these make a batch well above the 256 KiB set below


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("large-appends") / "data",
        overrides={
            "num.partitions": "2",
            "message.max.bytes": str(2 << 20),
            "append.thread.min.bytes": str(256 * 1024),
        },
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


def value(seq: int, large: bool) -> bytes:
    head = b"%06d:" % seq
    return head + bytes([seq % 251]) * (LARGE - len(head)) if large else head


def frame(correlation: int, acks: int, batches: dict[int, list[bytes]]) -> bytes:
    request = build_request(
        PRODUCE,
        9,
        {
            "acks": acks,
            "timeout": 10_000,
            "topic_data": [
                {
                    "name": TOPIC,
                    "partition_data": [
                        {"index": p, "records": bytes(build_batch([Record(v) for v in vs]))}
                        for p, vs in batches.items()
                    ],
                }
            ],
        },
    )
    return encode_request(9, correlation, "large-appends", request)


def read_answer(sock: socket.socket) -> tuple[int, object]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return decode_response(PRODUCE, 9, exactly(size))


def read_partition(bootstrap: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"la-{uuid.uuid4().hex[:6]}",
         "enable.auto.commit": False, "fetch.max.bytes": 8 << 20,
         "max.partition.fetch.bytes": 8 << 20}
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        values: list[bytes] = []
        for _ in range(600):
            if len(values) >= count:
                break
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def test_pipelined_large_and_small_appends_keep_their_order_and_survive_sigkill(
    broker: BrokerProcess,
) -> None:
    raw = RawClient(broker.port)
    raw.call(METADATA, 9, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
    raw.sock.close()
    # (acks, {partition: values}) per request, in sending order.
    plan: list[tuple[int, dict[int, list[bytes]]]] = []
    seq = 0
    for i in range(12):
        large = i % 3 != 1
        # The last is answered: an unanswered acks=0 request may still be in flight at the
        # SIGKILL below, and then nothing promises it was written.
        acks = (1, -1, 0)[i % 3] if i % 4 and i != 11 else 1
        values = [value(seq, large), value(seq + 1, large)]
        seq += 2
        batches = {0: values}
        if i in (5, 9):  # one request, two partitions, both large
            batches[1] = [value(seq, True), value(seq + 1, True)]
            seq += 2
        plan.append((acks, batches))
    frames = [frame(n + 1, acks, batches) for n, (acks, batches) in enumerate(plan)]

    with socket.create_connection(("127.0.0.1", broker.port), timeout=60) as sock:
        sender = threading.Thread(target=lambda: [sock.sendall(f) for f in frames])
        sender.start()
        answers = [read_answer(sock) for acks, _b in plan if acks != 0]
        sender.join(60)

    answered = [(n + 1, batches) for n, (acks, batches) in enumerate(plan) if acks != 0]
    assert [correlation for correlation, _r in answers] == [c for c, _b in answered]
    expected_next = {0: 0, 1: 0}
    offsets: dict[int, list[int]] = {0: [], 1: []}
    for _acks, batches in plan:
        for partition, values in batches.items():
            offsets[partition].append(expected_next[partition])
            expected_next[partition] += len(values)
    got: dict[int, list[int]] = {0: [], 1: []}
    for (_c, response), (_c2, batches) in zip(answers, answered, strict=True):
        topic = response.responses[0]  # type: ignore[attr-defined]
        parts = {p.index: p for p in topic.partition_responses}
        assert set(parts) == set(batches)
        for partition, answer in parts.items():
            assert answer.error_code == 0, answer
            got[partition].append(answer.base_offset)
    # Every answered append got the offset its place in the sending order gives it.
    for partition in (0, 1):
        requests = [acks for acks, batches in plan if partition in batches]
        answered_offsets = [offsets[partition][i] for i, a in enumerate(requests) if a != 0]
        assert got[partition] == answered_offsets

    sent = {p: [v for _a, b in plan for v in b.get(p, [])] for p in (0, 1)}
    broker.kill()
    broker.start()
    for partition in (0, 1):
        assert read_partition(broker.bootstrap, partition, len(sent[partition])) == sent[partition]
