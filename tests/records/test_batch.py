"""Record batches: round trips, flags, timestamps, rebuilds, and interop with aiokafka and kio."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch as kio_read_batch

from odradek.records import (
    Compression,
    CorruptRecordError,
    DecodedRecord,
    Record,
    build_batch,
    decode_batch,
    decode_batches,
    rebuild_batch,
)
from odradek.records.header import (
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    check_crc,
    parse_header,
    set_base_offset,
)

NOW = 1_700_000_000_000
CODECS = list(Compression)


def _records(count: int = 5) -> list[Record]:
    return [
        Record(
            value=b"value-%d " % i * (i + 1),
            key=None if i % 3 == 0 else b"key-%d" % i,
            headers=[("trace", b"t%d" % i), ("empty", None)] if i % 2 else (),
            timestamp_ms=NOW + 10 * i,
        )
        for i in range(count)
    ]


def _same(decoded: DecodedRecord, record: Record, offset: int, timestamp: int) -> None:
    assert decoded.offset == offset
    assert decoded.timestamp_ms == timestamp
    assert decoded.key == record.key
    assert decoded.value == record.value
    assert decoded.headers == list(record.headers)
    assert decoded.attributes == 0


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec: Compression) -> None:
    records = _records(50)
    raw = build_batch(records, base_offset=1000, compression=codec, now_ms=NOW)
    batch = decode_batch(raw)
    assert batch.compression is codec
    assert batch.size == len(raw)
    assert (batch.base_offset, batch.last_offset, batch.next_offset) == (1000, 1049, 1050)
    assert batch.header.records_count == 50
    assert batch.header.base_timestamp == NOW
    assert batch.max_timestamp == NOW + 490
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.partition_leader_epoch == -1
    assert not (batch.is_control or batch.is_transactional or batch.is_log_append_time)
    for i, (decoded, record) in enumerate(zip(batch.records, records, strict=True)):
        _same(decoded, record, 1000 + i, NOW + 10 * i)


def test_compression_shrinks_repetitive_batches() -> None:
    records = [Record(value=b"the same bytes again " * 20) for _ in range(100)]
    plain = len(build_batch(records, now_ms=NOW))
    for codec in Compression:
        if codec is not Compression.NONE:
            assert len(build_batch(records, compression=codec, now_ms=NOW)) < plain / 5


def test_missing_timestamps_take_now() -> None:
    records = [Record(value=b"a"), Record(value=b"b", timestamp_ms=NOW - 7), Record(value=b"c")]
    batch = decode_batch(build_batch(records, now_ms=NOW))
    assert [r.timestamp_ms for r in batch.records] == [NOW, NOW - 7, NOW]
    assert batch.header.base_timestamp == NOW
    assert batch.max_timestamp == NOW


def test_wall_clock_when_now_is_not_given() -> None:
    import time

    before = time.time_ns() // 1_000_000
    batch = decode_batch(build_batch([Record(value=b"x")]))
    after = time.time_ns() // 1_000_000
    assert before <= batch.records[0].timestamp_ms <= after


def test_log_append_time_reports_the_append_time_for_every_record() -> None:
    raw = build_batch(_records(3), log_append_time=True, now_ms=NOW + 99_999)
    batch = decode_batch(raw)
    assert batch.is_log_append_time
    assert batch.header.attributes & TIMESTAMP_TYPE_MASK
    assert [r.timestamp_ms for r in batch.records] == [NOW + 99_999] * 3
    assert [r.timestamp for r in DefaultRecordBatch(bytes(raw))] == [NOW + 99_999] * 3


def test_producer_and_transaction_fields() -> None:
    raw = build_batch(
        _records(4),
        producer_id=12345678901,
        producer_epoch=7,
        base_sequence=2**31 - 2,
        transactional=True,
        partition_leader_epoch=42,
        now_ms=NOW,
    )
    batch = decode_batch(raw)
    assert batch.is_transactional and not batch.is_control
    assert batch.header.attributes == TRANSACTIONAL_MASK
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        12345678901,
        7,
        2**31 - 2,
    )
    assert batch.header.last_sequence == 1  # wraps past int32 max as Kafka does
    assert batch.partition_leader_epoch == 42
    theirs = DefaultRecordBatch(bytes(raw))
    assert (theirs.producer_id, theirs.producer_epoch, theirs.is_transactional) == (
        12345678901,
        7,
        True,
    )


def test_control_flag() -> None:
    raw = build_batch(
        [Record(value=b"v", key=b"\x00\x00\x00\x01")],
        producer_id=1,
        transactional=True,
        is_control=True,
        now_ms=NOW,
    )
    batch = decode_batch(raw)
    assert batch.is_control and batch.is_transactional
    assert batch.header.attributes == TRANSACTIONAL_MASK | CONTROL_MASK


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"producer_epoch": 2**15}, "out of range"),
        ({"partition_leader_epoch": 2**31}, "out of range"),
        ({"base_offset": 2**63}, "out of range"),
        ({"base_sequence": -(2**31) - 1}, "out of range"),
        ({"transactional": True}, "producer id"),
    ],
)
def test_bad_header_fields_raise_value_error(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_batch(_records(1), now_ms=NOW, **kwargs)  # type: ignore[arg-type]


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])


def test_non_bytes_values_raise_type_error() -> None:
    with pytest.raises(TypeError, match="must be bytes"):
        build_batch([Record(value="text")], now_ms=NOW)  # type: ignore[arg-type]


def test_bytes_like_keys_and_values_are_accepted() -> None:
    records = [
        Record(value=bytearray(b"ba"), key=memoryview(b"mv"), headers=[("h", bytearray(b"x"))])
    ]
    decoded = decode_batch(build_batch(records, now_ms=NOW)).records[0]
    assert (decoded.key, decoded.value, decoded.headers) == (b"mv", b"ba", [("h", b"x")])


def test_large_fields_use_multi_byte_varints() -> None:
    records = [
        Record(
            value=b"v" * 70_000,
            key=b"k" * 20_000,
            headers=[("h" * 300, b"x" * 17_000)],
            timestamp_ms=NOW,
        ),
        Record(value=None, timestamp_ms=NOW - 2**40),
        Record(value=b"", timestamp_ms=NOW + 2**45),
    ]
    batch = decode_batch(build_batch(records, now_ms=NOW))
    for i, (decoded, record) in enumerate(zip(batch.records, records, strict=True)):
        _same(decoded, record, i, record.timestamp_ms or 0)


def test_many_records_need_long_offset_deltas() -> None:
    records = [Record(value=b"%d" % i, timestamp_ms=NOW + i) for i in range(20_000)]
    raw = build_batch(records, base_offset=2**40, compression=Compression.LZ4, now_ms=NOW)
    batch = decode_batch(raw)
    assert [r.offset for r in batch.records] == list(range(2**40, 2**40 + 20_000))
    assert batch.records[-1].value == b"19999" and batch.records[-1].timestamp_ms == NOW + 19_999


def test_header_keys_that_are_not_utf8_survive_a_round_trip() -> None:
    key = b"\xffbad\xfe".decode("utf-8", "surrogateescape")
    raw = build_batch([Record(value=b"v", headers=[(key, b"x"), ("ключ", b"y")])], now_ms=NOW)
    assert b"\xffbad\xfe" in raw and "ключ".encode() in raw
    assert decode_batch(raw).records[0].headers == [(key, b"x"), ("ключ", b"y")]


# --------------------------------------------------------------------------- hypothesis

blobs = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=40)), max_size=4)
records_strategy = st.lists(
    st.builds(
        Record,
        value=blobs,
        key=blobs,
        headers=headers,
        timestamp_ms=st.none() | st.integers(0, 2**42),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=80, deadline=None)
@given(
    records=records_strategy,
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
    producer_id=st.integers(0, 2**62),
    transactional=st.booleans(),
    is_control=st.booleans(),
    log_append_time=st.booleans(),
    now_ms=st.integers(0, 2**42),
)
def test_round_trip_property(
    records: list[Record],
    codec: Compression,
    base_offset: int,
    producer_id: int,
    transactional: bool,
    is_control: bool,
    log_append_time: bool,
    now_ms: int,
) -> None:
    raw = build_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=3,
        base_sequence=11,
        transactional=transactional,
        is_control=is_control,
        log_append_time=log_append_time,
        now_ms=now_ms,
    )
    batch = decode_batch(raw)
    stamps = [now_ms if r.timestamp_ms is None else r.timestamp_ms for r in records]
    expected_max = now_ms if log_append_time else max(stamps)
    assert batch.max_timestamp == expected_max
    assert batch.header.base_timestamp == stamps[0]
    assert (batch.is_transactional, batch.is_control, batch.is_log_append_time) == (
        transactional,
        is_control,
        log_append_time,
    )
    assert batch.compression is codec and batch.producer_id == producer_id
    for i, (decoded, record) in enumerate(zip(batch.records, records, strict=True)):
        _same(decoded, record, base_offset + i, expected_max if log_append_time else stamps[i])
    # An independent reader agrees (aiokafka, which has its own codecs and parser).
    theirs = DefaultRecordBatch(bytes(raw))
    assert theirs.validate_crc()
    assert [(r.offset, r.key, r.value, r.headers) for r in theirs] == [
        (r.offset, r.key, r.value, r.headers) for r in batch.records
    ]


@settings(max_examples=40, deadline=None)
@given(records=records_strategy, codec=st.sampled_from(CODECS))
def test_we_read_what_aiokafka_builds(records: list[Record], codec: Compression) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**30,
    )
    for i, r in enumerate(records):
        builder.append(
            i, timestamp=r.timestamp_ms or NOW, key=r.key, value=r.value, headers=list(r.headers)
        )
    batch = decode_batch(builder.build())
    for i, (decoded, record) in enumerate(zip(batch.records, records, strict=True)):
        _same(decoded, record, i, record.timestamp_ms or NOW)


def test_kio_reads_our_uncompressed_batches() -> None:
    records = _records(6)
    raw = build_batch(records, base_offset=77, now_ms=NOW)
    theirs, size = kio_read_batch(bytes(raw), 0)
    assert size == len(raw)
    assert [(r.offset, r.key, r.value) for r in theirs.records] == [
        (77 + i, r.key, r.value) for i, r in enumerate(records)
    ]
    assert [[(h.key, h.value) for h in r.headers] for r in theirs.records] == [
        [(k.encode(), v) for k, v in r.headers] for r in records
    ]


# --------------------------------------------------------------------------- decode details


def test_decode_at_a_position_inside_a_bigger_buffer() -> None:
    raw = build_batch(_records(3), base_offset=5, compression=Compression.ZSTD, now_ms=NOW)
    buf = b"junk" * 10 + bytes(raw) + b"more junk"
    for view in (buf, bytearray(buf), memoryview(buf)):
        batch = decode_batch(view, 40)
        assert [r.offset for r in batch.records] == [5, 6, 7]


def test_negative_position_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        decode_batch(build_batch(_records(1), now_ms=NOW), -1)


def test_decode_batches_stops_at_a_partial_tail() -> None:
    batches = [
        build_batch(_records(3), base_offset=0, compression=codec, now_ms=NOW)
        for codec in (Compression.NONE, Compression.GZIP, Compression.SNAPPY)
    ]
    buf = bytearray(b"".join(batches))
    set_base_offset(buf, len(batches[0]), 3)
    set_base_offset(buf, len(batches[0]) + len(batches[1]), 6)
    tail = build_batch(_records(2), now_ms=NOW)
    for cut in (0, 5, 12, 61, len(tail) - 1):
        decoded = list(decode_batches(bytes(buf) + bytes(tail[:cut])))
        assert [r.offset for b in decoded for r in b.records] == list(range(9))
    assert list(decode_batches(b"")) == []


def test_decode_batches_raises_for_a_corrupt_whole_batch() -> None:
    raw = build_batch(_records(3), now_ms=NOW)
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(decode_batches(bytes(build_batch(_records(1), now_ms=NOW)) + raw))


def test_verify_crc_false_skips_the_check() -> None:
    raw = build_batch(_records(3), now_ms=NOW)
    raw[17] ^= 0x01  # the stored CRC itself
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batch(raw)
    assert len(decode_batch(raw, verify_crc=False).records) == 3


def test_max_uncompressed_bounds_the_records_section() -> None:
    records = [Record(value=b"\x00" * 10_000, timestamp_ms=NOW) for _ in range(100)]
    raw = build_batch(records, compression=Compression.GZIP)
    with pytest.raises(CorruptRecordError, match="more than 100000 bytes"):
        decode_batch(raw, max_uncompressed=100_000)
    assert len(decode_batch(raw, max_uncompressed=2_000_000).records) == 100


def test_unknown_codec_in_attributes_is_corrupt() -> None:
    raw = build_batch(_records(2), now_ms=NOW)
    raw[22] |= 0x07  # attributes low byte: codec 7
    with pytest.raises(CorruptRecordError, match="unknown codec 7"):
        decode_batch(raw, verify_crc=False)


# --------------------------------------------------------------------------- rebuild


def test_rebuild_keeps_offsets_producer_state_and_flags() -> None:
    raw = build_batch(
        _records(10),
        base_offset=100,
        compression=Compression.SNAPPY,
        producer_id=9,
        producer_epoch=2,
        base_sequence=40,
        transactional=True,
        partition_leader_epoch=3,
        now_ms=NOW,
    )
    original = decode_batch(raw)
    kept = [r for r in original.records if r.offset % 3 == 0]  # 102, 105, 108
    rebuilt = decode_batch(rebuild_batch(original, kept))
    assert rebuilt.base_offset == 100 and rebuilt.last_offset == 109
    assert rebuilt.header.records_count == 3
    assert [r.offset for r in rebuilt.records] == [102, 105, 108]
    assert rebuilt.records == kept
    assert (rebuilt.producer_id, rebuilt.producer_epoch, rebuilt.base_sequence) == (9, 2, 40)
    assert rebuilt.header.last_sequence == original.header.last_sequence
    assert rebuilt.is_transactional and rebuilt.compression is Compression.SNAPPY
    assert rebuilt.partition_leader_epoch == 3
    assert rebuilt.header.base_timestamp == kept[0].timestamp_ms
    assert rebuilt.max_timestamp == kept[-1].timestamp_ms
    assert [r.offset for r in DefaultRecordBatch(bytes(rebuild_batch(original, kept)))] == [
        102,
        105,
        108,
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_rebuild_recompresses(codec: Compression) -> None:
    original = decode_batch(build_batch(_records(8), compression=Compression.LZ4, now_ms=NOW))
    rebuilt = decode_batch(rebuild_batch(original, compression=codec, compression_level=None))
    assert rebuilt.compression is codec
    assert rebuilt.records == original.records
    assert rebuilt.header._replace(crc=0, batch_length=0, attributes=0) == original.header._replace(
        crc=0, batch_length=0, attributes=0
    )


def test_rebuild_to_an_empty_batch_keeps_the_header_for_producer_state() -> None:
    original = decode_batch(
        build_batch(
            _records(4),
            base_offset=10,
            producer_id=5,
            base_sequence=8,
            compression=Compression.ZSTD,
            now_ms=NOW,
        )
    )
    raw = rebuild_batch(original, [])
    empty = decode_batch(raw)
    assert empty.records == [] and empty.header.records_count == 0
    assert (empty.base_offset, empty.last_offset, empty.base_sequence) == (10, 13, 8)
    assert empty.compression is Compression.NONE
    assert len(raw) == 61


def test_an_empty_compressed_batch_is_not_decompressed() -> None:
    # Java never decompresses a batch that declares no records; neither do we.
    raw = bytearray(rebuild_batch(decode_batch(build_batch(_records(2), now_ms=NOW)), []))
    raw[22] |= int(Compression.GZIP)
    restamped = decode_batch(raw, verify_crc=False)
    assert restamped.records == [] and restamped.compression is Compression.GZIP


def test_rebuild_with_a_delete_horizon() -> None:
    original = decode_batch(build_batch(_records(4), now_ms=NOW))
    rebuilt = decode_batch(rebuild_batch(original, delete_horizon_ms=NOW + 86_400_000))
    assert rebuilt.has_delete_horizon
    assert rebuilt.header.attributes & DELETE_HORIZON_MASK
    assert rebuilt.header.base_timestamp == NOW + 86_400_000
    assert [r.timestamp_ms for r in rebuilt.records] == [r.timestamp_ms for r in original.records]


def test_rebuild_refuses_foreign_offsets() -> None:
    original = decode_batch(build_batch(_records(2), base_offset=10, now_ms=NOW))
    stranger = DecodedRecord(offset=50, timestamp_ms=NOW, key=None, value=b"x")
    with pytest.raises(ValueError, match="outside"):
        rebuild_batch(original, [stranger])


def test_built_batches_pass_the_header_fast_path() -> None:
    raw = build_batch(_records(7), base_offset=3, compression=Compression.GZIP, now_ms=NOW)
    header = parse_header(raw)
    check_crc(raw, 0, header)
    assert header.size == len(raw)
    assert struct.unpack_from(">i", raw, 8)[0] == len(raw) - 12
