"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh odradek broker subprocess on a free port, stopped after the test."""
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        yield proc
    finally:
        proc.kill() if not proc.is_running() else proc.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module (tests must use their own topic names)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    try:
        yield proc
    finally:
        proc.stop()
