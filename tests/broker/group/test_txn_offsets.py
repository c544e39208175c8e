"""Transactional offset commits (KIP-98 / KIP-447) in the group coordinator: member and
generation checks, pending until the marker, commit applies and abort drops, restore."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from odradek.broker.group.offsets import OffsetCommitRequestData
from odradek.broker.group.txn_offsets import TxnOffsetCommits
from tests.broker.group.harness import AppendFailed, FakeOffsetsLog, Harness, run

G = "txn-group"


class TxnLog(FakeOffsetsLog):
    """The fake offsets log plus transactional appends (kept apart, like pending data)."""

    def __init__(self) -> None:
        super().__init__()
        self.txn_records: list[tuple[int, int, bytes, bytes | None]] = []

    async def append_transactional(
        self,
        partition: int,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        producer_id: int,
        producer_epoch: int,
    ) -> int:
        last = await self.append(partition, records)
        first = last - len(records) + 1
        for i, (key, value) in enumerate(records):
            self.txn_records.append((producer_id, first + i, key, value))
        return last


def data(offset: int) -> OffsetCommitRequestData:
    return OffsetCommitRequestData(offset=offset)


@run
async def test_member_checks_pending_commit_and_abort() -> None:
    log = TxnLog()
    h = await Harness(log).start()
    (a, _b), gen = await h.stable_group(G, 2)
    txn = TxnOffsetCommits(h.coordinator.registry)

    async def commit(pid: int, member: str, generation: int, instance: str | None = None):
        results = await txn.commit(
            group_id=G, producer_id=pid, producer_epoch=0, generation_id=generation,
            member_id=member, group_instance_id=instance, offsets={("t", 0): data(pid)},
        )  # fmt: skip
        return results[("t", 0)]

    assert await commit(1, a, gen + 1) is ErrorCode.illegal_generation
    assert await commit(1, "stranger", gen) is ErrorCode.unknown_member_id
    assert await commit(1, a, gen) is ErrorCode.none
    assert await commit(2, a, gen) is ErrorCode.none
    assert txn.unstable_partitions(G, [("t", 0), ("t", 1)]) == {("t", 0)}
    _, offsets = h.coordinator.fetch_offsets(group_id=G, partitions=[("t", 0)])
    assert offsets[("t", 0)] is None  # pending: not committed yet
    partition = h.coordinator.partition_for(G)
    txn.complete(partition, 2, commit=False)
    txn.complete(partition, 1, commit=True)
    _, offsets = h.coordinator.fetch_offsets(group_id=G, partitions=[("t", 0)])
    assert offsets[("t", 0)].offset == 1
    assert txn.unstable_partitions(G, None) == set()
    # A marker for another partition of __consumer_offsets changes nothing here.
    assert await commit(3, a, gen) is ErrorCode.none
    txn.complete(partition + 1, 3, commit=True)
    assert txn.unstable_partitions(G, None) == {("t", 0)}


@run
async def test_unknown_group_and_restore() -> None:
    log = TxnLog()
    h = await Harness(log).start()
    txn = TxnOffsetCommits(h.coordinator.registry)
    results = await txn.commit(
        group_id="never-seen", producer_id=5, producer_epoch=0, generation_id=4,
        member_id="m", group_instance_id=None, offsets={("t", 0): data(9)},
    )  # fmt: skip
    assert results == {("t", 0): ErrorCode.illegal_generation}
    results = await txn.commit(
        group_id=G, producer_id=5, producer_epoch=0, generation_id=-1,
        member_id="", group_instance_id=None, offsets={("t", 0): data(9)},
    )  # fmt: skip
    assert results == {("t", 0): ErrorCode.none}
    # A new coordinator (after a restart) gets the still-open records back as pending.
    fresh = TxnOffsetCommits(h.coordinator.registry)
    partition = h.coordinator.partition_for(G)
    fresh.restore(partition, {5: [(off, k, v) for _pid, off, k, v in log.txn_records]})
    assert fresh.unstable_partitions(G, None) == {("t", 0)}
    fresh.complete(partition, 5, commit=True)
    _, offsets = h.coordinator.fetch_offsets(group_id=G, partitions=[("t", 0)])
    assert offsets[("t", 0)].offset == 9


@run
async def test_replication_failures_map_as_kafka_and_leave_nothing_pending() -> None:
    """TxnOffsetCommit's append is acks=all: what replication answers maps to the errors
    the transactional producer acts on (it finds the coordinator again and retries)."""
    log = TxnLog()
    h = await Harness(log).start()
    txn = TxnOffsetCommits(h.coordinator.registry)
    cases = [
        (19, ErrorCode.coordinator_not_available),  # NOT_ENOUGH_REPLICAS
        (20, ErrorCode.coordinator_not_available),  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
        (7, ErrorCode.coordinator_not_available),  # REQUEST_TIMED_OUT
        (6, ErrorCode.not_coordinator),  # NOT_LEADER_OR_FOLLOWER
        (56, ErrorCode.not_coordinator),  # KAFKA_STORAGE_ERROR
    ]
    for append_error, expected in cases:
        log.fail_next.append(AppendFailed(append_error))
        results = await txn.commit(
            group_id=G, producer_id=7, producer_epoch=0, generation_id=-1,
            member_id="", group_instance_id=None, offsets={("t", 0): data(3)},
        )  # fmt: skip
        assert results == {("t", 0): expected}, append_error
    assert txn.unstable_partitions(G, None) == set()
