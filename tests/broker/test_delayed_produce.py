"""acks=all waiting in the purgatory (Kafka's DelayedProduce): completes when the high
watermark passes the batch, times out with REQUEST_TIMED_OUT, and answers
NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas. The
produce handler's waiting step runs over a real replica manager and the real fetch
purgatory on a timing wheel."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.produce import _await_replication
from odradek.broker.replica_manager import Partition
from odradek.storage.config import LogConfig
from tests.helpers.purgatory import replicas_and_purgatory
from tests.storage.conftest import make_batch

Scenario = Callable[[Any], Awaitable[None]]


def run(tmp_path: Path, scenario: Scenario) -> None:
    """Run ``scenario(server)`` on a fresh event loop with a real timing wheel."""

    async def main() -> None:
        async with replicas_and_purgatory(tmp_path) as (rm, waiters):
            config = LogConfig.from_properties({"min.insync.replicas": "2"}, base=LogConfig())
            rm.become_leader("t", 0, config, leader_epoch=0, isr=[1, 2], replicas=[1, 2])
            await scenario(types.SimpleNamespace(replica_manager=rm, wait_for_data=waiters.wait))

    asyncio.run(main())


def _pending(server: Any) -> tuple[list[tuple[str, int, dict[str, Any], int]], dict[str, Any]]:
    result = server.replica_manager.append("t", 0, make_batch([b"x"]), required_acks=-1)
    assert result.error_code == 0
    entry: dict[str, Any] = {"error_code": ErrorCode.none}
    return [("t", 0, entry, result.last_offset + 1)], entry


def test_completes_when_the_follower_has_the_batch(tmp_path: Path) -> None:
    async def scenario(server: Any) -> None:
        pending, entry = _pending(server)
        waiting = asyncio.create_task(_await_replication(server, pending, 10000))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        server.replica_manager.record_follower_fetch("t", 0, 2, 1, 0)
        await asyncio.wait_for(waiting, 5)
        assert entry["error_code"] == ErrorCode.none

    run(tmp_path, scenario)


def test_times_out_with_request_timed_out(tmp_path: Path) -> None:
    async def scenario(server: Any) -> None:
        pending, entry = _pending(server)
        await asyncio.wait_for(_await_replication(server, pending, 200), 5)
        assert entry["error_code"] == ErrorCode.request_timed_out

    run(tmp_path, scenario)


def test_isr_shrinking_below_min_insync_while_waiting(tmp_path: Path) -> None:
    async def scenario(server: Any) -> None:
        pending, entry = _pending(server)
        waiting = asyncio.create_task(_await_replication(server, pending, 10000))
        await asyncio.sleep(0.05)
        partition: Partition = server.replica_manager.partition("t", 0)
        server.replica_manager.apply_isr_change(partition, {1})  # the follower left the ISR
        await asyncio.wait_for(waiting, 5)
        assert entry["error_code"] == ErrorCode.not_enough_replicas_after_append

    run(tmp_path, scenario)


def test_losing_leadership_while_waiting(tmp_path: Path) -> None:
    async def scenario(server: Any) -> None:
        pending, entry = _pending(server)
        waiting = asyncio.create_task(_await_replication(server, pending, 10000))
        await asyncio.sleep(0.05)
        server.replica_manager.become_follower("t", 0, LogConfig(), leader=2, leader_epoch=1)
        await asyncio.wait_for(waiting, 5)
        assert entry["error_code"] == ErrorCode.not_leader_or_follower

    run(tmp_path, scenario)
