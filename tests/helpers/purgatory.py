"""A real replica manager over a real log manager, whose appends wake a real fetch
purgatory on a running timing wheel: what the handlers that wait (delayed fetches,
acks=all, offset commits) run over in unit tests, without a server around them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from odradek.broker.delayed_fetch import FetchWaiters
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.timing_wheel import Timer, TimerDriver
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager


@contextlib.asynccontextmanager
async def replicas_and_purgatory(
    data_dir: Path,
) -> AsyncIterator[tuple[ReplicaManager, FetchWaiters]]:
    """Broker 1's replica manager (logs in ``data_dir``, ISR changes applied at once) and
    the purgatory its appends notify; everything is stopped on exit."""
    manager = LogManager(data_dir, LogConfig())
    manager.startup()
    timer = Timer()
    waiters = FetchWaiters(timer)
    driver = TimerDriver(timer)
    driver.start()
    replicas = ReplicaManager(1, manager, on_data_appended=waiters.notify)
    replicas.isr_writer = lambda p, isr, _reason: replicas.apply_isr_change(p, isr)
    try:
        yield replicas, waiters
    finally:
        waiters.close()
        driver.stop()
        await driver.wait_stopped()
        manager.shutdown()
