"""max.connections and max.connections.per.ip on a live broker, with a real client."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.helpers.broker import BrokerProcess
from tests.helpers.hostile import Pinger

pytestmark = pytest.mark.integration


def _closed_by_broker(sock: socket.socket, timeout: float = 5) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _two_answered(port: int) -> tuple[Pinger, Pinger]:
    """Two connections, both answered. wait_for_port's probe connection counts until the
    broker reads its EOF, which a loaded machine may delay: while it counts, the second is
    closed, so try again (bounded) rather than guess how long the broker takes."""
    deadline = time.monotonic() + 30
    while True:
        pair = (Pinger(port), Pinger(port))
        try:
            for pinger in pair:
                pinger.round_trip()
            return pair
        except (AssertionError, OSError):
            for pinger in pair:
                pinger.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_per_ip_limit_and_its_override(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        overrides={
            "max.connections.per.ip": "0",
            "max.connections.per.ip.overrides": "127.0.0.1:2",
        },
    ).start()
    try:
        first, second = _two_answered(broker.port)
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as third:
            assert _closed_by_broker(third)
        first.close()
        time.sleep(0.3)
        # A real client gets in once a slot is free.
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert list(metadata.brokers) == [0]
        second.close()
        assert "max.connections.per.ip (2) reached" in broker.log_text()
    finally:
        broker.stop()


def test_at_max_connections_the_next_waits_for_a_free_slot(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides={"max.connections": "1"}).start()
    try:
        time.sleep(0.3)
        holder = Pinger(broker.port)
        holder.round_trip()
        waiting = Pinger(broker.port, timeout=0.5)  # the kernel's backlog takes it
        with pytest.raises(TimeoutError):
            waiting.round_trip()  # not accepted yet, so not answered
        holder.close()
        waiting.sock.settimeout(10)
        response_size = int.from_bytes(waiting.sock.recv(4), "big")
        assert response_size > 0  # accepted and answered once the first one left
        waiting.close()
    finally:
        broker.stop()
