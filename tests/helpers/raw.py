"""A raw Kafka-protocol connection for tests that send requests real clients never would."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response, encode_request

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3


class RawClient:
    """One connection, plaintext or (given ``context``) TLS, sending one request at a time."""

    def __init__(
        self, port: int, host: str = "127.0.0.1", context: ssl.SSLContext | None = None
    ) -> None:
        sock = socket.create_connection((host, port), timeout=10)
        self.sock = context.wrap_socket(sock, server_hostname="localhost") if context else sock
        self.correlation = 0

    def send(self, api_key: int, version: int, values: dict) -> None:
        """Send a request without reading its answer (for requests the broker must refuse)."""
        self.correlation += 1
        request = build_request(api_key, version, values)
        self.sock.sendall(encode_request(version, self.correlation, "raw", request))

    def call(self, api_key: int, version: int, values: dict) -> Any:
        self.send(api_key, version, values)
        size = struct.unpack(">i", self.read(4))[0]
        correlation, response = decode_response(api_key, version, self.read(size))
        assert correlation == self.correlation
        return response

    def receive(self, requests: dict[int, tuple[int, int]]) -> tuple[int, Any]:
        """Read one answer to requests sent together (``requests``: correlation id ->
        api key and version), whichever comes first: (correlation id, response)."""
        size = struct.unpack(">i", self.read(4))[0]
        body = self.read(size)
        api_key, version = requests[struct.unpack_from(">i", body)[0]]
        return decode_response(api_key, version, body)

    def read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            data += chunk
        return data


def advertised_versions(port: int, host: str = "127.0.0.1") -> dict[int, tuple[int, int]]:
    """api_key -> (min, max) as the broker at ``host:port`` answers ApiVersions (v3)."""
    raw = RawClient(port, host)
    try:
        answer = raw.call(18, 3, {"client_software_name": "raw", "client_software_version": "1"})
    finally:
        raw.sock.close()
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
