"""validate_records: the per-record walk a leader runs before it stores a batch.

Two properties carry most of the weight: every batch the encoder builds passes, and
for any single mutation of a records section (CRC re-stamped so it gets past the
checksum), the walk accepts exactly when the full decoder accepts and the offsets are
0..n-1. The hand-made cases are the ones the task names: a count smaller or larger
than the records present, random bytes behind a valid CRC, out-of-order offset deltas
and decompression bombs in every codec.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import (
    Compression,
    CorruptRecordError,
    Record,
    build_batch,
    decode_batch,
    validation,
)
from odradek.records.batch import DecodedRecord, _encode_records
from odradek.records.compression import compress
from odradek.records.errors import InvalidRecordsError, UncompressedSizeError
from odradek.records.header import compute_crc, iter_headers, parse_header
from odradek.records.validation import (
    MIN_UNCOMPRESSED_LIMIT,
    UNCOMPRESSED_RATIO,
    uncompressed_limit,
    validate_records,
)
from tests.helpers.bombs import bomb_batch, lying_snappy_batch

NOW = 1_700_000_000_000
C_WALK = validation._c_walk  # None when the extension is not built
WALKERS = ["c", "python"] if C_WALK is not None else ["python"]
LIMIT = 1 << 20
_HEADER = struct.Struct(">qiibIhiqqqhii")


@pytest.fixture(scope="module", params=WALKERS, autouse=True)
def walker(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test runs with the C walk (when built) and with the Python one."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "python":
            patch.setattr(validation, "_c_walk", None)
        yield request.param


def restamp(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
    return buf


def craft(
    section: bytes, count: int, codec: Compression = Compression.NONE, last_delta: int | None = None
) -> bytearray:
    """A batch header with a valid CRC around an arbitrary records section."""
    body = compress(codec, section) if codec is not Compression.NONE else section
    out = bytearray(_HEADER.size) + body
    _HEADER.pack_into(
        out, 0, 0, len(out) - 12, -1, 2, 0, int(codec),
        count - 1 if last_delta is None else last_delta,
        NOW, NOW, -1, -1, -1, count,
    )  # fmt: skip
    return restamp(out)


def check(buf: bytes | bytearray, limit: int = LIMIT) -> object:
    return validate_records(buf, 0, parse_header(buf), max_uncompressed=limit)


def section_of(records: list[Record]) -> bytes:
    return _encode_records(records, NOW, NOW, None)


def three() -> list[Record]:
    return [Record(value=b"v%d" % i, key=b"k", timestamp_ms=NOW + i) for i in range(3)]


# --------------------------------------------------------------------------- accepted


header_values = st.one_of(st.none(), st.binary(max_size=20))
records_strategy = st.lists(
    st.builds(
        Record,
        value=st.one_of(st.none(), st.binary(max_size=300)),
        key=st.one_of(st.none(), st.binary(max_size=40)),
        headers=st.lists(st.tuples(st.text(max_size=8), header_values), max_size=3),
        timestamp_ms=st.one_of(st.none(), st.integers(NOW - 10**9, NOW + 10**9)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_strategy, codec=st.sampled_from(list(Compression)))
def test_every_encoded_batch_passes(records: list[Record], codec: Compression) -> None:
    buf = build_batch(records, compression=codec, now_ms=NOW)
    summary = check(buf)
    decoded = decode_batch(buf)
    timestamps = [r.timestamp_ms for r in decoded.records]
    assert summary.min_timestamp == min(timestamps)  # type: ignore[attr-defined]
    assert summary.max_timestamp == max(timestamps)  # type: ignore[attr-defined]
    assert summary.null_keys == sum(r.key is None for r in records)  # type: ignore[attr-defined]


def test_a_batch_inside_a_larger_buffer_is_walked_in_place() -> None:
    first = build_batch(three(), now_ms=NOW)
    second = build_batch([Record(value=b"x", key=None)], now_ms=NOW)
    buf = bytearray(first + second)
    summary = validate_records(
        buf, len(first), parse_header(buf, len(first)), max_uncompressed=LIMIT
    )
    assert summary.null_keys == 1


def test_log_append_time_batches_report_the_header_time() -> None:
    buf = build_batch(three(), log_append_time=True, now_ms=NOW + 99)
    summary = check(buf)
    assert summary.min_timestamp == summary.max_timestamp == NOW + 99  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- refused


def test_a_timestamp_past_int64_is_refused() -> None:
    buf = craft(section_of(three()), 3)  # deltas 0, 1, 2 from baseTimestamp
    struct.pack_into(">q", buf, 27, (1 << 63) - 2)  # baseTimestamp: delta 2 overflows
    with pytest.raises(InvalidRecordsError, match="64 bits"):
        check(restamp(buf))


def test_count_one_holding_three_records() -> None:
    with pytest.raises(InvalidRecordsError, match="remain after"):
        check(craft(section_of(three()), count=1))


def test_count_a_thousand_holding_one_record() -> None:
    with pytest.raises(InvalidRecordsError):
        check(craft(section_of(three()[:1]), count=1000))


def test_count_a_thousand_holding_enough_bytes_for_a_thousand() -> None:
    # Enough bytes for the count check up front, but they are one record and padding.
    big = [Record(value=b"x" * 8000, key=b"k", timestamp_ms=NOW)]
    with pytest.raises(InvalidRecordsError):
        check(craft(section_of(big), count=1000))


@pytest.mark.parametrize("seed", range(20))
def test_forty_random_bytes_behind_a_valid_crc(seed: int) -> None:
    junk = os.urandom(40)
    with pytest.raises(InvalidRecordsError):
        check(craft(junk, count=1))
    with pytest.raises(InvalidRecordsError):
        check(craft(junk, count=3))


def test_forty_random_bytes_compressed_are_refused() -> None:
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        with pytest.raises(InvalidRecordsError):
            check(craft(os.urandom(40), count=2, codec=codec))


def test_garbage_instead_of_a_compressed_stream_is_corrupt_not_invalid() -> None:
    buf = craft(b"", count=1)
    buf[21 + 1] |= int(Compression.ZSTD)  # attributes low byte: claims zstd
    buf += os.urandom(40)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    restamp(buf)
    with pytest.raises(CorruptRecordError) as info:
        check(buf)
    assert not isinstance(info.value, InvalidRecordsError)


@pytest.mark.parametrize("deltas", [[0, 0, 0], [0, 2, 1], [1, 2, 3], [0, 1, 5]])
def test_offset_deltas_must_be_the_record_positions(deltas: list[int]) -> None:
    records = [DecodedRecord(offset=d, timestamp_ms=NOW, key=b"k", value=b"v") for d in deltas]
    section = _encode_records(records, NOW, NOW, 0)
    with pytest.raises(InvalidRecordsError, match="offset delta"):
        check(craft(section, count=3))


def test_record_length_one_byte_short_or_long() -> None:
    section = bytearray(section_of(three()[:1]))
    for change in (-1, 1):
        tampered = bytearray(section)
        tampered[0] += 2 * change  # zigzag: length +-1
        with pytest.raises(InvalidRecordsError):
            check(craft(bytes(tampered), count=1))


@pytest.mark.parametrize("length", [-2, -100])
def test_negative_key_lengths_other_than_null(length: int) -> None:
    from odradek.records.varint import encode_varint

    body = b"\x00\x00\x00" + encode_varint(length) + b"\x01\x00"
    section = encode_varint(len(body)) + body
    with pytest.raises(InvalidRecordsError):
        check(craft(section, count=1))


def test_negative_header_count_and_header_key_length() -> None:
    from odradek.records.varint import encode_varint

    for headers in (encode_varint(-1), encode_varint(1) + encode_varint(-1) + b"\x01"):
        body = b"\x00\x00\x00\x01\x01" + headers
        section = encode_varint(len(body)) + body
        with pytest.raises(InvalidRecordsError):
            check(craft(section, count=1))


def test_overlong_varint_is_invalid() -> None:
    body = b"\x00" + b"\xff" * 11 + b"\x00\x01\x01\x00"
    section = bytes([len(body) * 2]) + body
    with pytest.raises(InvalidRecordsError):
        check(craft(section, count=1))


# --------------------------------------------------------------------------- mutations


def _decoder_accepts(buf: bytearray) -> bool:
    try:
        decoded = decode_batch(buf)
    except CorruptRecordError:
        return False
    return [r.offset for r in decoded.records] == list(range(len(decoded.records)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_strategy,
    where=st.floats(0, 1, exclude_max=True),
    value=st.integers(0, 255),
)
def test_any_single_byte_mutation_is_caught_or_harmless(
    records: list[Record], where: float, value: int
) -> None:
    buf = build_batch(records, now_ms=NOW)
    position = 61 + int(where * (len(buf) - 61))
    buf[position] = value
    restamp(buf)
    try:
        check(buf)
    except InvalidRecordsError:
        assert not _decoder_accepts(buf)
    else:
        # Harmless: the mutation hit a key, value or timestamp byte; the batch still
        # decodes to exactly its count of records at offsets 0..n-1.
        assert _decoder_accepts(buf)


@settings(max_examples=150, deadline=None)
@given(records=records_strategy, count=st.integers(0, 2000))
def test_any_record_count_other_than_the_real_one_is_caught(
    records: list[Record], count: int
) -> None:
    buf = build_batch(records, now_ms=NOW)
    struct.pack_into(">i", buf, 57, count)
    restamp(buf)
    if count == len(records):
        check(buf)
    else:
        with pytest.raises(InvalidRecordsError):
            check(buf)


@settings(max_examples=150, deadline=None)
@given(records=records_strategy, codec=st.sampled_from(list(Compression)[1:]))
def test_mutations_inside_compressed_sections_are_caught_or_harmless(
    records: list[Record], codec: Compression
) -> None:
    section = bytearray(section_of(records))
    position = len(section) // 2
    section[position] ^= 0x55
    buf = craft(bytes(section), count=len(records), codec=codec)
    try:
        check(buf)
    except InvalidRecordsError:
        assert not _decoder_accepts(buf)
    else:
        assert _decoder_accepts(buf)


# --------------------------------------------------------------------------- bombs


def test_limit_follows_message_max_bytes() -> None:
    assert uncompressed_limit(1048588) == UNCOMPRESSED_RATIO * 1048588
    assert uncompressed_limit(5000) == UNCOMPRESSED_RATIO * MIN_UNCOMPRESSED_LIMIT


@pytest.mark.parametrize(
    ("codec", "size"),
    [
        (Compression.ZSTD, 1 << 30),
        (Compression.GZIP, 128 << 20),
        (Compression.LZ4, 64 << 20),
        (Compression.SNAPPY, 64 << 20),
    ],
)
def test_bombs_are_refused_at_the_limit(codec: Compression, size: int) -> None:
    buf = bomb_batch(codec, size, timestamp_ms=NOW)
    started = time.monotonic()
    with pytest.raises(UncompressedSizeError):
        check(buf, limit=8 << 20)
    assert time.monotonic() - started < 10  # generous: the work stops at 8 MiB
    # The same batch below the limit is a valid one-record batch.
    if size <= 64 << 20:
        check(buf, limit=size + 64)


def test_raw_snappy_declaring_a_gigabyte_is_refused_before_inflating() -> None:
    with pytest.raises(CorruptRecordError):
        check(lying_snappy_batch(), limit=uncompressed_limit(1048588))


@pytest.mark.skipif(C_WALK is None, reason="the C walk is not built")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_strategy,
    mutations=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=3
    ),
)
def test_c_and_python_walks_agree(
    records: list[Record], mutations: list[tuple[float, int]]
) -> None:
    buf = build_batch(records, now_ms=NOW)
    for where, value in mutations:
        buf[61 + int(where * (len(buf) - 61))] = value
    header = parse_header(buf)
    from_c = C_WALK(buf, 61, len(buf), header.records_count)
    try:
        from_python: object = validation._walk(buf, 61, len(buf), header.records_count)
    except (CorruptRecordError, IndexError):
        from_python = "error"
    assert isinstance(from_c, str) == (from_python == "error")
    if not isinstance(from_c, str):
        assert from_c == from_python


def test_c_walk_never_reads_outside_its_range() -> None:
    if C_WALK is None:
        pytest.skip("the C walk is not built")
    buf = build_batch(three(), now_ms=NOW)
    # The section ends one byte early: the walk must fail, not read the last byte.
    assert isinstance(C_WALK(buf, 61, len(buf) - 1, 3), str)
    with pytest.raises(ValueError):
        C_WALK(buf, 61, len(buf) + 1, 3)


@pytest.mark.parametrize(
    "name", sorted(p.name for p in (Path(__file__).parent / "data").glob("librdkafka_*.bin"))
)
def test_batches_librdkafka_really_produced_pass(name: str) -> None:
    raw = (Path(__file__).parent / "data" / name).read_bytes()
    for pos, header in iter_headers(raw):
        summary = validate_records(raw, pos, header, max_uncompressed=uncompressed_limit(1048588))
        decoded = decode_batch(raw, pos)
        assert summary.max_timestamp == max(r.timestamp_ms for r in decoded.records)
