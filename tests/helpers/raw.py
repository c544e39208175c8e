"""A raw Kafka-protocol connection for tests that send requests real clients never would."""

from __future__ import annotations

import socket
import struct

from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response, encode_request

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3


class RawClient:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.correlation = 0

    def call(self, api_key: int, version: int, values: dict) -> object:
        self.correlation += 1
        request = build_request(api_key, version, values)
        self.sock.sendall(encode_request(version, self.correlation, "raw", request))
        size = struct.unpack(">i", self._read(4))[0]
        correlation, response = decode_response(api_key, version, self._read(size))
        assert correlation == self.correlation
        return response

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            data += chunk
        return data
