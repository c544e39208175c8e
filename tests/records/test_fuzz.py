"""Hostile input: random bytes, mutations, truncations and lying length fields.

The decoder may only ever return a valid batch or raise CorruptRecordError, and a
length field can never make it allocate more than the bytes actually present.
Mutations re-stamp the CRC so they reach the record decoder instead of stopping at
the checksum.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
from collections.abc import Callable

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import (
    Compression,
    CorruptRecordError,
    DecodedBatch,
    Record,
    build_batch,
    decode_batch,
    decode_batches,
)
from odradek.records.compression import compress
from odradek.records.varint import encode_varint, encode_varlong

NOW = 1_700_000_000_000
INT32_MAX = 2**31 - 1
_HEADER = struct.Struct(">qiibIhiqqqhii")


def restamp(buf: bytearray, pos: int = 0) -> bytearray:
    """Recompute the CRC of the batch at ``pos`` after tampering with it."""
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    end = min(len(buf), pos + 12 + max(length, 0))
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21 : end])))
    return buf


def craft(section: bytes, count: int, codec: Compression = Compression.NONE) -> bytearray:
    """A batch around an arbitrary records section, with a valid CRC."""
    body = compress(codec, section) if codec is not Compression.NONE else section
    out = bytearray(_HEADER.size) + body
    _HEADER.pack_into(
        out,
        0,
        0,
        len(out) - 12,
        -1,
        2,
        0,
        int(codec),
        max(count - 1, 0),
        NOW,
        NOW,
        -1,
        -1,
        -1,
        count,
    )
    return restamp(out)


def record(
    *,
    length: int | None = None,
    timestamp_delta: bytes = b"\x00",
    key_length: int | None = None,
    key: bytes = b"key",
    value_length: int | None = None,
    value: bytes = b"value",
    header_count: int | None = None,
    headers: bytes = b"",
) -> bytes:
    """Raw record bytes whose length fields may lie."""
    body = (
        b"\x00"
        + timestamp_delta
        + b"\x00"
        + encode_varint(len(key) if key_length is None else key_length)
        + key
        + encode_varint(len(value) if value_length is None else value_length)
        + value
        + encode_varint(0 if header_count is None else header_count)
        + headers
    )
    return encode_varint(len(body) if length is None else length) + body


def _outcome(decode: Callable[[], object]) -> object:
    try:
        return decode()
    except CorruptRecordError:
        return None


def _valid(batch: object) -> None:
    assert isinstance(batch, DecodedBatch)
    assert len(batch.records) == batch.header.records_count


def _sample_batch(codec: Compression) -> bytearray:
    records = [
        Record(
            value=None if i == 2 else b"value %d " % i * 3,
            key=None if i == 1 else b"k%d" % i,
            headers=[(f"h{i}", b"x" * i), ("n", None)] if i % 2 else (),
            timestamp_ms=NOW + 1000 * i,
        )
        for i in range(5)
    ]
    return build_batch(records, compression=codec, producer_id=1, now_ms=NOW)


SAMPLES = {codec: bytes(_sample_batch(codec)) for codec in Compression}


# --------------------------------------------------------------------------- random input


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.booleans())
def test_random_bytes(junk: bytes, verify_crc: bool) -> None:
    result = _outcome(lambda: decode_batch(junk, verify_crc=verify_crc))
    if result is not None:
        _valid(result)
    _outcome(lambda: list(decode_batches(junk, verify_crc=verify_crc)))


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=61, max_size=300), st.integers(0, 2**31 - 1), st.booleans())
def test_random_records_behind_a_plausible_header(tail: bytes, count: int, small: bool) -> None:
    count = count % 8 if small else count
    raw = craft(tail[61:], count)
    result = _outcome(lambda: decode_batch(raw))
    if result is not None:
        _valid(result)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(list(Compression)),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
    st.booleans(),
)
def test_mutated_batches(codec: Compression, flips: list[tuple[int, int]], fix_crc: bool) -> None:
    raw = bytearray(SAMPLES[codec])
    for position, mask in flips:
        raw[position % len(raw)] ^= mask
    if fix_crc:
        restamp(raw)
    result = _outcome(lambda: decode_batch(raw, verify_crc=fix_crc, max_uncompressed=1 << 20))
    if result is not None:
        _valid(result)
    _outcome(lambda: list(decode_batches(raw, verify_crc=False)))


@pytest.mark.parametrize("codec", list(Compression))
def test_cut_at_every_length(codec: Compression) -> None:
    whole = SAMPLES[codec]
    for cut in range(len(whole)):
        with pytest.raises(CorruptRecordError):
            decode_batch(whole[:cut])
        assert list(decode_batches(whole[:cut])) == []


@pytest.mark.parametrize("codec", list(Compression))
def test_records_section_cut_at_every_length_behind_a_consistent_header(codec: Compression) -> None:
    # batchLength and CRC agree with the cut, so only the record decoder can object.
    whole = SAMPLES[codec]
    for cut in range(61, len(whole)):
        raw = bytearray(whole[:cut])
        struct.pack_into(">i", raw, 8, cut - 12)
        restamp(raw)
        with pytest.raises(CorruptRecordError):
            decode_batch(raw)


# --------------------------------------------------------------------------- lying lengths

HOSTILE = {
    "records count": lambda: craft(record(), INT32_MAX),
    "records count too low": lambda: craft(record() + record(), 1),
    "records count too high": lambda: craft(record() + record(), 3),
    "record length huge": lambda: craft(record(length=INT32_MAX), 1),
    "record length negative": lambda: craft(record(length=-5), 1),
    "record length too long": lambda: craft(record(length=30) + b"\x00" * 40, 1),
    "record length too short": lambda: craft(record(length=8), 1),
    "key length huge": lambda: craft(record(key_length=INT32_MAX), 1),
    "key length negative": lambda: craft(record(key_length=-2), 1),
    "value length huge": lambda: craft(record(value_length=INT32_MAX), 1),
    "value length negative": lambda: craft(record(value_length=-7), 1),
    "header count huge": lambda: craft(record(header_count=INT32_MAX), 1),
    "header count negative": lambda: craft(record(header_count=-1), 1),
    "header key length huge": lambda: craft(
        record(header_count=1, headers=encode_varint(INT32_MAX) + b"k\x00"), 1
    ),
    "header key length negative": lambda: craft(
        record(header_count=1, headers=encode_varint(-1) + b"\x00"), 1
    ),
    "header value length huge": lambda: craft(
        record(header_count=1, headers=b"\x02k" + encode_varint(INT32_MAX)), 1
    ),
    "header value length negative": lambda: craft(
        record(header_count=1, headers=b"\x02k" + encode_varint(-3)), 1
    ),
    "timestamp varlong too long": lambda: craft(record(timestamp_delta=b"\xff" * 11), 1),
    "offset varint overflow": lambda: craft(
        b"\x0e\x00\x00" + b"\xff\xff\xff\xff\x7f" + b"\x01\x01\x00" + b"\x00" * 4, 1
    ),
    "trailing garbage": lambda: craft(record() + b"\x00\x00", 1),
    "batch length huge": lambda: _patched(8, ">i", INT32_MAX),
    "batch length negative": lambda: _patched(8, ">i", -1),
    "compressed records count huge": lambda: craft(record(), INT32_MAX, Compression.ZSTD),
    "compressed key length huge": lambda: craft(record(key_length=INT32_MAX), 1, Compression.LZ4),
}


def _patched(position: int, fmt: str, value: int) -> bytearray:
    raw = bytearray(SAMPLES[Compression.NONE])
    struct.pack_into(fmt, raw, position, value)
    return raw


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_lying_lengths_are_corrupt_fast_and_small(case: str) -> None:
    raw = bytes(HOSTILE[case]())
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(CorruptRecordError):
            decode_batch(raw)
        # A batch whose length runs past the buffer looks like a partial tail: the
        # iterator stops there; everything else is an error.
        assert _outcome(lambda: list(decode_batches(raw + SAMPLES[Compression.NONE]))) in (
            None,
            [],
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 1.0
    assert peak < 64 * 1024 + 4 * len(raw)


def test_honest_crafted_batch_decodes() -> None:
    # The crafting helpers themselves are sound: without lies the batch is valid.
    section = record() + record(key=b"", value=b"", header_count=1, headers=b"\x02k\x01")
    batch = decode_batch(craft(section, 2))
    assert [(r.key, r.value, r.headers) for r in batch.records] == [
        (b"key", b"value", []),
        (b"", b"", [("k", None)]),
    ]
    assert encode_varlong(0) == b"\x00"
