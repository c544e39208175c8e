from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records.header import check_crc, iter_headers, parse_header, set_base_offset
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptBatchError,
    InconsistentTopicIdError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from odradek.storage.log import Log
from tests.storage.conftest import (
    ATTR_TRANSACTIONAL,
    FakeClock,
    make_batch,
    make_control_batch,
)

NOW = 1_700_000_000_000
OpenLog = Callable[..., Log]

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100, retention_ms=-1)


def headers(data: bytes) -> list:
    return [h for _, h in iter_headers(data)]


def fill(log: Log, count: int, values: int = 2, size: int = 30, **kwargs: object) -> list[int]:
    """Append ``count`` batches; returns their base offsets."""
    bases = []
    for _ in range(count):
        info = log.append_as_leader(make_batch([b"v" * size] * values, **kwargs))
        bases.append(info.first_offset)
    return bases


# -- appends ---------------------------------------------------------------------------


def test_append_assigns_offsets_in_place(open_log: OpenLog) -> None:
    log = open_log()
    batch = make_batch([b"a", b"b", b"c"], base_offset=999)
    info = log.append_as_leader(bytes(batch), leader_epoch=4)
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 2, 3)
    assert info.log_append_time_ms == -1 and not info.duplicate
    info = log.append_as_leader(make_batch([b"d"] * 2), leader_epoch=4)
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert log.log_end_offset == 5
    data = log.read(0, 10**6).read_bytes()
    stored = headers(data)  # iter_headers checks every CRC: rewriting did not break them
    assert [h.base_offset for h in stored] == [0, 3]
    assert [h.partition_leader_epoch for h in stored] == [4, 4]
    # Apart from the base offset and leader epoch the bytes are exactly as produced.
    assert data[16:].startswith(bytes(batch)[16:])
    assert log.leader_epoch_cache.entries == [(4, 0)]


