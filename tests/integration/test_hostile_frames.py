"""Hostile request bodies against a live broker: it refuses them and stays up.

Found by fuzzing: a request whose array length field claims billions of elements used to
make the protocol decoder reserve that much memory and abort the broker process.
"""

from __future__ import annotations

import random
import socket
import struct

import pytest

from odradek.protocol.versions import SUPPORTED, is_flexible
from tests.helpers.broker import BrokerProcess
from tests.protocol.test_codec import HOSTILE_ARRAY_LENGTH

pytestmark = pytest.mark.integration

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 99, -1)


def _send_and_drain(port: int, payload: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        sock.settimeout(0.3)  # a request that decoded is answered and stays open
        try:
            while sock.recv(65536):
                pass
        except (TimeoutError, ConnectionError):
            pass


def _answers_api_versions(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
        size = struct.unpack(">i", sock.recv(4))[0]
        body = b""
        while len(body) < size:
            body += sock.recv(size - len(body))
        return struct.unpack(">i", body[:4])[0] == 99


def test_hostile_bodies_do_not_kill_the_broker(broker: BrokerProcess) -> None:
    _send_and_drain(broker.port, HOSTILE_ARRAY_LENGTH)
    assert broker.is_running()
    rng = random.Random(20261122)
    pairs = [(k, v) for k, (low, high) in SUPPORTED.items() for v in range(low, high + 1)]
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as keeper:
        for _ in range(150):
            api_key, version = rng.choice(pairs)
            header = struct.pack(">hhih", api_key, version, 1, -1)
            if is_flexible(api_key, version):
                header += b"\x00"
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
            if rng.random() < 0.5:
                body = (
                    rng.choice([b"\xff\xff\xff\x7f", b"\x7f\xff\xff\xff", b"\xff\xff\xff\x0f"])
                    + body
                )
            _send_and_drain(broker.port, header + body)
        assert broker.is_running()
        # A connection opened before the storm still works, and so does a new one.
        keeper.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
        assert struct.unpack(">i", keeper.recv(8)[4:8])[0] == 99
    assert _answers_api_versions(broker.port)
