"""The halt of a clustered broker whose log directory failed (Kafka's Exit.halt(1))."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from odradek.broker.dir_failure_halt import halter


def test_halt_logs_kafkas_line_and_exits_with_status_1(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exits: list[int] = []
    halt = halter(tmp_path, exit=exits.append)
    caplog.set_level(logging.INFO, "odradek.broker.dir_failure_halt")
    halt("[Errno 28] No space left on device")
    assert exits == [1]
    [record] = [r for r in caplog.records if r.name == "odradek.broker.dir_failure_halt"]
    assert record.levelname == "CRITICAL"
    assert record.getMessage() == (
        f"Shutdown broker because all log dirs in {tmp_path} have failed "
        "([Errno 28] No space left on device)"
    )