def test_log_append_time_is_stamped(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    clock.now_ms = NOW + 12345
    info = log.append_as_leader(make_batch([b"a", b"b"], timestamp=5))
    assert info.log_append_time_ms == NOW + 12345
    assert info.max_timestamp_ms == NOW + 12345
    data = log.read(0, 10**6).read_bytes()
    header = parse_header(data)
    assert header.is_log_append_time and header.max_timestamp == NOW + 12345
    check_crc(data, 0, header)  # the CRC was recomputed over the stamped fields


@pytest.mark.parametrize(
    ("mutate", "error", "code"),
    [
        (lambda b: b.__setitem__(70, b[70] ^ 1), CorruptBatchError, 2),  # CRC mismatch
        (lambda b: b.__setitem__(16, 1), CorruptBatchError, 2),  # magic 1
        (lambda b: b.extend(b"\x00" * 5), CorruptBatchError, 2),  # trailing garbage
        (lambda b: b.__setitem__(slice(8, 12), b"\x00\x00\x00\x05"), CorruptBatchError, 2),
    ],
)
def test_bad_batches_are_refused(open_log: OpenLog, mutate, error, code: int) -> None:
    log = open_log()
    batch = make_batch([b"hello world, a record"])
    mutate(batch)
    with pytest.raises(error) as info:
        log.append_as_leader(batch)
    assert info.value.error_code == code
    assert log.log_end_offset == 0 and log.size_in_bytes == 0


def test_validation_rules(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(
        LogConfig(
            max_message_bytes=200,
            segment_bytes=300,
            message_timestamp_after_max_ms=1000,
            message_timestamp_before_max_ms=5000,
        )
    )
    clock.now_ms = NOW
    with pytest.raises(RecordTooLargeError) as too_large:
        log.append_as_leader(make_batch([b"x" * 300]))
    assert too_large.value.error_code == 10
    with pytest.raises(RecordBatchTooLargeError) as too_big:
        log.append_as_leader(make_batch([b"x" * 50] * 2) * 3)  # 3 * 177 bytes > segment
    assert too_big.value.error_code == 18
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(make_batch([b"a", b"b"], last_offset_delta=5))
    with pytest.raises(InvalidRecordError, match="control"):
        log.append_as_leader(make_control_batch(commit=True, producer_id=1))
    with pytest.raises(InvalidTimestampError) as ts:
        log.append_as_leader(make_batch([b"a"], timestamp=NOW + 1001))
    assert ts.value.error_code == 32
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(make_batch([b"a"], timestamp=NOW - 5001))
    log.append_as_leader(make_batch([b"a"], timestamp=NOW + 1000))
    log.append_as_leader(make_batch([b"a"], timestamp=-1))  # no timestamp: not checked
    assert log.log_end_offset == 2


def test_compression_type_recompresses(open_log: OpenLog) -> None:
    from odradek.records.batch import decode_batches

    log = open_log(LogConfig(compression_type="gzip"))
    log.append_as_leader(make_batch([b"aaaa" * 50, b"bbbb" * 50], keys=[b"k1", None]))
    data = log.read(0, 10**6).read_bytes()
    (batch,) = list(decode_batches(data))
    assert batch.header.compression == 1
    assert [(r.offset, r.key, r.value) for r in batch.records] == [
        (0, b"k1", b"aaaa" * 50),
        (1, None, b"bbbb" * 50),
    ]


# -- idempotence and transactions ------------------------------------------------------


def test_duplicate_batches_are_not_written_twice(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 1)
    batch = make_batch([b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0)
    first = log.append_as_leader(bytes(batch))
    size = log.size_in_bytes
    again = log.append_as_leader(bytes(batch))
    assert again.duplicate
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert log.size_in_bytes == size and log.log_end_offset == first.last_offset + 1
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(make_batch([b"c"], producer_id=7, producer_epoch=0, base_sequence=5))
    two = make_batch([b"c"], producer_id=7, producer_epoch=0, base_sequence=2) + make_batch(
        [b"d"], producer_id=7, producer_epoch=0, base_sequence=3
    )
    assert log.append_as_leader(two).records_count == 2
    gap = make_batch([b"e"], producer_id=7, producer_epoch=0, base_sequence=4) + make_batch(
        [b"f"], producer_id=7, producer_epoch=0, base_sequence=9
    )
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(gap)
    assert log.producer_state.producer_entry(7).last_seq == 3


def test_aborted_transactions_are_indexed(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    txn = dict(producer_id=9, producer_epoch=0, attributes=ATTR_TRANSACTIONAL)
    first = log.append_as_leader(make_batch([b"t1"], base_sequence=0, **txn)).first_offset
    fill(log, 3)
    log.append_as_leader(make_batch([b"t2"], base_sequence=1, **txn))
    assert log.first_unstable_offset() == first
    marker = log.append_as_leader(
        make_control_batch(commit=False, producer_id=9), origin="coordinator"
    )
    assert log.first_unstable_offset() is None
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [
        (9, first, marker.first_offset)
    ]
    assert log.collect_aborted_transactions(marker.first_offset + 1, 10**6) == []


# -- follower appends ------------------------------------------------------------------


def test_follower_append_keeps_offsets(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    batch = make_batch([b"a"] * 3, leader_epoch=2)
    set_base_offset(batch, 0, 0)
    second = make_batch([b"b"] * 2, leader_epoch=5)
    set_base_offset(second, 0, 10)  # gaps are allowed (compacted leader)
    info = log.append_as_follower(batch + second + make_batch([b"c"])[:30])  # partial tail
    assert (info.first_offset, info.last_offset) == (0, 11)
    assert log.log_end_offset == 12
    assert log.leader_epoch_cache.entries == [(2, 0), (5, 10)]
    behind = make_batch([b"x"])
    set_base_offset(behind, 0, 11)
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(behind)
    corrupt = make_batch([b"x" * 20])
    set_base_offset(corrupt, 0, 12)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        log.append_as_follower(corrupt)


# -- reads -----------------------------------------------------------------------------


def test_reads_span_segments_and_stop_at_whole_batches(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    bases = fill(log, 40)
    size = parse_header(make_batch([b"v" * 30] * 2)).size
    assert len(log.segments) > 3
    everything = log.read(0, 10**6)
    assert everything.size == log.size_in_bytes == 40 * size
    assert len(everything.regions) == len(log.segments)
    assert [h.base_offset for h in headers(everything.read_bytes())] == bases
    part = log.read(bases[5] + 1, 3 * size + size // 2)  # from inside batch 5
    assert part.first_offset == bases[5]
    assert [h.base_offset for h in headers(part.read_bytes())] == bases[5:8]
    assert part.size == 3 * size
    tiny = log.read(bases[7], 10)  # smaller than a batch: the first one anyway (KIP-74)
    assert tiny.size == size and tiny.first_offset == bases[7]
    assert log.read(bases[7], 10, min_one_batch=False).size == 0
    bounded = log.read(0, 10**6, max_offset=bases[9])  # high watermark: exclusive
    assert [h.base_offset for h in headers(bounded.read_bytes())] == bases[:9]
    assert log.read(bases[9], 10**6, max_offset=bases[9]).size == 0
    assert log.read(log.log_end_offset, 100).regions == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 120)), min_size=1, max_size=40),
    reads=st.lists(
        st.tuples(st.integers(0, 200), st.integers(0, 3000), st.integers(0, 200)),
        min_size=1,
        max_size=8,
    ),
)
def test_reads_match_a_model(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[tuple[int, int]],
    reads: list[tuple[int, int, int]],
) -> None:
    config = LogConfig(segment_bytes=600, index_interval_bytes=150, retention_ms=-1)
    directory = tmp_path_factory.mktemp("model") / "m-0"
    log = Log.open(directory, config, clock=FakeClock())
    model: list[tuple[int, int, int]] = []  # (base, last, size)
    for values, length in sizes:
        info = log.append_as_leader(make_batch([b"x" * length] * values))
        model.append(
            (
                info.first_offset,
                info.last_offset,
                parse_header(make_batch([b"x" * length] * values)).size,
            )
        )
    leo = log.log_end_offset
    for offset, max_bytes, hw_back in reads:
        offset = min(offset, leo)
        max_offset = max(leo - hw_back, 0)
        got = log.read(offset, max_bytes, max_offset=max_offset)
        expected = []
        total = 0
        for base, last, size in model:
            if last < offset:
                continue
            if last >= max_offset:
                break
            if total + size > max_bytes and expected:
                break
            if total + size > max_bytes and not expected:
                expected.append(base)  # min_one_batch
                total += size
                break
            expected.append(base)
            total += size
        assert [h.base_offset for h in headers(got.read_bytes())] == expected
        assert got.size == total
        assert got.first_offset == (expected[0] if expected else -1)
        # Every byte of the batches below max_offset counts towards min_bytes, whole
        # batches or not: the count reaches max_bytes exactly when they hold that much.
        below = sum(size for _, last, size in model if offset <= last < max_offset)
        readable = log.readable_bytes(offset, max(max_bytes, 1), max_offset=max_offset)
        assert min(below, max(max_bytes, 1)) <= readable <= below
    log.close()


def test_readable_bytes_count_batches_a_read_of_that_size_would_not_return(
    open_log: OpenLog,
) -> None:
    # A delayed fetch's min_bytes: three batches of ~470 bytes hold 1,000 bytes, though a
    # read of 1,000 bytes returns only two of them. Counting that read kept such a fetch
    # waiting for max_wait.
    log = open_log(SMALL)
    bases = fill(log, 3, values=1, size=400)
    size = parse_header(make_batch([b"v" * 400])).size
    assert log.read(0, 1000).size == 2 * size < 1000
    assert log.readable_bytes(0, 1000) == 3 * size >= 1000
    assert log.readable_bytes(0, 1000, max_offset=bases[2]) == 2 * size  # the HW bounds it
    assert log.readable_bytes(bases[2], 1) == size
    assert log.readable_bytes(log.log_end_offset, 1) == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.readable_bytes(log.log_end_offset + 1, 1)


def test_offset_for_timestamp(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    for i in range(20):
        log.append_as_leader(make_batch([b"a", b"b"], timestamps=[NOW + 10 * i, NOW + 10 * i + 5]))
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 3) == (1, NOW + 5)
    assert log.offset_for_timestamp(NOW + 6) == (2, NOW + 10)
    assert log.offset_for_timestamp(NOW + 191) == (39, NOW + 195)
    assert log.offset_for_timestamp(NOW + 196) is None
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_for_timestamp(-1) == (40, -1)
    assert log.offset_for_timestamp(-3) == (39, NOW + 195)
    log.maybe_increment_log_start_offset(11)
    assert log.offset_for_timestamp(NOW) == (11, NOW + 55)
    assert log.offset_for_timestamp(-2) == (11, -1)


def test_region_in_flight_survives_segment_deletion(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(segment_bytes=1000, retention_ms=1000, file_delete_delay_ms=0))
    fill(log, 30)
    fetch = log.read(0, 500)
    expected = fetch.read_bytes()
    clock.advance(10**12)
    segments = len(log.segments)
    assert log.delete_retained_segments() == segments  # the active one too (Kafka rolls it)
    assert not (log.directory / "00000000000000000000.log").exists()
    assert not (log.directory / "00000000000000000000.log.deleted").exists()
    assert fetch.read_bytes() == expected
    a, b = socket.socketpair()
    with a, b:
        region = fetch.regions[0]
        sent = 0
        while sent < region.length:
            sent += region.sendfile(a.fileno(), sent)
        received = b""
        while len(received) < region.length:
            received += b.recv(65536)
    assert received == expected[: region.length]


# -- start offset, truncation ----------------------------------------------------------


def test_delete_records_moves_the_log_start(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    bases = fill(log, 30)
    log.maybe_increment_log_start_offset(bases[12] + 1)
    assert log.log_start_offset == bases[12] + 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[12], 100)
    assert log.read(bases[12] + 1, 10).first_offset == bases[12]  # the holding batch
    log.maybe_increment_log_start_offset(3)  # never backwards
    assert log.log_start_offset == bases[12] + 1
    log.high_watermark = bases[20]
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(bases[20] + 1)
    before = len(log.segments)
    deleted = log.delete_retained_segments()
    assert deleted > 0 and len(log.segments) == before - deleted
    assert log.segments[0].base_offset <= log.log_start_offset


def test_truncate_to_keeps_everything_consistent(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    seq = 0
    for i in range(30):
        epoch = 1 if i < 15 else 2
        log.append_as_leader(
            make_batch([b"v" * 30] * 2, producer_id=3, producer_epoch=0, base_sequence=seq),
            leader_epoch=epoch,
        )
        seq += 2
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 30)]
    segments_before = len(log.segments)
    log.truncate_to(25)  # inside batch 24..25
    assert log.log_end_offset == 24
    assert len(log.segments) < segments_before
    assert log.leader_epoch_cache.entries == [(1, 0)]
    assert log.producer_state.producer_entry(3).last_seq == 23
    data = log.read(0, 10**6).read_bytes()
    assert headers(data)[-1].last_offset == 23
    # The producer continues right where the truncated log ends.
    info = log.append_as_leader(
        make_batch([b"w"], producer_id=3, producer_epoch=0, base_sequence=24), leader_epoch=3
    )
    assert info.first_offset == 24
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 24)]
    log.truncate_to(1000)  # beyond the end: nothing happens
    assert log.log_end_offset == 25


