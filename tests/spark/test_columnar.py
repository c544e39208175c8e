"""The columnar decoder against the record layer's own decoder (decode_batches) as the oracle."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records.batch import Record, build_batch, decode_batches
from odradek.records.compression import Compression
from odradek.records.errors import CorruptRecordError
from odradek.spark.columnar import AbortedTransaction, decode_fetch
from odradek.spark.schema import arrow_source_schema

headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
)
record_st = st.builds(
    Record,
    value=st.one_of(st.none(), st.binary(max_size=300)),
    key=st.one_of(st.none(), st.binary(max_size=40)),
    headers=headers_st,
    timestamp_ms=st.one_of(st.none(), st.integers(0, 2**41)),
)
batch_st = st.tuples(
    st.lists(record_st, min_size=1, max_size=30),
    st.sampled_from(list(Compression)),
    st.booleans(),  # log append time
)


def _expected_rows(buf: bytes, start: int, end: int, topic: str, partition: int) -> list[dict]:
    rows = []
    for batch in decode_batches(buf):
        if batch.is_control:
            continue
        for record in batch.records:
            if not start <= record.offset < end:
                continue
            millis = batch.max_timestamp if batch.is_log_append_time else record.timestamp_ms
            rows.append(
                {
                    "key": record.key,
                    "value": record.value,
                    "topic": topic,
                    "partition": partition,
                    "offset": record.offset,
                    "timestamp_us": millis * 1000,
                    "timestampType": 1 if batch.is_log_append_time else 0,
                    "headers": [{"key": k, "value": v} for k, v in record.headers],
                }
            )
    return rows


def _actual_rows(batch: pa.RecordBatch | None) -> list[dict]:
    if batch is None:
        return []
    rows = []
    timestamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
    for row, ts in zip(batch.to_pylist(), timestamps, strict=True):
        row.pop("timestamp")
        row["timestamp_us"] = ts
        rows.append(row)
    return rows


def _build_fetch(batches: list[tuple[list[Record], Compression, bool]], base: int = 0) -> bytes:
    out = bytearray()
    offset = base
    for records, codec, append_time in batches:
        out += build_batch(
            records,
            base_offset=offset,
            compression=codec,
            log_append_time=append_time,
            now_ms=1_700_000_000_000,
        )
        offset += len(records)
    return bytes(out)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=4), st.integers(0, 40), st.integers(0, 200))
def test_matches_the_record_decoder(batches, start_cut: int, length: int) -> None:
    buf = _build_fetch(batches, base=1000)
    start = 1000 + start_cut
    end = start + length
    chunk = decode_fetch(
        buf, topic="t", partition=3, start_offset=start, end_offset=end, include_headers=True
    )
    expected = _expected_rows(buf, start, end, "t", 3)
    assert _actual_rows(chunk.batch) == expected
    assert chunk.rows == len(expected)
    if chunk.batch is not None:
        assert chunk.batch.schema.equals(arrow_source_schema(True))
    # Progress: past every batch that starts before the end, never behind the start.
    batch_ends = [1000 + sum(len(r) for r, _, _ in batches[: i + 1]) for i in range(len(batches))]
    batch_starts = [1000, *batch_ends[:-1]]
    reached = [e for b, e in zip(batch_starts, batch_ends, strict=True) if b < end]
    if any(b >= end for b in batch_starts):
        reached.append(end)  # a batch past the end proves the range is complete
    assert chunk.next_offset == max([start, *reached])


def test_without_headers_the_schema_has_no_headers_column() -> None:
    buf = _build_fetch([([Record(b"v", b"k", headers=[("h", b"1")])], Compression.NONE, False)])
    chunk = decode_fetch(buf, topic="t", partition=0, start_offset=0, end_offset=10)
    assert chunk.batch is not None
    assert chunk.batch.schema.equals(arrow_source_schema(False))
    assert chunk.batch.column("value").to_pylist() == [b"v"]


def test_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    whole = _build_fetch([([Record(b"a")] * 3, Compression.NONE, False)])
    second = build_batch([Record(b"b")] * 2, base_offset=3)
    chunk = decode_fetch(
        whole + bytes(second[:-5]), topic="t", partition=0, start_offset=0, end_offset=100
    )
    assert chunk.rows == 3 and chunk.next_offset == 3


def test_read_committed_skips_aborted_transactions_and_markers() -> None:
    pid = 77
    abort_marker = Record(value=struct.pack(">hi", 0, 0), key=struct.pack(">hh", 0, 0))
    commit_marker = Record(value=struct.pack(">hi", 0, 0), key=struct.pack(">hh", 0, 1))
    parts = [
        build_batch([Record(b"plain")], base_offset=0),
        build_batch(
            [Record(b"aborted1"), Record(b"aborted2")],
            base_offset=1,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        build_batch(
            [abort_marker],
            base_offset=3,
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
            is_control=True,
        ),
        build_batch(
            [Record(b"committed")],
            base_offset=4,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=2,
            transactional=True,
        ),
        build_batch(
            [commit_marker],
            base_offset=5,
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
            is_control=True,
        ),
    ]
    buf = b"".join(bytes(p) for p in parts)
    committed = decode_fetch(
        buf,
        topic="t",
        partition=0,
        start_offset=0,
        end_offset=6,
        aborted_transactions=[AbortedTransaction(pid, 1)],
    )
    assert committed.batch is not None
    assert committed.batch.column("value").to_pylist() == [b"plain", b"committed"]
    assert committed.batch.column("offset").to_pylist() == [0, 4]
    assert committed.next_offset == 6
    everything = decode_fetch(buf, topic="t", partition=0, start_offset=0, end_offset=6)
    assert everything.batch is not None
    assert everything.batch.column("offset").to_pylist() == [0, 1, 2, 4]


def test_only_control_batches_give_no_rows_but_progress() -> None:
    marker = Record(value=struct.pack(">hi", 0, 0), key=struct.pack(">hh", 0, 1))
    buf = bytes(
        build_batch(
            [marker],
            base_offset=9,
            producer_id=1,
            producer_epoch=0,
            transactional=True,
            is_control=True,
        )
    )
    chunk = decode_fetch(buf, topic="t", partition=0, start_offset=9, end_offset=20)
    assert chunk.batch is None and chunk.rows == 0 and chunk.next_offset == 10


def test_bad_bytes_raise_corrupt_record_error_only() -> None:
    rng = random.Random(7)
    good = _build_fetch(
        [
            (
                [
                    Record(
                        bytes(rng.randrange(256) for _ in range(rng.randrange(60))),
                        headers=[("k", b"v")],
                    )
                    for _ in range(20)
                ],
                codec,
                False,
            )
            for codec in (Compression.NONE, Compression.GZIP, Compression.ZSTD)
        ]
    )
    outcomes = {"ok": 0, "corrupt": 0}
    for trial in range(400):
        mutated = bytearray(good)
        for _ in range(1 + trial % 4):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        for verify in (True, False):
            try:
                decode_fetch(
                    bytes(mutated),
                    topic="t",
                    partition=0,
                    start_offset=0,
                    end_offset=10**9,
                    include_headers=True,
                    verify_crc=verify,
                )
                outcomes["ok"] += 1
            except CorruptRecordError:
                outcomes["corrupt"] += 1
    assert outcomes["corrupt"] > 0


@pytest.mark.parametrize("cut", [1, 12, 60, 61, 62, 100])
def test_cut_batches_never_crash(cut: int) -> None:
    buf = _build_fetch([([Record(b"x" * 50, b"k")] * 4, Compression.NONE, False)])
    chunk = decode_fetch(buf[:cut], topic="t", partition=0, start_offset=0, end_offset=10)
    assert chunk.batch is None and chunk.next_offset == 0


def test_hostile_record_length_is_rejected_without_crc() -> None:
    buf = bytearray(_build_fetch([([Record(b"x" * 50)] * 2, Compression.NONE, False)]))
    buf[61] = 0x7E  # first record's length varint: 63 instead of the real length
    with pytest.raises(CorruptRecordError):
        decode_fetch(
            bytes(buf), topic="t", partition=0, start_offset=0, end_offset=10, verify_crc=False
        )


size_pattern = st.lists(
    st.tuples(st.integers(1, 400), st.integers(0, 40), st.booleans()), min_size=1, max_size=6
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(size_pattern, st.sampled_from([Compression.NONE, Compression.LZ4]))
def test_runs_of_equal_size_records_decode_exactly(pattern, codec) -> None:
    """Long runs of equal-size records (the vectorised path), broken by size changes, nulls and
    the offset delta growing from one varint byte to two at record 64."""
    records = []
    for run_length, value_size, null_key in pattern:
        for _ in range(run_length):
            i = len(records)
            key = None if null_key else b"k%07d" % i
            records.append(Record(bytes([i % 251]) * value_size, key, timestamp_ms=1000 + i % 3))
    buf = bytes(build_batch(records, base_offset=5, compression=codec, now_ms=2000))
    chunk = decode_fetch(
        buf, topic="t", partition=0, start_offset=0, end_offset=10**6, include_headers=True
    )
    assert _actual_rows(chunk.batch) == _expected_rows(buf, 0, 10**6, "t", 0)


def test_damage_inside_a_run_never_crashes() -> None:
    """Without the CRC check, a flipped byte in a run of equal records gives an error or
    (when it only changes a value, say an offset delta) rows of the right shape, never a crash."""
    records = [Record(b"x" * 40, b"key") for _ in range(200)]
    clean = bytes(build_batch(records))
    rng = random.Random(3)
    errors = 0
    for _ in range(300):
        mutated = bytearray(clean)
        mutated[61 + rng.randrange(len(clean) - 61)] = rng.randrange(256)
        try:
            chunk = decode_fetch(
                bytes(mutated), topic="t", partition=0, start_offset=0, end_offset=1000,
                verify_crc=False,
            )  # fmt: skip
        except CorruptRecordError:
            errors += 1
            continue
        assert chunk.batch is None or chunk.batch.schema.equals(arrow_source_schema(False))
    assert errors > 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(1, 300), st.integers(50, 70), st.booleans(), st.booleans()),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([Compression.NONE, Compression.LZ4]),
)
def test_many_small_batches_of_fixed_size_records_decode_exactly(batches, codec) -> None:
    """Fetches of many producer-sized batches (the path checking all batches at once): fixed
    sizes whose record length crosses 63/64 (one-byte to two-byte length prefix) as the offset
    delta widens at record 64, and batches of varying sizes mixed in."""
    spec = []
    for count, value_size, varying, null_key in batches:
        records = [
            Record(
                b"v" * (value_size + (i % 5 if varying else 0)),
                None if null_key else b"%08d" % i,
                timestamp_ms=1000 + i,
            )
            for i in range(count)
        ]
        spec.append((records, codec, False))
    buf = _build_fetch(spec, base=70)
    chunk = decode_fetch(
        buf, topic="t", partition=1, start_offset=0, end_offset=10**6, include_headers=True
    )
    assert _actual_rows(chunk.batch) == _expected_rows(buf, 0, 10**6, "t", 1)


def test_damage_in_one_of_many_batches_never_crashes() -> None:
    """A flipped byte in one of several fixed-size batches, CRC unchecked: an error or rows of
    the right shape, never a crash, and never records running across a batch boundary."""
    batch = [Record(b"x" * 40, b"key") for _ in range(100)]
    clean = _build_fetch([(batch, Compression.NONE, False)] * 4)
    rng = random.Random(5)
    errors = 0
    for _ in range(300):
        mutated = bytearray(clean)
        mutated[rng.randrange(len(clean))] = rng.randrange(256)
        try:
            chunk = decode_fetch(
                bytes(mutated), topic="t", partition=0, start_offset=0, end_offset=1000,
                verify_crc=False,
            )  # fmt: skip
        except CorruptRecordError:
            errors += 1
            continue
        if chunk.batch is not None:
            assert chunk.batch.schema.equals(arrow_source_schema(False))
            values = chunk.batch.column("value").to_pylist()
            assert all(v is None or len(v) < len(clean) // 4 for v in values)
    assert errors > 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=40), st.booleans())
def test_bulk_varints_match_the_record_layer(values: list[int], narrow: bool) -> None:
    """Every zigzag varlong, 1 to 10 bytes, decodes as the record layer's encoder wrote it,
    also when all of a column share one width (the fast paths of _varints)."""
    import numpy as np

    from odradek.records.varint import encode_varlong
    from odradek.spark.columnar import _varints

    if narrow:
        values = [v % 64 for v in values]  # every one a single byte
    encoded = [encode_varlong(v) for v in values]
    positions = np.cumsum([0] + [len(e) for e in encoded[:-1]]).astype(np.int64)
    arr = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    decoded, after = _varints(arr, positions)
    assert decoded.tolist() == values
    assert (after - positions).tolist() == [len(e) for e in encoded]
