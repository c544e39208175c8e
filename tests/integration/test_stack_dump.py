"""``kill -USR1`` / ``kill -USR2`` print a running broker's thread and task stacks
(docs/operations.md, Logs): the evidence a hung broker leaves before it is killed."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.integration


def _wait_for_log(broker: BrokerProcess, text: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = broker.log_text()
        if text in log:
            return log
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in the broker log:\n{broker.log_text()[-3000:]}")


def test_signals_dump_threads_and_tasks_and_the_broker_serves_on(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGUSR1)
        threads = _wait_for_log(broker, "Current thread")
        assert "(most recent call first)" in threads
        broker.proc.send_signal(signal.SIGUSR2)
        tasks = _wait_for_log(broker, "--- end of tasks ---")
        assert "asyncio tasks ---" in tasks
        assert "Stack for <Task" in tasks  # at least the serving task, with its frames
        # What start-up loaded is frozen (server.freeze_start_up_heap): a full collection
        # scans far fewer objects than the process holds, not all of them each time.
        gc_line = re.search(r"gc: (\d+) objects frozen, (\d+) in the oldest generation", tasks)
        assert gc_line is not None, tasks[-2000:]
        frozen, oldest = int(gc_line[1]), int(gc_line[2])
        assert frozen > 20_000
        assert oldest < frozen / 4
        assert broker.is_running()
    finally:
        assert broker.stop() == 0
