"""Fixtures shared by several integration test modules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess, free_port

# A second loopback address: the two listeners differ in host and port.
OTHER_HOST = "127.0.0.2"


@pytest.fixture
def two_listeners(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int]]:
    """A broker with PLAINTEXT on 127.0.0.1 and INTERNAL on ``OTHER_HOST``: (broker, the
    INTERNAL port)."""
    first, second = free_port(), free_port()
    broker = BrokerProcess(
        tmp_path / "data",
        port=first,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{first},INTERNAL://{OTHER_HOST}:{second}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        },
    ).start()
    try:
        yield broker, second
    finally:
        broker.stop()