def test_truncate_fully_and_start_at(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    fill(log, 20)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (500, 500, 500)
    assert [s.base_offset for s in log.segments] == [500]
    assert log.leader_epoch_cache.entries == []
    assert log.append_as_leader(make_batch([b"a"])).first_offset == 500
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 10)
    log.truncate_to(100)  # below the log start: restart there
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)


# -- durability ------------------------------------------------------------------------


def test_flush_policies(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(flush_messages=10, flush_ms=60_000, segment_bytes=2000))
    fill(log, 4)  # 8 messages
    assert not log.maybe_flush()
    assert log.recovery_point == 0
    fill(log, 1)  # 10 messages
    assert log.maybe_flush()
    assert log.recovery_point == 10
    fill(log, 1)
    assert not log.maybe_flush()
    clock.advance(60_000)
    assert log.maybe_flush()
    assert log.recovery_point == 12
    log.roll()
    fill(log, 1)
    assert log.maybe_flush()  # a rolled segment is flushed even under the policies
    assert log.recovery_point == 12
    assert not log.maybe_flush()


def test_flush_in_a_thread_races_appends(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=4000))
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        deadline = time.monotonic() + 5
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                log.flush()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        bases = fill(log, 300, size=50)
    finally:
        stop.set()
        thread.join(10)
    assert not errors
    log.flush()
    assert log.recovery_point == log.log_end_offset == bases[-1] + 2
    assert len(headers(log.read(0, 10**7).read_bytes())) == 300


