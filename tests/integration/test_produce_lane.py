"""The lone-produce lane (``produce.lane.enable``, on by default) answers exactly as the
generic Produce path does.

Two brokers run side by side, one with the lane and one without. The same raw request
frames go to both over one connection each: every Kafka version the broker serves, acks
0, 1 and all, a null client id, idempotent batches (in order, duplicate, out of order),
and every error a one-partition request can meet (unknown topic or partition, invalid
acks, illegal name, bad CRC, a batch over max.message.bytes, a control batch, a
transactional id). The answers must be the same bytes (a LogAppendTime topic's answers
differ only in the broker's clock), and afterwards both logs must hold the same bytes.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response, encode_request
from odradek.records.batch import Record, build_batch
from odradek.records.compression import Compression
from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PRODUCE, FETCH, INIT_PRODUCER_ID = 0, 1, 22
VERSIONS = range(3, 12)


class Connection(RawClient):
    """Sends ready-made frames and reads answers as bytes (RawClient decodes them)."""

    def send_frame(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def answer(self) -> bytes:
        return self.read(struct.unpack(">i", self.read(4))[0])


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    started = []
    try:
        for name, lane in (("lane", "true"), ("generic", "false")):
            started.append(
                BrokerProcess(
                    tmp_path_factory.mktemp(name) / "data",
                    overrides={"produce.lane.enable": lane, "auto.create.topics.enable": "false"},
                ).start()
            )
        for proc in started:
            admin = AdminClient({"bootstrap.servers": proc.bootstrap})
            futures = admin.create_topics(
                [
                    NewTopic("lane", 2, 1),
                    NewTopic("small", 1, 1, config={"max.message.bytes": "200"}),
                    NewTopic("stamped", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
                ]
            )
            for future in futures.values():
                future.result(30)
        yield started
    finally:
        for proc in started:
            proc.stop()


def batch(values: list[bytes], **kwargs) -> bytes:
    return bytes(build_batch([Record(v) for v in values], **kwargs))


def produce(
    correlation: int,
    version: int,
    partitions: list[tuple[str, int, bytes | None]],
    *,
    acks: int = 1,
    client_id: str | None = "lane-test",
    transactional_id: str | None = None,
) -> bytes:
    topics: dict[str, list[dict]] = {}
    for name, index, records in partitions:
        topics.setdefault(name, []).append({"index": index, "records": records})
    values = {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [{"name": n, "partition_data": p} for n, p in topics.items()],
    }
    return encode_request(version, correlation, client_id, build_request(PRODUCE, version, values))


def corrupt(records: bytes) -> bytes:
    damaged = bytearray(records)
    damaged[-1] ^= 0xFF  # a record byte: the CRC no longer matches
    return bytes(damaged)


def producer_id(conn: Connection) -> tuple[int, int]:
    values = {"transactional_id": None, "transaction_timeout": 60_000}
    conn.send_frame(encode_request(1, 999, "lane-test", build_request(INIT_PRODUCER_ID, 1, values)))
    _correlation, answer = decode_response(INIT_PRODUCER_ID, 1, conn.answer())
    assert answer.error_code == 0
    return int(answer.producer_id), int(answer.producer_epoch)


def requests(pid: int, epoch: int) -> list[tuple[bytes, bool]]:
    """(frame, answered) pairs; the same for both brokers when their producer ids agree."""
    out: list[tuple[bytes, bool]] = []
    correlation = iter(range(1, 10_000))

    def add(frame_args: list, answered: bool = True, **kwargs) -> None:
        version = kwargs.pop("version", 9)
        out.append((produce(next(correlation), version, frame_args, **kwargs), answered))

    for version in VERSIONS:
        for acks in (1, -1):
            add([("lane", 0, batch([b"v%d-%d" % (version, acks)] * 3))], version=version, acks=acks)
        add([("lane", 1, batch([b"acks0-%d" % version]))], False, version=version, acks=0)
        add([("lane", 1, batch([b"no-client-id"]))], version=version, client_id=None)
    add([("lane", 0, batch([b"gz"] * 20, compression=Compression.GZIP))])
    add([("nope", 0, batch([b"x"]))])  # unknown topic
    add([("lane", 99, batch([b"x"]))])  # unknown partition
    add([("lane", 0, batch([b"x"]))], acks=2)  # invalid acks
    add([("bad name!", 0, batch([b"x"]))])  # illegal topic name
    add([("lane", 0, corrupt(batch([b"crc"])))])
    add([("lane", 0, corrupt(batch([b"crc"])))], False, acks=0)
    add([("small", 0, batch([b"z" * 500]))])  # over the topic's max.message.bytes
    add([("lane", 0, batch([b"\x00\x00\x00\x00\x00\x00"], is_control=True))])
    add([("lane", 0, batch([b"t"], producer_id=pid, producer_epoch=epoch, transactional=True,
                            base_sequence=0))], transactional_id="lane-txn")  # fmt: skip
    idempotent = {"producer_id": pid, "producer_epoch": epoch}
    add([("lane", 1, batch([b"i0", b"i1"], base_sequence=0, **idempotent))], acks=-1)
    add([("lane", 1, batch([b"i0", b"i1"], base_sequence=0, **idempotent))], acks=-1)  # again
    add([("lane", 1, batch([b"i7"], base_sequence=7, **idempotent))], acks=-1)  # a gap
    add([("lane", 1, batch([b"i2"], base_sequence=2, **idempotent))], acks=-1)
    add([("lane", 0, batch([b"a"])), ("lane", 1, batch([b"b"]))])  # two partitions
    add([("lane", 0, b"")])  # no records
    add([("lane", 0, batch([b"q"])[:40])])  # a runt
    return out


def fetch_log(conn: Connection, topic: str, partition: int) -> bytes:
    values = {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
    }  # fmt: skip
    conn.send_frame(encode_request(4, 5000, "lane-test", build_request(FETCH, 4, values)))
    _correlation, answer = decode_response(FETCH, 4, conn.answer())
    return bytes(answer.responses[0].partitions[0].records or b"")


def test_the_lane_answers_as_the_generic_path(brokers: list[BrokerProcess]) -> None:
    lane, generic = (Connection(proc.port) for proc in brokers)
    ids = producer_id(lane), producer_id(generic)
    assert ids[0] == ids[1]  # two fresh brokers: the same frames fit both
    sent = requests(*ids[0])
    assert len(sent) > 40
    for frame, answered in sent:
        lane.send_frame(frame)
        generic.send_frame(frame)
        if answered:
            got = lane.answer()
            assert got == generic.answer(), frame[:60]
    for topic, partition in (("lane", 0), ("lane", 1), ("small", 0)):
        stored = fetch_log(lane, topic, partition)
        assert stored == fetch_log(generic, topic, partition)
        assert stored or topic == "small"


def test_log_append_time_is_stamped_by_both(brokers: list[BrokerProcess]) -> None:
    lane, generic = (Connection(proc.port) for proc in brokers)
    before = int(time.time() * 1000)
    for version in VERSIONS:
        frame = produce(version, version, [("stamped", 0, batch([b"s%d" % version]))])
        answers = []
        for conn in (lane, generic):
            conn.send_frame(frame)
            _correlation, answer = decode_response(PRODUCE, version, conn.answer())
            entry = answer.responses[0].partition_responses[0]
            assert entry.error_code == 0
            assert before <= int(entry.log_append_time.timestamp() * 1000) <= time.time() * 1000
            start = getattr(entry, "log_start_offset", None)  # v5+
            answers.append((entry.index, entry.base_offset, start))
        assert answers[0] == answers[1]


@pytest.mark.parametrize("frame", [b"", b"\x00"], ids=["empty", "one-byte"])
def test_frames_too_short_for_an_api_key_are_refused_as_before(
    brokers: list[BrokerProcess], frame: bytes
) -> None:
    """A frame too short to name an API is refused by the generic decoder (one WARNING,
    the connection closed) on both brokers, never an unexpected error in the lane."""
    for proc in brokers:
        conn = Connection(proc.port)
        conn.send_frame(struct.pack(">i", len(frame)) + frame)
        with pytest.raises(ConnectionError):
            conn.answer()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        logs = [proc.log_path.read_text(errors="replace") for proc in brokers]
        if all(f"request header truncated: {len(frame)} bytes" in log for log in logs):
            break
        time.sleep(0.1)
    for log in logs:
        assert f"request header truncated: {len(frame)} bytes" in log
        assert "unexpected error" not in log
