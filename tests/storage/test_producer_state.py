"""ProducerStateManager: sequence/epoch rules, duplicates, transactions, snapshots."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records.header import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    compute_crc,
    parse_header,
)
from odradek.storage.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from odradek.storage.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
)

PID = 1000


def data_header(
    pid: int = PID,
    epoch: int = 0,
    seq: int = 0,
    count: int = 1,
    *,
    base_offset: int = 0,
    transactional: bool = False,
    timestamp: int = 1_000,
) -> BatchHeader:
    return BatchHeader(
        base_offset=base_offset,
        batch_length=100,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=TRANSACTIONAL_MASK if transactional else 0,
        last_offset_delta=count - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=count,
    )


def zigzag(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def control_batch(
    pid: int = PID,
    epoch: int = 0,
    *,
    commit: bool,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    timestamp: int = 2_000,
    control_type: int | None = None,
    attributes_extra: int = 0,
) -> bytearray:
    """A real control batch with one COMMIT/ABORT record, CRC included."""
    ctype = (1 if commit else 0) if control_type is None else control_type
    key = struct.pack(">hh", 0, ctype)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = (
        b"\x00"
        + zigzag(0)
        + zigzag(0)
        + zigzag(len(key))
        + key
        + zigzag(len(value))
        + value
        + zigzag(0)
    )
    record = zigzag(len(body)) + body
    attributes = TRANSACTIONAL_MASK | CONTROL_MASK | attributes_extra
    header_rest = struct.pack(">hiqqqhii", attributes, 0, timestamp, timestamp, pid, epoch, -1, 1)
    batch_length = 4 + 1 + 4 + len(header_rest) + len(record)
    batch = bytearray(
        struct.pack(">qiib", base_offset, batch_length, 0, 2) + b"\0\0\0\0" + header_rest + record
    )
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    return batch


def append(
    state: ProducerStateManager,
    header: BatchHeader,
    offset: int,
    origin: str = "client",
    batch: bytearray | None = None,
):
    """Check then record a batch at ``offset``, as the Log does; returns the update result."""
    assert state.check_duplicate_or_validate(header, origin, batch) is None
    return state.update(header._replace(base_offset=offset), offset, -1, batch)


@pytest.fixture
def state(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, clock=lambda: 10_000.0)


# -- sequences and epochs ---------------------------------------------------------------


def test_non_idempotent_batches_are_ignored(state: ProducerStateManager) -> None:
    header = data_header(pid=-1, epoch=-1, seq=-1)
    assert state.check_duplicate_or_validate(header, "client") is None
    assert state.update(header, 0) is None
    assert state.active_producers() == {}
    assert state.map_end_offset == 1


@pytest.mark.parametrize("seq", [0, 1, 57, INT32_MAX])
def test_unknown_producer_accepts_any_sequence(state: ProducerStateManager, seq: int) -> None:
    # KIP-360: the broker no longer answers UNKNOWN_PRODUCER_ID for a fresh producer id.
    append(state, data_header(seq=seq), 0)
    entry = state.producer_entry(PID)
    assert entry is not None and entry.last_seq == seq


def test_in_sequence_then_gap(state: ProducerStateManager) -> None:
    append(state, data_header(seq=0, count=3), 0)
    append(state, data_header(seq=3, count=2), 3)
    with pytest.raises(OutOfOrderSequenceError):
        state.check_duplicate_or_validate(data_header(seq=6), "client")
    with pytest.raises(OutOfOrderSequenceError):
        state.check_duplicate_or_validate(data_header(seq=4), "client")  # overlaps, not exact


def test_duplicates_among_last_five(state: ProducerStateManager) -> None:
    offset = 0
    originals = []
    for i in range(7):
        header = data_header(seq=i * 2, count=2, timestamp=100 + i)
        append(state, header, offset)
        originals.append(BatchMetadata(i * 2, i * 2 + 1, offset, offset + 1, 100 + i))
        offset += 2
    for i in range(2, 7):  # the last five are remembered
        dup = state.check_duplicate_or_validate(data_header(seq=i * 2, count=2), "client")
        assert dup == originals[i]
    for i in range(2):  # older ones are out of order
        with pytest.raises(OutOfOrderSequenceError):
            state.check_duplicate_or_validate(data_header(seq=i * 2, count=2), "client")
    # Same first sequence, different length: not a duplicate.
    with pytest.raises(OutOfOrderSequenceError):
        state.check_duplicate_or_validate(data_header(seq=12, count=1), "client")


def test_duplicate_needs_same_epoch(state: ProducerStateManager) -> None:
    append(state, data_header(epoch=3, seq=0), 0)
    with pytest.raises(InvalidProducerEpochError):
        state.check_duplicate_or_validate(data_header(epoch=2, seq=0), "client")


def test_stale_epoch_rejected(state: ProducerStateManager) -> None:
    append(state, data_header(epoch=5, seq=0), 0)
    with pytest.raises(InvalidProducerEpochError):
        state.check_duplicate_or_validate(data_header(epoch=4, seq=1), "client")
    with pytest.raises(InvalidProducerEpochError):
        state.check_duplicate_or_validate(data_header(epoch=4, seq=1), "coordinator")


def test_epoch_bump_must_start_at_zero(state: ProducerStateManager) -> None:
    append(state, data_header(epoch=0, seq=0, count=5), 0)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        state.check_duplicate_or_validate(data_header(epoch=1, seq=5), "client")
    append(state, data_header(epoch=1, seq=0), 5)
    entry = state.producer_entry(PID)
    assert entry is not None
    assert entry.producer_epoch == 1
    assert list(entry.batches) == [BatchMetadata(0, 0, 5, 5, 1_000)]  # old epoch forgotten


def test_sequence_wraps_at_int32_max(state: ProducerStateManager) -> None:
    append(state, data_header(seq=INT32_MAX - 1, count=2), 0)
    entry = state.producer_entry(PID)
    assert entry is not None and entry.last_seq == INT32_MAX
    append(state, data_header(seq=0, count=3), 2)
    # A batch whose sequences wrap inside it: base MAX-1, 4 records -> last 1.
    state2 = ProducerStateManager(state.partition_dir / "other")
    append(state2, data_header(seq=INT32_MAX - 1, count=4), 0)
    append(state2, data_header(seq=2), 4)
    dup = state2.check_duplicate_or_validate(data_header(seq=INT32_MAX - 1, count=4), "client")
    assert dup is not None and dup.last_seq == 1


def test_coordinator_origin_skips_sequences_and_dedup(state: ProducerStateManager) -> None:
    append(state, data_header(seq=0), 0)
    # Offset commits from the group coordinator carry no sequence checks.
    assert state.check_duplicate_or_validate(data_header(seq=-1), "coordinator") is None
    assert state.check_duplicate_or_validate(data_header(seq=0), "coordinator") is None


def test_replication_origin_checks_nothing(state: ProducerStateManager) -> None:
    append(state, data_header(epoch=5, seq=10), 0)
    for header in (data_header(epoch=1, seq=99), data_header(epoch=5, seq=50)):
        assert state.check_duplicate_or_validate(header, "replication") is None
    state.update(data_header(epoch=5, seq=50), 1)
    assert state.producer_entry(PID).last_seq == 50  # type: ignore[union-attr]


def test_unknown_origin_rejected(state: ProducerStateManager) -> None:
    with pytest.raises(ValueError):
        state.check_duplicate_or_validate(data_header(), "gossip")


# -- transactions -----------------------------------------------------------------------


def test_transaction_commit_and_lso(state: ProducerStateManager) -> None:
    assert state.first_unstable_offset() is None
    append(state, data_header(seq=0, count=2, transactional=True), 10)
    assert state.first_unstable_offset() == 10
    entry = state.producer_entry(PID)
    assert entry is not None and entry.current_txn_first_offset == 10
    append(state, data_header(seq=2, transactional=True), 12)
    assert state.first_unstable_offset() == 10  # still the first offset of the txn
    marker = control_batch(commit=True, coordinator_epoch=3)
    completed = append(state, parse_header(marker), 13, "coordinator", marker)
    assert completed is not None
    assert (completed.producer_id, completed.first_offset, completed.last_offset) == (PID, 10, 13)
    assert not completed.is_aborted
    assert completed.last_stable_offset == 14
    assert state.first_unstable_offset() is None
    entry = state.producer_entry(PID)
    assert entry is not None
    assert entry.current_txn_first_offset is None and entry.coordinator_epoch == 3
    # Sequences continue after the marker; the last batches are still remembered.
    assert state.check_duplicate_or_validate(data_header(seq=2, transactional=True)) is not None
    append(state, data_header(seq=3, transactional=True), 14)
    assert state.first_unstable_offset() == 14


def test_interleaved_transactions_lso(state: ProducerStateManager) -> None:
    a, b = 1, 2
    append(state, data_header(pid=a, transactional=True), 0)
    append(state, data_header(pid=b, transactional=True), 1)
    append(state, data_header(pid=a, seq=1, transactional=True), 2)
    assert state.ongoing_transactions() == [(0, a), (1, b)]
    assert state.first_unstable_offset() == 0
    abort_a = control_batch(pid=a, commit=False)
    completed = append(state, parse_header(abort_a), 3, "coordinator", abort_a)
    assert completed is not None and completed.is_aborted
    assert completed.last_stable_offset == 1  # b's transaction is still open at 1
    assert state.first_unstable_offset() == 1
    commit_b = control_batch(pid=b, commit=True)
    completed = append(state, parse_header(commit_b), 4, "coordinator", commit_b)
    assert completed is not None and not completed.is_aborted
    assert completed.last_stable_offset == 5
    assert state.first_unstable_offset() is None


def test_marker_without_open_transaction(state: ProducerStateManager) -> None:
    marker = control_batch(commit=True, epoch=2, coordinator_epoch=1)
    assert append(state, parse_header(marker), 0, "coordinator", marker) is None
    entry = state.producer_entry(PID)
    assert entry is not None and entry.producer_epoch == 2 and entry.coordinator_epoch == 1


def test_non_transactional_write_during_transaction(state: ProducerStateManager) -> None:
    append(state, data_header(seq=0, transactional=True), 0)
    with pytest.raises(InvalidTxnStateError):
        state.check_duplicate_or_validate(data_header(seq=1), "client")


def test_marker_epoch_and_coordinator_fencing(state: ProducerStateManager) -> None:
    append(state, data_header(epoch=4, seq=0, transactional=True), 0)
    old = control_batch(epoch=3, commit=True)
    with pytest.raises(InvalidProducerEpochError):
        state.check_duplicate_or_validate(parse_header(old), "coordinator", old)
    first = control_batch(epoch=4, commit=False, coordinator_epoch=7)
    append(state, parse_header(first), 1, "coordinator", first)
    zombie = control_batch(epoch=4, commit=True, coordinator_epoch=6)
    with pytest.raises(TransactionCoordinatorFencedError):
        state.check_duplicate_or_validate(parse_header(zombie), "coordinator", zombie)
    # Replication accepts what the leader accepted.
    assert state.check_duplicate_or_validate(parse_header(zombie), "replication", zombie) is None


def test_bad_markers_are_invalid_records(state: ProducerStateManager) -> None:
    leader_change = control_batch(commit=True, control_type=2)
    with pytest.raises(InvalidRecordError, match="type 2 is not an end-transaction marker"):
        state.check_duplicate_or_validate(parse_header(leader_change), "coordinator", leader_change)
    compressed = control_batch(commit=True, attributes_extra=1)  # claims gzip, is not
    with pytest.raises(InvalidRecordError, match="bad transaction marker"):
        state.check_duplicate_or_validate(parse_header(compressed), "replication", compressed)
    good = control_batch(commit=True)
    truncated = good[:-8]
    struct.pack_into(">i", truncated, 8, len(truncated) - 12)
    with pytest.raises(InvalidRecordError):
        state.check_duplicate_or_validate(parse_header(truncated), "coordinator", truncated)
    with pytest.raises(ValueError, match="control batch"):
        state.update(parse_header(good), 0)


def test_empty_control_batch_is_ignored(state: ProducerStateManager) -> None:
    append(state, data_header(transactional=True), 0)
    marker = control_batch(commit=False)
    empty = parse_header(marker)._replace(records_count=0)
    assert state.update(empty, 1, -1, marker) is None
    assert state.first_unstable_offset() == 0


def test_log_append_time_becomes_batch_timestamp(state: ProducerStateManager) -> None:
    state.check_duplicate_or_validate(data_header(seq=0, timestamp=5))
    state.update(data_header(seq=0, timestamp=5), 0, 777)
    dup = state.check_duplicate_or_validate(data_header(seq=0, timestamp=5))
    assert dup is not None and dup.timestamp == 777


# -- snapshots --------------------------------------------------------------------------


def fill(state: ProducerStateManager) -> None:
    offset = 0
    for pid in (1, 2, 3):
        for seq in range(6):
            append(state, data_header(pid=pid, epoch=pid, seq=seq), offset)
            offset += 1
    append(state, data_header(pid=4, transactional=True), offset)  # open txn at 18


def test_snapshot_round_trip_keeps_duplicates_and_txns(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path, clock=lambda: 10.0)
    fill(state)
    state.take_snapshot(19)
    assert (tmp_path / snapshot_file_name(19)).exists()
    assert state.last_snapshot_offset() == 19
    again = ProducerStateManager(tmp_path, clock=lambda: 10.0)
    again.load(0, 19)
    assert again.map_end_offset == 19
    assert again.active_producers() == state.active_producers()
    assert again.first_unstable_offset() == 18
    for seq in range(1, 6):  # all five retained batches survive the restart
        dup = again.check_duplicate_or_validate(data_header(pid=2, epoch=2, seq=seq))
        assert dup is not None and dup.first_offset == 6 + seq


def test_take_snapshot_rules(state: ProducerStateManager) -> None:
    append(state, data_header(), 0)
    append(state, data_header(seq=1), 1)
    with pytest.raises(ValueError):
        state.take_snapshot(1)
    state.take_snapshot(5)  # the log may hold non-producer batches up to 5
    assert state.map_end_offset == 5
    mtime = state._snapshot_path(5).stat().st_mtime_ns
    state.take_snapshot(5)
    assert state._snapshot_path(5).stat().st_mtime_ns == mtime


def test_load_deletes_out_of_range_and_skips_corrupt(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path, clock=lambda: 10.0)
    append(state, data_header(pid=1), 0)
    state.take_snapshot(1)
    append(state, data_header(pid=2), 1)
    state.take_snapshot(2)
    append(state, data_header(pid=3), 2)
    state.take_snapshot(3)
    state.take_snapshot(9)
    # Corrupt snapshot 3 (flip a byte in the body).
    path3 = tmp_path / snapshot_file_name(3)
    data = bytearray(path3.read_bytes())
    data[-1] ^= 0xFF
    path3.write_bytes(bytes(data))
    again = ProducerStateManager(tmp_path, clock=lambda: 10.0)
    again.load(1, 5)  # LEO 5: snapshot 9 is newer than the log and goes
    assert again.snapshot_offsets() == [1, 2]  # 3 was corrupt and deleted
    assert again.map_end_offset == 2
    assert set(again.active_producers()) == {1, 2}


def test_load_without_snapshot_starts_at_log_start(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.load(42, 100)
    assert state.map_end_offset == 42
    assert state.active_producers() == {}


def test_load_drops_expired_producers(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path, clock=lambda: 0.0)
    append(state, data_header(pid=1, timestamp=0), 0)
    append(state, data_header(pid=2, timestamp=0, transactional=True), 1)
    append(state, data_header(pid=3, timestamp=50_000_000), 2)
    state.take_snapshot(3)
    later = ProducerStateManager(
        tmp_path, producer_id_expiration_ms=86_400_000, clock=lambda: 86_400.0
    )
    later.load(0, 3)
    # pid 1 idle a full day: expired; pid 2 has an open txn; pid 3 was recent.
    assert set(later.active_producers()) == {2, 3}


def test_remove_expired_producers(state: ProducerStateManager) -> None:
    append(state, data_header(pid=1, timestamp=1_000), 0)
    append(state, data_header(pid=2, timestamp=1_000, transactional=True), 1)
    append(state, data_header(pid=3, timestamp=5_000), 2)
    state.remove_expired_producers(1_000 + 86_400_000 - 1)
    assert set(state.active_producers()) == {1, 2, 3}
    state.remove_expired_producers(1_000 + 86_400_000)
    assert set(state.active_producers()) == {2, 3}


def test_truncate_and_reload(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path, clock=lambda: 10.0)
    append(state, data_header(seq=0), 0)
    state.take_snapshot(1)
    append(state, data_header(seq=1), 1)
    append(state, data_header(seq=2, transactional=False), 2)
    state.take_snapshot(3)
    append(state, data_header(seq=3), 3)
    # Truncate the log to offset 2: snapshot 3 is beyond it and goes; state reloads from 1.
    state.truncate_and_reload(0, 2)
    assert state.snapshot_offsets() == [1]
    assert state.map_end_offset == 1
    assert state.producer_entry(PID).last_seq == 0  # type: ignore[union-attr]
    # The Log replays offset 1 from its segments.
    state.update(data_header(seq=1, base_offset=1), 1)
    assert state.map_end_offset == 2
    with pytest.raises(OutOfOrderSequenceError):
        state.check_duplicate_or_validate(data_header(seq=3))
    assert state.check_duplicate_or_validate(data_header(seq=2)) is None


def test_truncate_and_reload_at_end_keeps_state(state: ProducerStateManager) -> None:
    append(state, data_header(seq=0), 0)
    append(state, data_header(seq=1), 1)
    state.truncate_and_reload(0, 2)
    assert state.producer_entry(PID).last_seq == 1  # type: ignore[union-attr]


def test_replayed_batches_below_map_end_are_ignored(state: ProducerStateManager) -> None:
    append(state, data_header(seq=0), 0)
    append(state, data_header(seq=1), 1)
    state.update(data_header(seq=0), 0)  # replay of an already-applied batch
    assert state.producer_entry(PID).last_seq == 1  # type: ignore[union-attr]


def test_truncate_fully_and_delete_before(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    for offset in (1, 2, 3):
        state.update(data_header(pid=offset), offset - 1)
        state.take_snapshot(offset)
    state.on_log_start_offset_incremented(2)
    assert state.snapshot_offsets() == [2, 3]
    assert len(state.active_producers()) == 3  # entries outlive their batches
    state.truncate_fully_and_start_at(50)
    assert state.snapshot_offsets() == []
    assert state.active_producers() == {} and state.map_end_offset == 50


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d[:4], "too short"),
        (lambda d: b"\x00\x07" + d[2:], "version"),
        (lambda d: d[:-1], "CRC"),
        (lambda d: d + b"\x00", "CRC"),
    ],
)
def test_corrupt_snapshot_detection(mutate, match: str) -> None:
    entry = ProducerStateEntry(7, 1, 2, 3, None)
    entry.batches.append(BatchMetadata(0, 4, 10, 14, 99))
    data = encode_snapshot([entry])
    assert decode_snapshot(data, "s") == [entry]
    with pytest.raises(CorruptSnapshotError, match=match):
        decode_snapshot(mutate(data), "s")


def test_structurally_bad_snapshot_with_valid_crc() -> None:
    from crc32c import crc32c

    body = struct.pack(">i", 2) + b"\x00" * 10  # claims 2 producers, holds 10 bytes
    with pytest.raises(CorruptSnapshotError, match="truncated"):
        decode_snapshot(struct.pack(">hI", 1, crc32c(body)) + body, "s")
    body = struct.pack(">i", 1) + struct.pack(">qhiqqb", 1, 0, 0, 0, -1, 9)
    with pytest.raises(CorruptSnapshotError, match="9 batches"):
        decode_snapshot(struct.pack(">hI", 1, crc32c(body)) + body, "s")


batch_meta = st.builds(
    BatchMetadata,
    st.integers(-1, INT32_MAX),
    st.integers(-1, INT32_MAX),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.integers(-1, 2**62),
)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**62),
            st.integers(-1, 2**15 - 1),
            st.integers(-1, 2**31 - 1),
            st.integers(-1, 2**62),
            st.none() | st.integers(0, 2**62),
            st.lists(batch_meta, max_size=5),
        ),
        max_size=6,
        unique_by=lambda t: t[0],
    )
)
def test_snapshot_encoding_round_trips(raw) -> None:
    entries = []
    for pid, epoch, coordinator_epoch, ts, txn, batches in raw:
        entry = ProducerStateEntry(pid, epoch, coordinator_epoch, ts, txn)
        entry.batches.extend(batches)
        entries.append(entry)
    assert decode_snapshot(encode_snapshot(entries), "s") == entries


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 7)), min_size=1, max_size=30))
def test_retries_are_deduplicated_with_original_offsets(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[int, int]]
) -> None:
    """A producer sends batches of random sizes and re-sends random recent ones.

    Each fresh batch is appended; each re-send of one of the last five is reported as a
    duplicate with the offsets the original got; anything else is out of order.
    """
    state = ProducerStateManager(tmp_path_factory.mktemp("ps"))
    sent: list[tuple[int, int, int]] = []  # (first seq, count, first offset)
    next_seq = next_offset = 0
    for count, back in plan:
        if 0 < back <= len(sent):
            first_seq, n, first_offset = sent[-back]
            header = data_header(seq=first_seq, count=n)
            if back <= 5:
                dup = state.check_duplicate_or_validate(header)
                assert dup is not None and dup.first_offset == first_offset
                assert dup.last_offset == first_offset + n - 1
            else:
                with pytest.raises(OutOfOrderSequenceError):
                    state.check_duplicate_or_validate(header)
            continue
        append(state, data_header(seq=next_seq, count=count), next_offset)
        sent.append((next_seq, count, next_offset))
        next_seq += count
        next_offset += count