def test_topic_id(open_log: OpenLog) -> None:
    import uuid

    log = open_log()
    assert log.topic_id is None
    topic_id = uuid.uuid4()
    log.assign_topic_id(topic_id)
    log.assign_topic_id(topic_id)
    assert log.topic_id == topic_id
    with pytest.raises(InconsistentTopicIdError):
        log.assign_topic_id(uuid.uuid4())


def test_closed_log_refuses_work(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 1)
    log.close()
    log.close()
    with pytest.raises(StorageError):
        log.append_as_leader(make_batch())
    with pytest.raises(StorageError):
        log.read(0, 10)


def test_bad_directory_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Log.open(tmp_path / "no_partition_number", LogConfig())


def test_compacted_topic_refuses_records_without_keys(tmp_path) -> None:
    from odradek.records.batch import Record, build_batch
    from odradek.storage.config import LogConfig
    from odradek.storage.errors import InvalidRecordError
    from odradek.storage.log import Log

    log_ = Log.open(tmp_path / "c-0", LogConfig.from_properties({"cleanup.policy": "compact"}))
    try:
        log_.append_as_leader(build_batch([Record(key=b"k", value=b"v")]))
        with pytest.raises(InvalidRecordError, match="without a key"):
            log_.append_as_leader(build_batch([Record(key=b"k", value=b"v"), Record(value=b"x")]))
        assert log_.log_end_offset == 1
    finally:
        log_.close()
