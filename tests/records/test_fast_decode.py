"""The record loop of records.fast_decode: its C twin (_walk.decode_records) against the
pure-Python loop, and both against what was encoded.

Same inputs, same outcome: the same records field by field, or CorruptRecordError from both
(valid batches of every codec, control batches, random mutations with the CRC re-stamped,
random sections, cuts at every length, varint edge cases). The C tests are skipped when the
extension is not built; the Python ones always run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import (
    Compression,
    ControlType,
    CorruptRecordError,
    DecodedRecord,
    Record,
    build_batch,
    build_end_txn_marker,
    decode_batch,
    fast_decode,
    parse_control_record,
    parse_header,
)
from odradek.records.fast_decode import NO_HEADERS, decode_batch_into, decode_records_into
from odradek.records.varint import encode_varint
from tests.records.test_fuzz import SAMPLES, craft, record, restamp

NOW = 1_700_000_000_000
C_DECODE = fast_decode._c_decode  # None when the extension is not built
IMPLS = ["c", "python"]
needs_c = pytest.mark.skipif(C_DECODE is None, reason="the C extension is not built")


@contextlib.contextmanager
def impl(name: str) -> Iterator[None]:
    """Run the block with the C loop ("c") or the pure-Python one ("python")."""
    if name == "c" and C_DECODE is None:
        pytest.skip("the C extension is not built")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_decode, "_c_decode", C_DECODE if name == "c" else None)
        yield


@dataclass(frozen=True, slots=True)
class Target:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def fast(raw: bytes | bytearray, min_offset: int = 0, no_headers: Any = None) -> list[Target]:
    out: list[Target] = []
    _header, appended = decode_batch_into(
        raw, 0, Target, {"topic": "t", "partition": 3}, out.append, min_offset=min_offset,
        no_headers=no_headers,
    )  # fmt: skip
    assert appended == len(out)
    return out


def outcome(decode: Callable[[], Any]) -> Any:
    try:
        return decode()
    except CorruptRecordError:
        return CorruptRecordError


def both(decode: Callable[[], Any]) -> tuple[Any, Any]:
    """The outcome of ``decode`` with the C loop and with the Python loop."""
    with impl("python"):
        from_python = outcome(decode)
    if C_DECODE is None:
        return from_python, from_python
    with impl("c"):
        from_c = outcome(decode)
    return from_c, from_python


def agree(decode: Callable[[], Any]) -> Any:
    from_c, from_python = both(decode)
    assert from_c == from_python
    return from_c


records_strategy = st.lists(
    st.builds(
        Record,
        value=st.none() | st.binary(max_size=300),
        key=st.none() | st.binary(max_size=20),
        headers=st.lists(
            st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2
        ),
        timestamp_ms=st.integers(0, 2 * NOW),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records_strategy,
    st.sampled_from(list(Compression)),
    st.booleans(),
    st.integers(0, 2**40),
    st.integers(0, 45),
)
def test_valid_batches_decode_as_encoded(
    records: list[Record], codec: Compression, append_time: bool, base: int, skip: int
) -> None:
    raw = build_batch(
        records, base_offset=base, compression=codec, log_append_time=append_time, now_ms=NOW
    )
    timestamps = [NOW if append_time else r.timestamp_ms for r in records]
    expected = [
        Target("t", 3, base + i, timestamps[i], r.key, r.value, list(r.headers))
        for i, r in enumerate(records)
        if i >= skip
    ]
    got = agree(lambda: fast(raw, base + skip))
    assert got == expected
    assert all(type(r.headers) is list for r in got)
    whole = agree(lambda: decode_batch(raw).records)
    assert [(r.offset, r.key, r.value, r.headers, r.attributes) for r in whole] == [
        (base + i, r.key, r.value, list(r.headers), 0) for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("name", IMPLS)
def test_frozen_target_is_filled_through_its_slots(name: str) -> None:
    with impl(name):
        (first,) = fast(build_batch([Record(b"v", b"k", [("h", b"x")], NOW)], base_offset=7))
    assert first == Target("t", 3, 7, NOW, b"k", b"v", [("h", b"x")])
    with pytest.raises(AttributeError):
        first.offset = 8  # type: ignore[misc]


@pytest.mark.parametrize("control", [ControlType.COMMIT, ControlType.ABORT])
def test_control_batches_decode_alike(control: ControlType) -> None:
    raw = build_end_txn_marker(
        control, producer_id=9, producer_epoch=1, coordinator_epoch=4, base_offset=12,
        timestamp_ms=NOW,
    )  # fmt: skip
    (marker,) = agree(lambda: decode_batch(raw).records)
    assert parse_control_record(marker.key, marker.value) == (control, 4)
    assert marker.offset == 12


def test_record_attributes_and_header_keys_that_are_not_utf8() -> None:
    headers = encode_varint(3) + b"\xff\xfeA" + encode_varint(-1)
    section = record(header_count=1, headers=headers)
    section = section[:1] + b"\x05" + section[2:]  # the record's attributes byte
    (got,) = agree(lambda: decode_batch(craft(section, 1)).records)
    assert got.attributes == 5
    assert got.headers == [("\udcff\udcfeA", None)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(list(Compression)),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_mutated_batches_fail_alike(codec: Compression, flips: list[tuple[int, int]]) -> None:
    raw = bytearray(SAMPLES[codec])
    for position, mask in flips:
        raw[position % len(raw)] ^= mask
    restamp(raw)
    agree(lambda: fast(raw))
    agree(lambda: decode_batch(raw).records)


SECTION = bytes(SAMPLES[Compression.NONE][61:])
HEADER = parse_header(SAMPLES[Compression.NONE])
# Bytes that make varints interesting: zero, -1, the largest one-byte value, continuations.
VARINT_BYTES = st.sampled_from([0x00, 0x01, 0x02, 0x06, 0x7E, 0x7F, 0x80, 0x81, 0xFF, 0x0F])


def _section(data: bytes | memoryview, count: int, base: int = 0, timestamp: int = NOW) -> list:
    out: list[Target] = []
    header = HEADER._replace(records_count=count, base_offset=base, base_timestamp=timestamp)
    decode_records_into(data, header, 0, Target, {"topic": "t", "partition": 3}, out.append,
                        min_offset=-(2**63))  # fmt: skip
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.floats(0, 1, exclude_max=True), VARINT_BYTES), max_size=4),
    st.integers(0, 7),
)
def test_mutated_sections_decode_alike(mutations: list[tuple[float, int]], count: int) -> None:
    data = bytearray(SECTION)
    for where, value in mutations:
        data[int(where * len(data))] = value
    agree(lambda: _section(bytes(data), count))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=80), st.integers(0, 12))
def test_random_sections_decode_alike(data: bytes, count: int) -> None:
    agree(lambda: _section(data, count))


def test_cuts_fail_alike() -> None:
    # Cut views of a larger buffer: a loop reading past the cut would find the real bytes.
    whole = memoryview(SECTION)
    for cut in range(len(SECTION)):
        part = whole[:cut]
        assert both(lambda: _section(part, 5)) == (CorruptRecordError,) * 2  # noqa: B023
    for codec in Compression:
        for cut in range(len(SAMPLES[codec])):
            raw = SAMPLES[codec][:cut]
            assert both(lambda: fast(raw)) == (CorruptRecordError,) * 2  # noqa: B023


def _varint(raw: int) -> bytes:
    """The unsigned LEB128 bytes of ``raw`` (no zigzag), for hand-made edge cases."""
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    return bytes(out) + bytes([raw])


@pytest.mark.parametrize(
    ("timestamp_delta", "ok"),
    [
        (b"\x80\x00", True),  # overlong 0
        (b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00", True),  # ten bytes, still 0
        (_varint(2**64 - 1), True),  # zigzag of INT64_MIN
        (b"\xff" * 9 + b"\x02", False),  # wider than 64 bits
        (b"\x80" * 10, False),  # continuation bit on the tenth byte
    ],
)
def test_varlong_edges(timestamp_delta: bytes, ok: bool) -> None:
    got = agree(lambda: _section(record(timestamp_delta=timestamp_delta), 1))
    assert (got is not CorruptRecordError) == ok


@pytest.mark.parametrize(
    ("key_length", "ok"),
    [
        (b"\x86\x00", True),  # overlong 3
        (b"\x81\x80\x80\x80\x00", True),  # five bytes: -1, a null key
        (_varint(2**32 - 1), False),  # INT32_MIN: negative
        (_varint(2**32), False),  # 33 bits
        (b"\x80" * 5, False),  # continuation bit on the fifth byte
        (b"\x80", False),  # truncated
    ],
)
def test_varint_edges(key_length: bytes, ok: bool) -> None:
    body = b"\x00\x00\x00" + key_length + (b"key" if key_length[0] == 0x86 else b"") + b"\x02v\x00"
    got = agree(lambda: _section(encode_varint(len(body)) + body, 1))
    assert (got is not CorruptRecordError) == ok


def test_offsets_and_timestamps_beyond_int64_are_exact() -> None:
    # A hostile header: base + delta leaves int64; both loops give Python's exact sum.
    timestamp_delta = encode_varint(2**31 - 1)
    data = record(timestamp_delta=timestamp_delta)
    at = 2 + len(timestamp_delta)  # length, attributes, timestampDelta, then offsetDelta
    data = data[:at] + b"\x7e" + data[at + 1 :]  # offset delta 63
    (got,) = agree(lambda: _section(data, 1, base=2**63 - 10, timestamp=2**63 - 1))
    assert got.offset == 2**63 - 10 + 63
    assert got.timestamp_ms == 2**63 - 1 + 2**31 - 1
    low = record(timestamp_delta=encode_varint(-(2**31)))
    (got,) = agree(lambda: _section(low, 1, timestamp=-(2**63)))
    assert got.timestamp_ms == -(2**63) - 2**31


@pytest.mark.parametrize(
    "section",
    [
        record(length=200),  # longer than the batch
        record(length=5),  # shorter than any record
        record(key_length=50),  # key overruns its record
        record(key_length=-2, key=b""),  # negative, not -1
        record(value_length=-2, value=b""),
        record(header_count=40),  # more headers than bytes
        record(header_count=-1),
        record(header_count=1, headers=b"\x0a" + b"k"),  # header key overruns
        record(header_count=1, headers=b"\x02k\x03"),  # header value length -2
        record(header_count=1, headers=b"\x02k\x0ax"),  # header value overruns
        record() + b"\x00",  # trailing byte after the last record
        # The first record says one byte more than its fields take: the second one would
        # still parse from where the fields end, so only that check can object.
        record(length=len(record()) - 1 + 1) + record()[1:],
        # ... one byte less: its last field runs one byte past its end.
        record(length=len(record()) - 1 - 1) + record(),
    ],
)
def test_lying_lengths_fail_alike(section: bytes) -> None:
    count = 2 if section.count(b"value") == 2 else 1
    raw = craft(section, count)
    assert both(lambda: fast(raw)) == (CorruptRecordError,) * 2
    assert both(lambda: decode_batch(raw)) == (CorruptRecordError,) * 2


@pytest.mark.parametrize("name", IMPLS)
def test_records_without_headers_share_one_read_only_list(name: str) -> None:
    raw = build_batch([Record(b"a"), Record(b"b", headers=[("h", b"x")]), Record(b"c")])
    with impl(name):
        out = fast(raw, no_headers=NO_HEADERS)
        fresh = fast(raw)
    assert [r.headers for r in out] == [[], [("h", b"x")], []]
    assert out[0].headers is out[2].headers is NO_HEADERS
    assert out[1].headers is not NO_HEADERS
    assert fresh[0].headers == [] and fresh[0].headers is not fresh[2].headers
    for mutate in (
        lambda h: h.append(("h", None)),
        lambda h: h.extend([("h", None)]),
        lambda h: h.insert(0, ("h", None)),
        lambda h: h.__iadd__([("h", None)]),
        lambda h: h.__setitem__(slice(0, 0), [("h", None)]),
    ):
        with pytest.raises(TypeError, match="read-only"):
            mutate(out[0].headers)
    assert NO_HEADERS == [] and len(NO_HEADERS) == 0


@pytest.mark.parametrize("name", IMPLS)
def test_an_exception_of_append_propagates_after_the_records_before(name: str) -> None:
    raw = build_batch([Record(b"a"), Record(b"b"), Record(b"c")])
    out: list[Target] = []

    def append(target: Target) -> None:
        if len(out) == 2:
            raise RuntimeError("full")
        out.append(target)

    with impl(name), pytest.raises(RuntimeError, match="full"):
        decode_batch_into(raw, 0, Target, {"topic": "t", "partition": 0}, append)
    assert [r.value for r in out] == [b"a", b"b"]


@needs_c
def test_the_c_loop_refuses_classes_it_cannot_fill() -> None:
    raw = build_batch([Record(b"a")])

    class NewOverridden:
        __slots__ = ("headers", "key", "offset", "partition", "timestamp_ms", "topic", "value")

        def __new__(cls) -> NewOverridden:
            raise AssertionError("never called")

    class Properties(NewOverridden):
        __slots__ = ()
        offset = property(lambda self: 0)  # type: ignore[assignment]

    for cls in (NewOverridden, Properties):
        with pytest.raises(TypeError):
            decode_batch_into(raw, 0, cls, {"topic": "t", "partition": 0}, [].append)
    section = bytes(raw[61:])
    slots = fast_decode._layout(Target, False)
    with pytest.raises(TypeError):  # a slot of another class
        C_DECODE(section, 1, 0, NOW, None, Target, (DecodedRecord.offset, *slots[1:]), (),
                 [].append, 0, None)  # fmt: skip
    with pytest.raises(TypeError):  # constants that are not (slot, value) pairs
        C_DECODE(section, 1, 0, NOW, None, Target, slots, ((1,),), [].append, 0, None)
    with pytest.raises(TypeError):  # a read-only member
        C_DECODE(section, 1, 0, NOW, None, Target, (*slots[:5], type.__dict__["__flags__"]),
                 (), [].append, 0, None)  # fmt: skip


@needs_c
def test_records_of_atomic_values_are_left_to_reference_counting() -> None:
    # Records holding only ints, strs, bytes, None and the shared NO_HEADERS cannot be in
    # a reference cycle: the C loop untracks them from the garbage collector. Any record
    # holding a list of its own, or a constant the collector tracks, stays tracked.
    raw = build_batch([Record(b"a"), Record(b"b", headers=[("h", b"x")]), Record(None)])
    plain, with_headers, tombstone = fast(raw, no_headers=NO_HEADERS)
    assert not gc.is_tracked(plain) and not gc.is_tracked(tombstone)
    assert gc.is_tracked(with_headers)
    assert all(gc.is_tracked(r) for r in fast(raw))  # a fresh headers list each
    out: list[Target] = []
    decode_batch_into(raw, 0, Target, {"topic": "t", "partition": ["tracked"]}, out.append,
                      no_headers=NO_HEADERS)  # fmt: skip
    assert all(gc.is_tracked(r) for r in out)
    assert all(gc.is_tracked(r) for r in decode_batch(raw).records)
    gc.collect()
    assert [r.value for r in (plain, with_headers, tombstone)] == [b"a", b"b", None]
    assert plain.headers is NO_HEADERS and with_headers.headers == [("h", b"x")]
