"""A consumer's Fetch is read first and answered with that read when it holds min_bytes
(Kafka's fetchMessages), instead of checking min_bytes with a read of its own and then
reading the same batches again. ``handle_fetch`` runs over a real replica manager, fetch
sessions and the fetch purgatory on a timing wheel; the rest of the server is stubbed."""

from __future__ import annotations

import asyncio
import datetime
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.fetch_session import FetchManager, FetchSessionCache
from odradek.broker.handlers.fetch import handle_fetch
from odradek.storage.config import LogConfig
from tests.helpers.purgatory import replicas_and_purgatory
from tests.storage.conftest import make_batch

Scenario = Callable[[Any, dict[str, int]], Awaitable[None]]
MAX_WAIT_S = 30.0  # far longer than any scenario may take: an answer must not wait it out


def run(tmp_path: Path, scenario: Scenario) -> None:
    async def main() -> None:
        async with replicas_and_purgatory(tmp_path) as (replicas, waiters):
            replicas.become_leader("t", 0, LogConfig(), leader_epoch=0, isr=[1], replicas=[1])
            calls = {"read": 0, "bytes_available": 0}
            for name in calls:
                real = getattr(replicas, name)

                def counted(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                    calls[_name] += 1
                    return _real(*args, **kw)

                setattr(replicas, name, counted)
            server = types.SimpleNamespace(
                replica_manager=replicas,
                fetch_manager=FetchManager(FetchSessionCache(10)),
                wait_for_data=waiters.wait,
                stats=None,
                client_quotas=types.SimpleNamespace(enabled=lambda key: False),
                request_quota=types.SimpleNamespace(throttle_now=lambda ctx: 0),
                encode_fetch=lambda ctx, error, session, results, throttle_ms=0: results,
            )
            await scenario(server, calls)

    asyncio.run(main())


def fetch(server: Any, offset: int, min_bytes: int = 1, partition_max: int = 1 << 20) -> Any:
    """handle_fetch for a Fetch v4 (no sessions) from a consumer, on partition t-0."""
    request = types.SimpleNamespace(
        replica_id=-1,
        max_wait=datetime.timedelta(seconds=MAX_WAIT_S),
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[
            types.SimpleNamespace(
                topic="t",
                partitions=[
                    types.SimpleNamespace(
                        partition=0, fetch_offset=offset, partition_max_bytes=partition_max
                    )
                ],
            )
        ],
    )
    ctx = types.SimpleNamespace(header=types.SimpleNamespace(api_version=4), authz=None)
    return handle_fetch(server, ctx, request)  # type: ignore[arg-type]


def test_a_fetch_with_data_ready_reads_the_log_once(tmp_path: Path) -> None:
    async def scenario(server: Any, calls: dict[str, int]) -> None:
        server.replica_manager.append("t", 0, make_batch([b"a", b"b"]), required_acks=1)
        ((topic, partition, result),) = await asyncio.wait_for(fetch(server, 0), 5)
        assert (topic, partition, result.error_code) == ("t", 0, ErrorCode.none)
        assert result.size > 0
        assert calls == {"read": 1, "bytes_available": 0}

    run(tmp_path, scenario)


def test_a_fetch_at_the_log_end_waits_for_an_append(tmp_path: Path) -> None:
    async def scenario(server: Any, calls: dict[str, int]) -> None:
        server.replica_manager.append("t", 0, make_batch([b"a"]), required_acks=1)
        waiting = asyncio.create_task(fetch(server, 1))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # parked: the read found nothing past offset 1
        server.replica_manager.append("t", 0, make_batch([b"b"]), required_acks=1)
        ((_, _, result),) = await asyncio.wait_for(waiting, 5)
        assert result.error_code == ErrorCode.none and result.size > 0
        assert calls["read"] == 2  # once before the wait, once after it

    run(tmp_path, scenario)


def test_a_read_under_min_bytes_waits_until_min_bytes_are_there(tmp_path: Path) -> None:
    # The first read finds a batch, but fewer bytes than min_bytes: that is no answer yet.
    async def scenario(server: Any, calls: dict[str, int]) -> None:
        server.replica_manager.append("t", 0, make_batch([b"a"]), required_acks=1)
        waiting = asyncio.create_task(fetch(server, 0, min_bytes=1000))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        server.replica_manager.append("t", 0, make_batch([b"x" * 1000]), required_acks=1)
        ((_, _, result),) = await asyncio.wait_for(waiting, 5)
        assert result.error_code == ErrorCode.none and result.size >= 1000
        assert calls["read"] == 2

    run(tmp_path, scenario)


def test_an_error_is_answered_without_waiting(tmp_path: Path) -> None:
    async def scenario(server: Any, calls: dict[str, int]) -> None:
        server.replica_manager.append("t", 0, make_batch([b"a"]), required_acks=1)
        ((_, _, result),) = await asyncio.wait_for(fetch(server, 99), 5)
        assert result.error_code == ErrorCode.offset_out_of_range

    run(tmp_path, scenario)
