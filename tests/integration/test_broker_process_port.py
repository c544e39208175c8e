"""The test helper BrokerProcess is not fooled by another server on its port.

free_port picks a port and lets it go; another pytest worker's server (a console, a
ZooKeeper, a broker) may take it before the broker binds it. The helper used to take any
listener on the port for the broker, so the test then talked to the wrong server (a
client reading an HTTP answer as a Kafka frame). Now only the broker's own listener
counts, and a first start whose chosen port was taken moves to another port.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.helpers.broker import BrokerProcess, wait_for_port

pytestmark = pytest.mark.integration


@pytest.fixture
def foreign() -> Iterator[socket.socket]:
    """Another server listening on a loopback port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server


def test_a_port_taken_after_free_port_moves_the_broker(
    tmp_path: Path, foreign: socket.socket
) -> None:
    taken = foreign.getsockname()[1]
    broker = BrokerProcess(tmp_path / "data")
    broker.port = taken  # as if another worker's server bound it after free_port
    broker.start()
    try:
        assert broker.port != taken
        topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=15)
        assert topics.brokers  # a Kafka broker answered, not the other server
        assert "address already in use" in broker.log_text()
    finally:
        broker.stop()


def test_a_port_given_by_the_test_is_not_moved(tmp_path: Path, foreign: socket.socket) -> None:
    taken = foreign.getsockname()[1]
    broker = BrokerProcess(tmp_path / "data", port=taken)
    with pytest.raises(RuntimeError, match="broker failed to start"):
        broker.start(timeout=30)
    assert broker.port == taken


def test_owned_waits_ignore_another_process_listener(foreign: socket.socket) -> None:
    port = foreign.getsockname()[1]
    wait_for_port(port, 1)  # anyone listening will do
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(TimeoutError):  # only the sleeper's own listener would
            wait_for_port(port, 1, sleeper, owned=True)
    finally:
        sleeper.kill()
        sleeper.wait()
