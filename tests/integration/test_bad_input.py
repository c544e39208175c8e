"""Bad bytes on one connection never hurt the broker or the other clients.

While a confluent-kafka producer streams records on its own connections, raw sockets
send garbage: random bytes, truncated frames, absurd and negative lengths, unknown API
keys, unsupported versions, valid headers with garbage bodies, and many connections
opened and dropped at once. The broker must stay up, close (or answer) only the bad
connection, and the producer must see every delivery succeed.

Frame layout used below (Kafka protocol guide): ``int32 size`` then a request header v1
``int16 api_key, int16 api_version, int32 correlation_id, int16-length client_id``, then
the body. ApiVersions v0 has an empty body; its v0 response is ``int32 size, int32
correlation_id, int16 error_code, [int16 api_key, int16 min, int16 max]``.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(150)

WAIT_S = 20.0
API_VERSIONS = 18
UNSUPPORTED_VERSION = 35


def request_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    client_id = b"bad-input-test"
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(5)
    return sock


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame, or None if the broker closed the connection."""

    def read_exact(n: int) -> bytes | None:
        chunks = b""
        while len(chunks) < n:
            chunk = sock.recv(n - len(chunks))
            if not chunk:
                return None
            chunks += chunk
        return chunks

    size = read_exact(4)
    if size is None:
        return None
    return read_exact(struct.unpack(">i", size)[0])


def closed_or_answered(sock: socket.socket) -> bool:
    """After bad input the broker may answer or close, but must not leave us hanging."""
    try:
        read_frame(sock)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def api_versions_ok(port: int) -> None:
    """A fresh, well-behaved connection still gets a correct ApiVersions v0 answer."""
    with connect(port) as sock:
        sock.sendall(frame(request_header(API_VERSIONS, 0, 4242)))
        payload = read_frame(sock)
    assert payload is not None
    correlation_id, error_code, count = struct.unpack(">ihi", payload[:10])
    assert (correlation_id, error_code) == (4242, 0)
    keys = {struct.unpack(">h", payload[10 + 6 * i : 12 + 6 * i])[0] for i in range(count)}
    assert {0, 1, 3, 18} <= keys


