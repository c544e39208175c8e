"""The consumer's fast decoder (records.fast_decode) against the reference decoder.

Same inputs, same outcome: the same records field by field, or CorruptRecordError from both
(valid batches of every codec, random mutations with the CRC re-stamped, cuts at every length).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import Compression, CorruptRecordError, Record, build_batch, decode_batch
from odradek.records.fast_decode import NO_HEADERS, decode_batch_into
from tests.records.test_fuzz import SAMPLES, craft, record, restamp

NOW = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class Target:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def fast(raw: bytes | bytearray, min_offset: int = 0) -> list[Target]:
    out: list[Target] = []
    _header, appended = decode_batch_into(
        raw, 0, Target, {"topic": "t", "partition": 3}, out.append, min_offset=min_offset
    )
    assert appended == len(out)
    return out


def reference(raw: bytes | bytearray, min_offset: int = 0) -> list[Target]:
    batch = decode_batch(raw, verify_crc=False)
    return [
        Target("t", 3, r.offset, r.timestamp_ms, r.key, r.value, r.headers)
        for r in batch.records
        if r.offset >= min_offset
    ]


def outcome(decode: Any) -> Any:
    try:
        return decode()
    except CorruptRecordError:
        return CorruptRecordError


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
def test_valid_batches_decode_alike(
    records: list[Record], codec: Compression, append_time: bool, base: int, skip: int
) -> None:
    raw = build_batch(
        records, base_offset=base, compression=codec, log_append_time=append_time, now_ms=NOW
    )
    got = fast(raw, base + skip)
    assert got == reference(raw, base + skip)
    assert len(got) == max(0, len(records) - skip)
    assert all(type(r.headers) is list for r in got)


def test_frozen_target_is_filled_through_its_slots() -> None:
    (first,) = fast(build_batch([Record(b"v", b"k", [("h", b"x")], NOW)], base_offset=7))
    assert first == Target("t", 3, 7, NOW, b"k", b"v", [("h", b"x")])
    with pytest.raises(AttributeError):
        first.offset = 8  # type: ignore[misc]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(list(Compression)),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_mutated_batches_fail_alike(codec: Compression, flips: list[tuple[int, int]]) -> None:
    raw = bytearray(SAMPLES[codec])
    for position, mask in flips:
        raw[position % len(raw)] ^= mask
    restamp(raw)
    assert outcome(lambda: fast(raw)) == outcome(lambda: reference(raw))


@pytest.mark.parametrize("codec", list(Compression))
def test_cuts_fail_alike(codec: Compression) -> None:
    whole = SAMPLES[codec]
    for cut in range(len(whole)):
        with pytest.raises(CorruptRecordError):
            fast(whole[:cut])


@pytest.mark.parametrize(
    "section",
    [
        record(length=200),  # longer than the batch
        record(key_length=50),  # key overruns its record
        record(value_length=-3),  # negative, not -1
        record(header_count=40),  # more headers than bytes
        record() + b"\x00",  # trailing byte after the last record
    ],
)
def test_lying_lengths_fail_alike(section: bytes) -> None:
    raw = craft(section, 1)
    assert outcome(lambda: fast(raw)) is CorruptRecordError
    assert outcome(lambda: reference(raw)) is CorruptRecordError


def test_records_without_headers_share_one_read_only_list() -> None:
    raw = build_batch([Record(b"a"), Record(b"b", headers=[("h", b"x")]), Record(b"c")])
    out: list[Target] = []
    decode_batch_into(raw, 0, Target, {"topic": "t", "partition": 3}, out.append,
                      no_headers=NO_HEADERS)  # fmt: skip
    assert [r.headers for r in out] == [[], [("h", b"x")], []]
    assert out[0].headers is out[2].headers is NO_HEADERS
    assert out[1].headers is not NO_HEADERS
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
