"""Graceful shutdown: SIGTERM answers the requests in flight, then marks the logs clean.

A consumer's long-poll Fetch is waiting in the purgatory when SIGTERM arrives; it must
get its answer (not a dropped connection), the broker must exit 0 and leave the
clean-shutdown marker, and the next start must load without recovery.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response, encode_request
from odradek.storage.log_manager import CLEAN_SHUTDOWN_FILE
from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import METADATA, RawClient

pytestmark = pytest.mark.integration


def test_sigterm_finishes_a_waiting_fetch_and_marks_the_log_clean(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    client = RawClient(broker.port)
    client.call(METADATA, 9, {"topics": [{"name": "quiet"}], "allow_auto_topic_creation": True})

    # A fetch at the end of an empty partition that would wait 20 s for one byte.
    fetch = build_request(
        1,
        11,
        {
            "max_wait": 20000,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "quiet",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
    )
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    sock.sendall(encode_request(11, 77, "waiter", fetch))
    answer: dict[str, object] = {}

    def read_answer() -> None:
        try:
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            body = sock.recv(size, socket.MSG_WAITALL)
            answer["response"] = decode_response(1, 11, body)
        except Exception as exc:
            answer["error"] = exc

    reader = threading.Thread(target=read_answer)
    reader.start()
    time.sleep(1.0)  # the fetch is parked in the purgatory now
    started = time.monotonic()
    assert broker.stop(timeout=30) == 0
    reader.join(10)
    took = time.monotonic() - started
    sock.close()
    client.sock.close()

    assert "error" not in answer, answer.get("error")
    correlation_id, response = answer["response"]  # type: ignore[misc]
    assert correlation_id == 77
    assert response.responses[0].partitions[0].error_code == 0  # type: ignore[attr-defined]
    assert took < 15, "shutdown waited for the whole max_wait"
    assert (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).exists()

    broker.start()
    try:
        deadline = time.monotonic() + 10
        while "after a clean shutdown" not in broker.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "after a clean shutdown" in broker.log_text()
        # The marker is consumed at start-up, so a crash from now on counts as unclean.
        assert not (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).exists()
    finally:
        broker.stop()
