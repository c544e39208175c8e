"""Zigzag varints: known vectors, round trips, and strict rejection of bad bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio._kio_native import read_signed_varint, read_signed_varlong

from odradek.records.errors import CorruptRecordError
from odradek.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    varint_size,
    varlong_size,
    zigzag_decode,
    zigzag_encode,
)

int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)

VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (100, "c801"),
    (8191, "fe7f"),
    (8192, "808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "hex_bytes"), VECTORS)
def test_known_vectors(value: int, hex_bytes: str) -> None:
    raw = bytes.fromhex(hex_bytes)
    assert encode_varint(value) == raw
    assert encode_varlong(value) == raw
    assert decode_varint(raw) == (value, len(raw))
    assert decode_varlong(raw) == (value, len(raw))
    assert varint_size(value) == len(raw)


def test_int64_extremes() -> None:
    assert encode_varlong(INT64_MIN) == b"\xff" * 9 + b"\x01"
    assert encode_varlong(INT64_MAX) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert decode_varlong(b"\xff" * 9 + b"\x01") == (INT64_MIN, 10)
    assert varlong_size(INT64_MIN) == 10


@settings(max_examples=300)
@given(int32s)
def test_varint_round_trip_and_agrees_with_kio(value: int) -> None:
    raw = encode_varint(value)
    assert len(raw) == varint_size(value) <= 5
    padded = b"\x99" + raw + b"\x42"
    assert decode_varint(padded, 1) == (value, 1 + len(raw))
    assert read_signed_varint(raw, 0) == (value, len(raw))


@settings(max_examples=300)
@given(int64s)
def test_varlong_round_trip_and_agrees_with_kio(value: int) -> None:
    raw = encode_varlong(value)
    assert len(raw) == varlong_size(value) <= 10
    assert decode_varlong(raw + b"\x00") == (value, len(raw))
    assert read_signed_varlong(raw, 0) == (value, len(raw))
    assert zigzag_decode(zigzag_encode(value)) == value


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1, 2**40])
def test_encode_varint_out_of_range(value: int) -> None:
    with pytest.raises(ValueError):
        encode_varint(value)
    with pytest.raises(ValueError):
        varint_size(value)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_encode_varlong_out_of_range(value: int) -> None:
    with pytest.raises(ValueError):
        encode_varlong(value)
    with pytest.raises(ValueError):
        varlong_size(value)


@pytest.mark.parametrize(
    "raw",
    [
        b"",  # nothing there
        b"\x80",  # continuation bit, then nothing
        b"\xff\xff\xff\xff",  # four continuation bytes, truncated
        b"\xff\xff\xff\xff\xff\x01",  # six bytes
        b"\xff\xff\xff\xff\x1f",  # fifth byte carries bits beyond 32
        b"\xff\xff\xff\xff\x7f",
    ],
)
def test_bad_varints_are_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(raw)


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x80" * 9, b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02", b"\xff" * 9 + b"\x7f"],
)
def test_bad_varlongs_are_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_varlong(raw)


@pytest.mark.parametrize("pos", [-1, 3, 100])
def test_positions_outside_the_buffer_are_corrupt(pos: int) -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x02\x04\x06", pos)
    with pytest.raises(CorruptRecordError):
        decode_varlong(b"\x02\x04\x06", pos)


def test_reads_bytearray_and_memoryview() -> None:
    raw = encode_varint(-300) + encode_varlong(2**50)
    for buf in (bytearray(raw), memoryview(raw)):
        value, pos = decode_varint(buf)
        assert value == -300
        assert decode_varlong(buf, pos) == (2**50, len(raw))


@settings(max_examples=300)
@given(st.binary(max_size=12), st.integers(0, 12))
def test_random_bytes_decode_or_raise_corrupt(raw: bytes, pos: int) -> None:
    for decode, low, high in (
        (decode_varint, INT32_MIN, INT32_MAX),
        (decode_varlong, INT64_MIN, INT64_MAX),
    ):
        try:
            value, end = decode(raw, pos)
        except CorruptRecordError:
            continue
        assert low <= value <= high
        assert pos < end <= len(raw)
