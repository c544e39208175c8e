"""The coordinator's appends to ``__consumer_offsets`` are acks=all: OffsetsTopic.append
returns only once the ISR has the batch (the high watermark passed it), and raises with
the replication error otherwise. A real replica manager and the real fetch purgatory on a
timing wheel; a follower's fetch is played by ``record_follower_fetch``."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.offsets_topic import OFFSETS_TOPIC, OffsetsAppendError, OffsetsTopic
from odradek.broker.replica_manager import ReplicaManager
from odradek.records.batch import Record, build_batch
from odradek.storage.config import LogConfig
from tests.helpers.purgatory import replicas_and_purgatory

Scenario = Callable[[OffsetsTopic, ReplicaManager], Awaitable[None]]
RECORDS = [(b"k1", b"v1"), (b"k2", b"v2")]


def run(tmp_path: Path, scenario: Scenario, *, timeout_ms: int = 10000) -> None:
    async def main() -> None:
        async with replicas_and_purgatory(tmp_path) as (rm, waiters):
            config = LogConfig.from_properties({"min.insync.replicas": "2"}, base=LogConfig())
            rm.become_leader(OFFSETS_TOPIC, 0, config, leader_epoch=0, isr=[1, 2], replicas=[1, 2])
            settings = {
                "offsets.topic.num.partitions": 1,
                "offsets.commit.timeout.ms": timeout_ms,
            }
            server: Any = types.SimpleNamespace(
                replica_manager=rm,
                wait_for_data=waiters.wait,
                config=types.SimpleNamespace(get=settings.__getitem__),
            )
            await scenario(OffsetsTopic(server), rm)

    asyncio.run(main())


async def started(topic: OffsetsTopic) -> asyncio.Task[int]:
    task = asyncio.ensure_future(topic.append(0, RECORDS))
    await asyncio.sleep(0.05)
    assert not task.done(), "answered before the follower had the records"
    return task


def test_append_returns_once_the_isr_has_the_records(tmp_path: Path) -> None:
    async def scenario(topic: OffsetsTopic, rm: ReplicaManager) -> None:
        task = await started(topic)
        rm.record_follower_fetch(OFFSETS_TOPIC, 0, 2, 1, 0)  # fetched only the first
        await asyncio.sleep(0.05)
        assert not task.done()
        rm.record_follower_fetch(OFFSETS_TOPIC, 0, 2, 2, 0)
        assert await asyncio.wait_for(task, 5) == 1  # the last offset written

    run(tmp_path, scenario)


def test_transactional_append_waits_too(tmp_path: Path) -> None:
    async def scenario(topic: OffsetsTopic, rm: ReplicaManager) -> None:
        task = asyncio.ensure_future(
            topic.append_transactional(0, RECORDS, producer_id=7, producer_epoch=0)
        )
        await asyncio.sleep(0.05)
        assert not task.done()
        rm.record_follower_fetch(OFFSETS_TOPIC, 0, 2, 2, 0)
        assert await asyncio.wait_for(task, 5) == 1

    run(tmp_path, scenario)


def failure(task: asyncio.Future[int]) -> int:
    exc = task.exception()
    assert isinstance(exc, OffsetsAppendError), exc
    return exc.error_code


def test_times_out_after_offsets_commit_timeout_ms(tmp_path: Path) -> None:
    async def scenario(topic: OffsetsTopic, rm: ReplicaManager) -> None:
        task = await started(topic)
        await asyncio.wait([task], timeout=5)  # offsets.commit.timeout.ms is 300 ms here
        assert failure(task) == 7  # REQUEST_TIMED_OUT

    run(tmp_path, scenario, timeout_ms=300)


def test_isr_below_min_insync_before_the_append(tmp_path: Path) -> None:
    async def scenario(topic: OffsetsTopic, rm: ReplicaManager) -> None:
        partition = rm.partition(OFFSETS_TOPIC, 0)
        assert partition is not None
        rm.apply_isr_change(partition, {1})
        with pytest.raises(OffsetsAppendError) as caught:
            await topic.append(0, RECORDS)
        assert caught.value.error_code == 19  # NOT_ENOUGH_REPLICAS
        assert partition.log.log_end_offset == 0  # nothing written

    run(tmp_path, scenario)


def test_isr_shrinking_while_waiting(tmp_path: Path) -> None:
    async def scenario(topic: OffsetsTopic, rm: ReplicaManager) -> None:
        task = await started(topic)
        partition = rm.partition(OFFSETS_TOPIC, 0)
        assert partition is not None
        rm.apply_isr_change(partition, {1})
        await asyncio.wait([task], timeout=5)
        assert failure(task) == 20  # NOT_ENOUGH_REPLICAS_AFTER_APPEND

    run(tmp_path, scenario)


def test_leadership_lost_while_waiting(tmp_path: Path) -> None:
    async def scenario(topic: OffsetsTopic, rm: ReplicaManager) -> None:
        task = await started(topic)
        rm.become_follower(OFFSETS_TOPIC, 0, LogConfig(), leader=2, leader_epoch=1)
        await asyncio.wait([task], timeout=5)
        assert failure(task) == 6  # NOT_LEADER_OR_FOLLOWER

    run(tmp_path, scenario)


def test_a_load_reads_to_the_log_end_not_the_high_watermark(tmp_path: Path) -> None:
    """A leader just elected learned the high watermark one fetch late: records above it
    may be acknowledged commits (Kafka's GroupMetadataManager loads up to the log end)."""

    async def scenario(topic: OffsetsTopic, rm: ReplicaManager) -> None:
        batch = build_batch([Record(key=key, value=value) for key, value in RECORDS])
        assert rm.append(OFFSETS_TOPIC, 0, batch, required_acks=1).error_code == 0
        partition = rm.partition(OFFSETS_TOPIC, 0)
        assert partition is not None and partition.high_watermark == 0
        assert [(key, value) for _offset, key, value in topic.read(0)] == RECORDS

    run(tmp_path, scenario)
