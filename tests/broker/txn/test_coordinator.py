"""The transaction coordinator's state machine with an in-memory state log and marker
writer: valid and invalid transitions and Kafka's error codes, reload, timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.txn.coordinator import TransactionCoordinator, TxnConfig
from odradek.broker.txn.log_records import decode_key, decode_value, encode_key, encode_value
from odradek.broker.txn.state import (
    IllegalTransitionError,
    TransactionMetadata,
    TxnSnapshot,
    TxnState,
    check_transition,
)

PARTITIONS = 3


class MemoryLog:
    def __init__(self) -> None:
        self.num_partitions = PARTITIONS
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail_with: int | None = None

    def leader_epoch(self, partition: int) -> int:
        return 4

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        if self.fail_with is not None:
            exc = Exception("append failed")
            exc.error_code = self.fail_with  # type: ignore[attr-defined]
            raise exc
        log = self.records.setdefault(partition, [])
        log.extend(records)
        return len(log) - 1

    def read(self, partition: int) -> Iterable[tuple[int, bytes, bytes | None]]:
        for offset, (key, value) in enumerate(self.records.get(partition, [])):
            yield offset, key, value


class MemoryMarkers:
    def __init__(self) -> None:
        self.written: list[tuple[int, int, int, bool, frozenset[tuple[str, int]]]] = []

    async def write_markers(self, *, producer_id, producer_epoch, coordinator_epoch, commit,
                            partitions):  # fmt: skip
        parts = frozenset(partitions)
        self.written.append((producer_id, producer_epoch, coordinator_epoch, commit, parts))
        return dict.fromkeys(parts, 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make(log: MemoryLog | None = None, markers: MemoryMarkers | None = None, clock=None):
    ids = iter(range(1000, 2000))
    return TransactionCoordinator(
        log or MemoryLog(),
        markers or MemoryMarkers(),
        lambda: next(ids),
        TxnConfig(max_timeout_ms=60_000, id_expiration_ms=100_000),
        clock=clock or Clock(),
    )


async def loaded(coordinator: TransactionCoordinator) -> TransactionCoordinator:
    for p in range(PARTITIONS):
        await coordinator.load_partition(p)
    return coordinator


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def run(coro):
    return asyncio.run(coro)


def test_valid_and_invalid_transitions() -> None:
    check_transition(TxnState.ONGOING, TxnState.PREPARE_COMMIT)
    check_transition(TxnState.PREPARE_EPOCH_FENCE, TxnState.PREPARE_ABORT)
    check_transition(TxnState.COMPLETE_ABORT, TxnState.ONGOING)
    for current, target in [
        (TxnState.EMPTY, TxnState.PREPARE_COMMIT),
        (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_ABORT),
        (TxnState.PREPARE_ABORT, TxnState.ONGOING),
        (TxnState.COMPLETE_COMMIT, TxnState.PREPARE_EPOCH_FENCE),
        (TxnState.ONGOING, TxnState.DEAD),
    ]:
        with pytest.raises(IllegalTransitionError):
            check_transition(current, target)


def test_pending_transition_blocks_another() -> None:
    snap = TxnSnapshot(1, 0, 1000, TxnState.ONGOING, frozenset(), 0, 0)
    meta = TransactionMetadata("t", snap)
    meta.prepare(TxnState.PREPARE_COMMIT)
    with pytest.raises(IllegalTransitionError):
        meta.prepare(TxnState.PREPARE_ABORT)


def test_records_round_trip_in_kafka_format() -> None:
    snap = TxnSnapshot(77, 3, 60000, TxnState.ONGOING, frozenset({("a", 0), ("a", 2), ("b", 1)}),
                       123, 456)  # fmt: skip
    assert decode_key(encode_key("my-id")) == "my-id"
    assert encode_key("ab") == b"\x00\x00\x00\x02ab"
    value = encode_value(snap)
    # version 0 | pid | epoch | timeout | status 1 | 2 topics ...
    assert (
        value[:17]
        == b"\x00\x00"
        + (77).to_bytes(8, "big")
        + b"\x00\x03"
        + (60000).to_bytes(4, "big")
        + b"\x01"
    )
    back = decode_value(value)
    assert back.partitions == snap.partitions and back.state is TxnState.ONGOING
    assert (back.start_timestamp_ms, back.last_update_timestamp_ms) == (123, 456)


def test_init_commit_flow_and_errors() -> None:
    async def scenario() -> None:
        markers = MemoryMarkers()
        c = await loaded(make(markers=markers))
        r = await c.init_producer_id("t", 10_000)
        assert (r.error, r.producer_epoch) == (ErrorCode.none, 0)
        pid = r.producer_id
        # EndTxn with nothing open: INVALID_TXN_STATE.
        assert await c.end_txn("t", pid, 0, True) is ErrorCode.invalid_txn_state
        assert await c.add_partitions("t", pid + 1, 0, [("x", 0)]) is (
            ErrorCode.invalid_producer_id_mapping
        )
        assert await c.add_partitions("t", pid, 1, [("x", 0)]) is ErrorCode.producer_fenced
        assert await c.add_partitions("t", pid, 0, [("x", 0), ("x", 1)]) is ErrorCode.none
        assert c.transaction("t").state is TxnState.ONGOING
        assert await c.end_txn("t", pid, 0, True) is ErrorCode.none
        assert c.transaction("t").state is TxnState.PREPARE_COMMIT
        # While prepared: AddPartitions and a same-direction retry are CONCURRENT, the
        # opposite direction INVALID_TXN_STATE.
        assert await c.end_txn("t", pid, 0, False) is ErrorCode.invalid_txn_state
        assert await c.add_partitions("t", pid, 0, [("x", 2)]) is (
            ErrorCode.concurrent_transactions
        )
        await settle()
        assert c.transaction("t").state is TxnState.COMPLETE_COMMIT
        assert markers.written == [(pid, 0, 4, True, frozenset({("x", 0), ("x", 1)}))]
        assert await c.end_txn("t", pid, 0, True) is ErrorCode.none  # retry after completion
        assert await c.end_txn("t", pid, 0, False) is ErrorCode.invalid_txn_state

    run(scenario())


def test_timeout_limits_and_loading() -> None:
    async def scenario() -> None:
        c = make()
        assert (await c.init_producer_id("t", 1000)).error is ErrorCode.not_coordinator
        c = await loaded(make())
        assert (await c.init_producer_id("t", 60_001)).error is (
            ErrorCode.invalid_transaction_timeout
        )
        assert (await c.init_producer_id("t", 0)).error is ErrorCode.invalid_transaction_timeout
        assert (await c.init_producer_id("", 1000)).error is ErrorCode.invalid_request

    run(scenario())


def test_new_instance_fences_and_aborts_ongoing() -> None:
    async def scenario() -> None:
        markers = MemoryMarkers()
        c = await loaded(make(markers=markers))
        first = await c.init_producer_id("t", 10_000)
        pid = first.producer_id
        await c.add_partitions("t", pid, 0, [("x", 0)])
        r = await c.init_producer_id("t", 10_000)
        assert r.error is ErrorCode.concurrent_transactions  # abort first, then retry
        await settle()
        assert markers.written[-1] == (pid, 1, 4, False, frozenset({("x", 0)}))
        r = await c.init_producer_id("t", 10_000)
        assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, 2)
        # The zombie (epoch 0) is fenced everywhere.
        assert await c.add_partitions("t", pid, 0, [("x", 0)]) is ErrorCode.producer_fenced
        assert await c.end_txn("t", pid, 0, True) is ErrorCode.producer_fenced
        # KIP-360: the current producer asks for a bump with its id and epoch.
        r = await c.init_producer_id("t", 10_000, pid, 2)
        assert (r.error, r.producer_epoch) == (ErrorCode.none, 3)
        r = await c.init_producer_id("t", 10_000, pid, 1)
        assert r.error is ErrorCode.producer_fenced

    run(scenario())


def test_reload_finishes_prepared_and_keeps_state() -> None:
    async def scenario() -> None:
        log, markers = MemoryLog(), MemoryMarkers()
        c = await loaded(make(log, markers))
        pid = (await c.init_producer_id("t", 10_000)).producer_id
        await c.add_partitions("t", pid, 0, [("x", 0)])
        # Crash between PrepareAbort and the markers: cut the completion by failing writes
        # after the prepare record.
        c._marker_delay_s = 3600
        assert await c.end_txn("t", pid, 0, False) is ErrorCode.none
        await c.shutdown()
        assert markers.written == []
        again_markers = MemoryMarkers()
        c2 = await loaded(make(log, again_markers))
        await settle()
        assert again_markers.written == [(pid, 0, 4, False, frozenset({("x", 0)}))]
        assert c2.transaction("t").state is TxnState.COMPLETE_ABORT

    run(scenario())


def test_write_failure_keeps_state_and_maps_error() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        c = await loaded(make(log))
        pid = (await c.init_producer_id("t", 10_000)).producer_id
        log.fail_with = 19  # NOT_ENOUGH_REPLICAS
        assert await c.add_partitions("t", pid, 0, [("x", 0)]) is (
            ErrorCode.coordinator_not_available
        )
        assert c.transaction("t").state is TxnState.EMPTY
        assert c.transaction("t").pending_state is None

    run(scenario())


def test_timed_out_transaction_aborted_and_ids_expire() -> None:
    async def scenario() -> None:
        clock, markers = Clock(), MemoryMarkers()
        c = await loaded(make(markers=markers, clock=clock))
        pid = (await c.init_producer_id("t", 5_000)).producer_id
        await c.add_partitions("t", pid, 0, [("x", 0)])
        clock.now += 4_000
        assert await c.abort_timed_out_transactions() == 0
        clock.now += 2_000
        assert await c.abort_timed_out_transactions() == 1
        await settle()
        assert c.transaction("t").state is TxnState.COMPLETE_ABORT
        assert c.transaction("t").producer_epoch == 1  # bumped: the producer is fenced
        assert await c.end_txn("t", pid, 0, True) is ErrorCode.producer_fenced
        clock.now += 99_999
        assert await c.remove_expired_transactional_ids() == 0
        clock.now += 10
        assert await c.remove_expired_transactional_ids() == 1
        assert c.transaction("t") is None

    run(scenario())


def test_loading_answers_load_in_progress() -> None:
    async def scenario() -> None:
        c = make()
        c.starting = True
        assert (await c.init_producer_id("t", 1000)).error is (
            ErrorCode.coordinator_load_in_progress
        )
        assert c.coordinator_error("t") is ErrorCode.coordinator_load_in_progress
        c.starting = False
        await loaded(c)
        assert c.coordinator_error("t") is None
        c.unload_partition(c.partition_for("t"))
        assert c.coordinator_error("t") is ErrorCode.not_coordinator

    run(scenario())


class FlakyMarkers(MemoryMarkers):
    """Fails the first attempt of each listed partition with its error code."""

    def __init__(self, first_errors: dict[tuple[str, int], int]) -> None:
        super().__init__()
        self.first_errors = dict(first_errors)

    async def write_markers(self, *, producer_id, producer_epoch, coordinator_epoch, commit,
                            partitions):  # fmt: skip
        parts = frozenset(partitions)
        self.written.append((producer_id, producer_epoch, coordinator_epoch, commit, parts))
        return {tp: self.first_errors.pop(tp, 0) for tp in parts}


def test_only_failed_markers_are_retried() -> None:
    async def scenario() -> None:
        markers = FlakyMarkers({("x", 1): int(ErrorCode.not_leader_or_follower)})
        c = await loaded(make(markers=markers))
        pid = (await c.init_producer_id("t", 10_000)).producer_id
        await c.add_partitions("t", pid, 0, [("x", 0), ("x", 1), ("x", 2)])
        assert await c.end_txn("t", pid, 0, True) is ErrorCode.none
        for _ in range(100):  # the retry backs off 0.1 s
            if c.transaction("t").state is TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.02)
        assert c.transaction("t").state is TxnState.COMPLETE_COMMIT
        assert [w[4] for w in markers.written] == [
            frozenset({("x", 0), ("x", 1), ("x", 2)}),
            frozenset({("x", 1)}),  # the leader moved: that partition alone, again
        ]

    run(scenario())


def test_fenced_markers_leave_the_transaction_to_the_new_coordinator() -> None:
    async def scenario() -> None:
        # TRANSACTION_COORDINATOR_FENCED: a newer coordinator wrote to that partition.
        markers = FlakyMarkers({("x", 0): int(ErrorCode.transaction_coordinator_fenced)})
        c = await loaded(make(markers=markers))
        pid = (await c.init_producer_id("t", 10_000)).producer_id
        await c.add_partitions("t", pid, 0, [("x", 0)])
        assert await c.end_txn("t", pid, 0, True) is ErrorCode.none
        await asyncio.sleep(0.3)
        assert len(markers.written) == 1  # no retry
        assert c.transaction("t").state is TxnState.PREPARE_COMMIT  # not completed here

    run(scenario())


def test_leadership_moves_load_and_unload() -> None:
    async def scenario() -> None:
        log, markers = MemoryLog(), MemoryMarkers()
        c = await loaded(make(log, markers))
        pid = (await c.init_producer_id("t", 10_000)).producer_id
        partition = c.partition_for("t")
        await c.add_partitions("t", pid, 0, [("x", 0)])
        # Another broker becomes leader of the partition (epoch 7) while this one resigns.
        c.unload_partition(partition)
        assert c.coordinator_error("t") is ErrorCode.not_coordinator
        other = make(log, markers)
        assert other.schedule_load(partition, 7) is True
        assert other.coordinator_error("t") is ErrorCode.coordinator_load_in_progress
        assert other.schedule_load(partition, 7) is False  # one load at a time
        await other.load_partition(partition, 7)
        assert other.coordinator_error("t") is None
        meta = other.transaction("t")
        assert (meta.state, meta.coordinator_epoch) == (TxnState.ONGOING, 7)
        # The controller bumps the epoch of a leader that stays (a follower died): the
        # partition is not loaded again, its ids take the new coordinator epoch.
        assert other.schedule_load(partition, 9) is False
        assert other.transaction("t") is meta and meta.coordinator_epoch == 9
        assert await other.end_txn("t", pid, 0, True) is ErrorCode.none
        await settle()
        assert markers.written[-1] == (pid, 0, 9, True, frozenset({("x", 0)}))

    run(scenario())


def test_unload_during_load_wins() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        for n in range(1200):  # long enough for the load to yield
            snapshot = TxnSnapshot(n, 0, 1000, TxnState.EMPTY, frozenset(), -1, 0)
            log.records.setdefault(0, []).append((encode_key(f"id-{n}"), encode_value(snapshot)))
        c = make(log)
        assert c.schedule_load(0, 3)
        task = asyncio.ensure_future(c.load_partition(0, 3))
        await asyncio.sleep(0)
        c.unload_partition(0)
        await task
        # The load saw the unload at its next yield and gave up: nothing owned or kept.
        on_zero = next(f"k{n}" for n in range(100) if c.partition_for(f"k{n}") == 0)
        assert c.coordinator_error(on_zero) is ErrorCode.not_coordinator
        assert c.transactions() == []

    run(scenario())
