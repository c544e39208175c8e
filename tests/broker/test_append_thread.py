"""Large appends on the append thread (ReplicaManager.append_or_offload).

Checked over a real replica manager and real logs: appends keep their submission order
per partition (small ones queue behind large ones), idempotent producer sequences are
validated in that order, the high watermark moves only once the bytes are written, a
leadership move while an append waits answers NOT_LEADER_OR_FOLLOWER, and a write
failure takes the log directory offline as on the event loop. The threshold is lowered
so that small test batches take the thread.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from odradek.broker.replica_manager import (
    KAFKA_STORAGE_ERROR,
    NOT_LEADER_OR_FOLLOWER,
    AppendResult,
    ReplicaManager,
)
from odradek.records.batch import decode_batches
from odradek.storage import segment as segment_module
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.storage.conftest import make_batch

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
BIG = 1000  # bytes: at least this goes to the thread in these tests


def run(tmp_path: Path, scenario: Callable[[ReplicaManager], Awaitable[None]]) -> list[str]:
    """Run ``scenario`` on a fresh loop; returns the partitions the purgatory was told of."""
    notified: list[str] = []

    async def main() -> None:
        manager = LogManager(tmp_path, LogConfig())
        manager.startup()
        rm = ReplicaManager(0, manager, on_data_appended=lambda t, i: notified.append(f"{t}-{i}"))
        rm.offload_append_bytes = BIG
        rm.become_leader("t", 0, LogConfig())
        try:
            await scenario(rm)
        finally:
            rm.stop_append_thread()
            manager.shutdown()

    asyncio.run(main())
    return notified


async def settle(result: AppendResult | asyncio.Future[AppendResult]) -> AppendResult:
    return result if isinstance(result, AppendResult) else await result


def offload(rm: ReplicaManager, value: bytes) -> AppendResult | asyncio.Future[AppendResult]:
    return rm.append_or_offload("t", 0, make_batch([value]), required_acks=1)


def log_bytes(rm: ReplicaManager) -> bytes:
    read = rm.read("t", 0, 0, 1 << 24)
    return b"".join(region.read() for region in read.regions)


def values_in_log(rm: ReplicaManager) -> list[bytes | None]:
    return [record.value for batch in decode_batches(log_bytes(rm)) for record in batch.records]


def test_small_appends_queue_behind_large_ones_in_order(tmp_path: Path) -> None:
    async def scenario(rm: ReplicaManager) -> None:
        values = [(b"L%03d" % i) * 300 if i % 3 == 0 else b"s%03d" % i for i in range(30)]
        submitted = [
            rm.append_or_offload("t", 0, make_batch([v]), required_acks=1) for v in values
        ]
        # The first is large: it and everything after it, small or not, took the thread.
        assert all(isinstance(s, asyncio.Future) for s in submitted)
        results = [await settle(s) for s in submitted]
        assert [r.error_code for r in results] == [0] * 30
        assert [r.base_offset for r in results] == list(range(30))
        assert values_in_log(rm) == values
        partition = rm.partition("t", 0)
        assert partition is not None and partition.high_watermark == 30
        # Nothing queued any more: a small append runs inline again, a large one does not.
        small = rm.append_or_offload("t", 0, make_batch([b"x"]), required_acks=1)
        assert isinstance(small, AppendResult) and small.base_offset == 30
        large = rm.append_or_offload("t", 0, make_batch([b"y" * BIG]), required_acks=1)
        assert isinstance(large, asyncio.Future) and (await large).base_offset == 31

    notified = run(tmp_path, scenario)
    assert len(notified) == 32  # the purgatory hears of every append


def test_idempotent_sequences_are_checked_in_submission_order(tmp_path: Path) -> None:
    async def scenario(rm: ReplicaManager) -> None:
        def batch(seq: int, size: int) -> bytearray:
            return make_batch(
                [bytes([65 + seq]) * size], producer_id=7, producer_epoch=0, base_sequence=seq
            )

        submitted = [
            rm.append_or_offload("t", 0, batch(seq, BIG if seq % 2 else 10), required_acks=-1)
            for seq in range(6)
        ]
        results = [await settle(s) for s in submitted]
        assert [(r.error_code, r.base_offset) for r in results] == [(0, i) for i in range(6)]
        # A retry of sequence 4 is a duplicate: the original offset, nothing written.
        retry = await settle(rm.append_or_offload("t", 0, batch(4, BIG), required_acks=-1))
        assert (retry.error_code, retry.base_offset) == (0, 4)
        gap = await settle(rm.append_or_offload("t", 0, batch(9, BIG), required_acks=-1))
        assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert rm.partition("t", 0).log.log_end_offset == 6  # type: ignore[union-attr]

    run(tmp_path, scenario)


def test_high_watermark_moves_only_after_the_write(tmp_path: Path) -> None:
    async def scenario(rm: ReplicaManager) -> None:
        partition = rm.partition("t", 0)
        assert partition is not None
        with partition.log.lock:  # the thread cannot write until we let go
            pending = rm.append_or_offload("t", 0, make_batch([b"z" * BIG]), required_acks=1)
            assert isinstance(pending, asyncio.Future)
            await asyncio.sleep(0.05)
            assert not pending.done()
            assert partition.high_watermark == 0 and partition.log.log_end_offset == 0
        result = await pending
        assert result.error_code == 0
        assert partition.high_watermark == 1 and partition.log.log_end_offset == 1

    run(tmp_path, scenario)


def test_leadership_moved_while_queued_answers_not_leader(tmp_path: Path) -> None:
    async def scenario(rm: ReplicaManager) -> None:
        partition = rm.partition("t", 0)
        assert partition is not None
        with partition.log.lock:
            pending = rm.append_or_offload("t", 0, make_batch([b"z" * BIG]), required_acks=1)
            await asyncio.sleep(0.05)
            rm.become_follower("t", 0, LogConfig(), leader=1, leader_epoch=1)
        result = await settle(pending)
        assert result.error_code == NOT_LEADER_OR_FOLLOWER
        assert partition.log.log_end_offset == 0  # nothing was written as a leader
        # A new leader epoch on this broker: an append checked under the old one fails.
        rm.become_leader("t", 0, LogConfig(), leader_epoch=2)
        with partition.log.lock:
            pending = rm.append_or_offload("t", 0, make_batch([b"z" * BIG]), required_acks=1)
            await asyncio.sleep(0.05)
            rm.become_leader("t", 0, LogConfig(), leader_epoch=3)
        assert (await settle(pending)).error_code == NOT_LEADER_OR_FOLLOWER
        again = await settle(offload(rm, b"z" * BIG))
        assert (again.error_code, again.base_offset) == (0, 0)

    run(tmp_path, scenario)


def test_write_failure_on_the_thread_takes_the_dir_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(rm: ReplicaManager) -> None:
        def full(*_args: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(segment_module.os, "write", full)
        result = await settle(offload(rm, b"q" * BIG))
        monkeypatch.undo()
        assert result.error_code == KAFKA_STORAGE_ERROR
        assert rm.log_manager.dir_failure.offline
        small = rm.append_or_offload("t", 0, make_batch([b"q"]), required_acks=1)
        assert isinstance(small, AppendResult) and small.error_code == KAFKA_STORAGE_ERROR

    run(tmp_path, scenario)


def test_a_corrupt_batch_is_refused_on_the_thread(tmp_path: Path) -> None:
    async def scenario(rm: ReplicaManager) -> None:
        batch = make_batch([b"c" * BIG])
        batch[-1] ^= 0xFF  # the CRC no longer matches
        result = await settle(rm.append_or_offload("t", 0, batch, required_acks=1))
        assert result.error_code == 2  # CORRUPT_MESSAGE
        ok = await settle(offload(rm, b"c" * BIG))
        assert (ok.error_code, ok.base_offset) == (0, 0)
        assert [b.base_offset for b in decode_batches(log_bytes(rm))] == [0]

    run(tmp_path, scenario)


def test_stop_waits_for_queued_appends(tmp_path: Path) -> None:
    async def scenario(rm: ReplicaManager) -> None:
        futures = [
            rm.append_or_offload("t", 0, make_batch([b"w" * BIG]), required_acks=0)
            for _ in range(20)
        ]
        rm.stop_append_thread()  # blocks until the thread has written all twenty
        assert rm.partition("t", 0).log.log_end_offset == 20  # type: ignore[union-attr]
        assert [(await f).base_offset for f in futures] == list(range(20))  # type: ignore[misc]

    run(tmp_path, scenario)
