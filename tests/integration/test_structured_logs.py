"""A real broker with ``log.format=json`` and ``log.slow.request.threshold.ms``: every line
of its output is one JSON object; slow requests and request errors name the API, the
client and the listener."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.helpers.broker import BrokerProcess
from tests.helpers.cluster import wait_for

pytestmark = pytest.mark.integration


def _entries(proc: BrokerProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.log_text().splitlines() if line.strip()]


def _garbage_produce(port: int) -> None:
    """A Produce v9 request whose header parses and whose body does not."""
    client_id = b"evil-client"
    header = struct.pack(">hhih", 0, 9, 77, len(client_id)) + client_id + b"\x00"
    body = b"\xff" * 12
    frame = header + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        sock.settimeout(10)
        assert sock.recv(100) == b""  # closed by the broker


@pytest.mark.parametrize("threshold", ["0", "600000"])
def test_json_log_lines_and_slow_requests(tmp_path: Path, threshold: str) -> None:
    proc = BrokerProcess(
        tmp_path / "data",
        overrides={"log.format": "json", "log.slow.request.threshold.ms": threshold},
    ).start()
    try:
        producer = Producer({"bootstrap.servers": proc.bootstrap, "client.id": "json-writer"})
        for i in range(20):
            producer.produce("structured", value=b"%d" % i)
        assert producer.flush(30) == 0
        _garbage_produce(proc.port)
        wait_for(
            lambda: any("evil-client" in e["message"] for e in _entries(proc)),
            20,
            "the malformed request's log line",
        )
    finally:
        assert proc.stop() == 0
    entries = _entries(proc)  # every line parses, or this fails
    assert len(entries) > 3
    for entry in entries:
        assert {"time", "level", "logger", "message"} <= set(entry), entry
    assert any(e["message"] == "shut down cleanly" for e in entries)

    # The request that did not parse: API, client id and listener in its line.
    (closed,) = [e for e in entries if "evil-client" in e["message"]]
    assert closed["level"] == "WARNING"
    assert "api Produce v9" in closed["message"] and "correlation id 77" in closed["message"]
    assert "listener PLAINTEXT" in closed["message"]

    slow = [e for e in entries if e["logger"] == "kafka.request.logger"]
    if threshold != "0":
        assert slow == []
        return
    produces = [e for e in slow if e["api"] == "Produce"]
    assert produces, slow
    entry = produces[0]
    assert entry["client_id"] == "json-writer" and entry["listener"] == "PLAINTEXT"
    assert isinstance(entry["api_version"], int)
    assert 0 <= entry["queue_time_ms"] <= entry["total_time_ms"]
    assert {e["api"] for e in slow} >= {"ApiVersions", "Metadata", "Produce"}