class StreamingProducer:
    """A confluent-kafka producer writing steadily in a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
        self.sent = 0
        self.delivered = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streaming-producer")

    def _on_delivery(self, err: object, _msg: object) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < 200_000:
            self.producer.produce(
                self.topic,
                value=str(self.sent).encode(),
                partition=0,
                on_delivery=self._on_delivery,
            )
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.0005)

    def __enter__(self) -> StreamingProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        remaining = self.producer.flush(WAIT_S)
        assert remaining == 0, f"{remaining} messages undelivered"


def _random_bytes(port: int) -> None:
    rng = random.Random(1234)
    for _ in range(20):
        with connect(port) as sock:
            sock.sendall(rng.randbytes(rng.randint(1, 8192)))
            closed_or_answered(sock)


def _truncated_frames(port: int) -> None:
    whole = frame(request_header(3, 9, 1) + b"\x00" * 20)
    for cut in (1, 3, 5, 9, len(whole) - 1):
        with connect(port) as sock:
            sock.sendall(whole[:cut])  # then hang up mid-frame


def _absurd_lengths(port: int) -> None:
    for size in (0x7FFFFFFF, 2**30, 104857601, -1, -(2**31), 0, 1, 3):
        with connect(port) as sock:
            sock.sendall(struct.pack(">i", size) + b"\x00\x12\x00\x00")
            assert closed_or_answered(sock), f"size {size}: connection left hanging"


def _unknown_api_keys(port: int) -> None:
    for api_key in (999, -1, 32767, 67, 1000):
        with connect(port) as sock:
            sock.sendall(frame(request_header(api_key, 0, 7)))
            assert closed_or_answered(sock), f"api key {api_key}: connection left hanging"


def _unsupported_versions(port: int) -> None:
    # ApiVersions with a version from the future: Kafka answers UNSUPPORTED_VERSION in v0
    # format so the client can retry with a version from the list. ApiVersions v3+ use the
    # flexible request header v2, which ends with a tagged-field count (0 here).
    with connect(port) as sock:
        sock.sendall(frame(request_header(API_VERSIONS, 99, 11) + b"\x00"))
        payload = read_frame(sock)
        assert payload is not None
        correlation_id, error_code = struct.unpack(">ih", payload[:6])
        assert (correlation_id, error_code) == (11, UNSUPPORTED_VERSION)
    for api_key, version in ((0, 99), (1, 500), (3, -5), (19, 0)):
        with connect(port) as sock:
            sock.sendall(frame(request_header(api_key, version, 12) + b"\x00" * 16))
            assert closed_or_answered(sock), f"{api_key} v{version}: left hanging"


def _garbage_bodies(port: int) -> None:
    rng = random.Random(99)
    for api_key, version in ((0, 7), (0, 9), (1, 11), (3, 9), (19, 5), (32, 4), (2, 7)):
        for size in (0, 3, 64, 4096):
            with connect(port) as sock:
                sock.sendall(frame(request_header(api_key, version, 5) + rng.randbytes(size)))
                assert closed_or_answered(sock), f"{api_key} v{version} +{size}B: left hanging"


def _bad_header_fields(port: int) -> None:
    # client_id claiming more bytes than the frame holds; a frame shorter than a header.
    with connect(port) as sock:
        sock.sendall(frame(struct.pack(">hhih", 18, 0, 1, 500) + b"abc"))
        assert closed_or_answered(sock)
    with connect(port) as sock:
        sock.sendall(frame(b"\x00\x12"))
        assert closed_or_answered(sock)


def _connection_storm(port: int) -> None:
    sockets = [connect(port) for _ in range(100)]
    for i, sock in enumerate(sockets):
        if i % 2:
            sock.sendall(os.urandom(16))
        sock.close()


def _pipelined_good_then_bad(port: int) -> None:
    with connect(port) as sock:
        good = frame(request_header(API_VERSIONS, 0, 1)) + frame(request_header(API_VERSIONS, 0, 2))
        sock.sendall(good + struct.pack(">i", -7))
        assert closed_or_answered(sock)


ATTACKS: dict[str, Callable[[int], None]] = {
    "random-bytes": _random_bytes,
    "truncated-frames": _truncated_frames,
    "absurd-lengths": _absurd_lengths,
    "unknown-api-keys": _unknown_api_keys,
    "unsupported-versions": _unsupported_versions,
    "garbage-bodies": _garbage_bodies,
    "bad-header-fields": _bad_header_fields,
    "connection-storm": _connection_storm,
    "pipelined-good-then-bad": _pipelined_good_then_bad,
}


@pytest.fixture(scope="module")
def bad_input_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("bad-input") / "data").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_bad_input_does_not_disturb_other_clients(
    bad_input_broker: BrokerProcess, attack: str
) -> None:
    broker = bad_input_broker
    topic = f"bad-input-{attack}-{uuid.uuid4().hex[:6]}"
    with StreamingProducer(broker.bootstrap, topic) as stream:
        deadline = time.monotonic() + WAIT_S
        while stream.delivered < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stream.delivered >= 50, "producer made no progress"
        ATTACKS[attack](broker.port)
        before = stream.delivered
        deadline = time.monotonic() + WAIT_S
        while stream.delivered < before + 50 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert broker.is_running(), f"broker died:\n{broker.log_text()[-3000:]}"
    assert stream.errors == []
    assert stream.delivered == stream.sent
    api_versions_ok(broker.port)

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "bad-input-check",
            "enable.auto.commit": False,
        }
    )
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=WAIT_S)
        assert high == stream.sent
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        message = consumer.poll(WAIT_S)
        assert message is not None and message.error() is None and message.value() == b"0"
    finally:
        consumer.close()


def test_requests_before_a_bad_frame_are_answered(bad_input_broker: BrokerProcess) -> None:
    with connect(bad_input_broker.port) as sock:
        good = frame(request_header(API_VERSIONS, 0, 1)) + frame(request_header(API_VERSIONS, 0, 2))
        sock.sendall(good + struct.pack(">i", -7))
        for expected in (1, 2):
            payload = read_frame(sock)
            assert payload is not None and struct.unpack(">i", payload[:4])[0] == expected
        assert read_frame(sock) is None  # then the bad frame closes the connection
