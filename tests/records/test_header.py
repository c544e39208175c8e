"""The 61-byte header fast path: CRC coverage, in-place rewrites, batch iteration."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import Compression, CorruptRecordError, Record, build_batch, decode_batch
from odradek.records.header import (
    ATTRIBUTES_POS,
    HEADER_SIZE,
    BatchHeader,
    assigned,
    check_crc,
    iter_headers,
    parse_header,
    peek_batch_size,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

NOW = 1_700_000_000_000


def _batch(codec: Compression = Compression.NONE, count: int = 6) -> bytearray:
    records = [
        Record(value=b"v%d" % i * 5, key=b"k%d" % i, headers=[("h", b"x")], timestamp_ms=NOW + i)
        for i in range(count)
    ]
    return build_batch(records, base_offset=10, compression=codec, producer_id=3, now_ms=NOW)


@pytest.mark.parametrize("codec", list(Compression))
def test_crc_catches_every_flipped_byte_in_the_covered_range(codec: Compression) -> None:
    raw = _batch(codec)
    header = parse_header(raw)
    check_crc(raw, 0, header)
    for position in range(ATTRIBUTES_POS, len(raw)):
        for flip in (0x01, 0x80, 0xFF):
            raw[position] ^= flip
            with pytest.raises(CorruptRecordError, match="CRC32C"):
                check_crc(raw, 0, header)
            raw[position] ^= flip
    check_crc(raw, 0, header)


@settings(max_examples=200)
@given(st.data())
def test_crc_catches_bursts_up_to_32_bits(data: st.DataObject) -> None:
    raw = _batch(Compression.NONE, count=20)
    header = parse_header(raw)
    start = data.draw(st.integers(ATTRIBUTES_POS, len(raw) - 4))
    burst = data.draw(st.binary(min_size=4, max_size=4).filter(lambda b: b != b"\0\0\0\0"))
    for i, flip in enumerate(burst):
        raw[start + i] ^= flip
    with pytest.raises(CorruptRecordError):
        check_crc(raw, 0, header)


def test_set_base_offset_keeps_the_crc_valid() -> None:
    raw = _batch(Compression.GZIP)
    set_base_offset(raw, 0, 2**40 + 5)
    header = parse_header(raw)
    check_crc(raw, 0, header)
    assert header.base_offset == 2**40 + 5
    assert [r.offset for r in decode_batch(raw).records] == list(range(2**40 + 5, 2**40 + 11))
    assert DefaultRecordBatch(bytes(raw)).validate_crc()


def test_assigned_equals_replace_of_the_three_assigned_fields() -> None:
    # Every field distinct, so a shifted slice would show.
    header = BatchHeader(*range(100, 113))
    got = assigned(header, 7, 8, 9)
    assert type(got) is BatchHeader
    assert got == header._replace(base_offset=7, partition_leader_epoch=8, max_timestamp=9)
    real = parse_header(_batch())
    assert type(real) is BatchHeader
    assert (real.base_offset, real.producer_id, real.records_count) == (10, 3, 6)
    assert assigned(real, 2**40, 3, NOW + 99) == real._replace(
        base_offset=2**40, partition_leader_epoch=3, max_timestamp=NOW + 99
    )


def test_set_partition_leader_epoch_keeps_the_crc_valid() -> None:
    raw = _batch()
    set_partition_leader_epoch(raw, 0, 77)
    header = parse_header(raw)
    check_crc(raw, 0, header)
    assert header.partition_leader_epoch == 77


def test_set_log_append_time_rewrites_and_restamps() -> None:
    raw = _batch(Compression.LZ4)
    set_log_append_time(raw, 0, NOW + 5_000)
    header = parse_header(raw)
    check_crc(raw, 0, header)
    assert header.is_log_append_time and header.max_timestamp == NOW + 5_000
    assert header.compression == Compression.LZ4 and header.producer_id == 3
    assert {r.timestamp_ms for r in decode_batch(raw).records} == {NOW + 5_000}
    theirs = DefaultRecordBatch(bytes(raw))
    assert theirs.validate_crc() and theirs.timestamp_type == 1


def test_rewrites_work_on_a_batch_inside_a_bigger_buffer() -> None:
    first, second = _batch(), _batch(Compression.SNAPPY)
    buf = bytearray(first + second)
    set_base_offset(buf, len(first), 500)
    set_log_append_time(buf, len(first), NOW)
    positions = [(pos, h.base_offset) for pos, h in iter_headers(buf)]
    assert positions == [(0, 10), (len(first), 500)]


def test_iter_headers_stops_at_a_partial_tail_and_raises_on_corruption() -> None:
    first, second = _batch(), _batch(Compression.ZSTD)
    for cut in range(len(second)):
        assert [pos for pos, _ in iter_headers(bytes(first + second[:cut]))] == [0]
    second[-1] ^= 0x10
    with pytest.raises(CorruptRecordError):
        list(iter_headers(bytes(first + second)))
    assert len(list(iter_headers(bytes(first + second), verify_crc=False))) == 2


def test_parse_header_errors() -> None:
    raw = _batch()
    with pytest.raises(CorruptRecordError, match="truncated"):
        parse_header(raw[: HEADER_SIZE - 1])
    bad_magic = bytearray(raw)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        parse_header(bad_magic)
    negative_count = bytearray(raw)
    struct.pack_into(">i", negative_count, 57, -1)
    with pytest.raises(CorruptRecordError, match="negative"):
        parse_header(negative_count)
    with pytest.raises(CorruptRecordError, match="negative"):
        parse_header(raw, -3)


def test_peek_batch_size() -> None:
    raw = _batch()
    assert peek_batch_size(raw[:11]) is None
    assert peek_batch_size(raw[:12]) == len(raw)
    tiny = bytearray(raw)
    struct.pack_into(">i", tiny, 8, 48)
    with pytest.raises(CorruptRecordError, match="minimum"):
        peek_batch_size(tiny)


def test_truncated_batch_fails_check_crc_not_with_index_error() -> None:
    raw = _batch()
    header = parse_header(raw)
    with pytest.raises(CorruptRecordError, match="truncated"):
        check_crc(raw[:-1], 0, header)
    with pytest.raises(CorruptRecordError, match="truncated"):
        set_log_append_time(bytearray(raw[:-1]), 0, NOW)
