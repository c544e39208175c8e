"""parse_batches' C fast path (records.validation.leader_batch) against the Python checks.

The C call may only say "these checks passed": for every input, a leader's parse_batches
with it returns the same batches and leaves the same bytes, or raises the same error with
the same words, as without it. And it must take the commonest append (one uncompressed
batch from a client), or it saves nothing.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import validation
from odradek.records.batch import Record, build_batch
from odradek.records.compression import Compression
from odradek.records.header import compute_crc, parse_header
from odradek.storage import log_append
from odradek.storage.config import LogConfig
from odradek.storage.log_append import parse_batches
from odradek.storage.producer_state import ORIGIN_CLIENT, ORIGIN_COORDINATOR

NOW = 1_700_000_000_000
LEADER_BATCH = validation.leader_batch  # None when the extension is not built

pytestmark = pytest.mark.skipif(LEADER_BATCH is None, reason="the C extension is not built")

CONFIGS = [
    LogConfig(),
    LogConfig(cleanup_policy="compact"),
    LogConfig(message_timestamp_type="LogAppendTime"),
    LogConfig(message_timestamp_before_max_ms=3_600_000, message_timestamp_after_max_ms=60_000),
    LogConfig(max_message_bytes=200),
]


def restamp(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
    return buf


def outcome(buf: bytearray, config: LogConfig, origin: str, fast: bool) -> tuple[object, ...]:
    """What a leader's parse_batches makes of a copy of ``buf``: its batches and the bytes
    it leaves, or the error it raises."""
    copy = bytearray(buf)
    with pytest.MonkeyPatch.context() as patch:
        if not fast:
            patch.setattr(log_append, "leader_batch", None)
        try:
            parsed = parse_batches(copy, config, leader=True, validate=True, origin=origin,
                                   now_ms=NOW)  # fmt: skip
        except Exception as exc:  # the comparison is the point
            return ("error", type(exc), str(exc))
    return ("ok", [(b.position, b.header) for b in parsed], bytes(copy))


def agree(buf: bytearray) -> None:
    for config in CONFIGS:
        for origin in (ORIGIN_CLIENT, ORIGIN_COORDINATOR):
            assert outcome(buf, config, origin, True) == outcome(buf, config, origin, False)


HEADER_VALUES = st.one_of(st.none(), st.binary(max_size=8))
records_strategy = st.lists(
    st.builds(
        Record,
        value=st.one_of(st.none(), st.binary(max_size=120)),
        key=st.one_of(st.none(), st.binary(max_size=20)),
        headers=st.lists(st.tuples(st.text(max_size=6), HEADER_VALUES), max_size=2),
        timestamp_ms=st.one_of(st.none(), st.integers(NOW - 10**8, NOW + 10**8)),
    ),
    min_size=1,
    max_size=8,
)


def test_the_commonest_append_is_taken_in_c() -> None:
    buf = build_batch([Record(b"x" * 100)], now_ms=NOW)
    found = LEADER_BATCH(buf)
    assert found is not None
    header, low, high, null_keys = found
    assert header == parse_header(buf) and type(header) is type(parse_header(buf))
    assert (low, high, null_keys) == (NOW, NOW, 1)
    agree(buf)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_strategy,
    codec=st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP]),
    mutations=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=3
    ),
    crc=st.sampled_from(["restamped", "kept"]),
    tail=st.sampled_from([b"", b"\x00", b"\x00" * 12]),
)
def test_c_and_python_agree_on_any_damage(
    records: list[Record], codec: Compression, mutations: list[tuple[float, int]], crc: str,
    tail: bytes,
) -> None:
    """Any byte of header or records changed, CRC restamped or not, bytes after the batch:
    the same batches or the same error (attributes, counts, lengths, magic, timestamps)."""
    buf = build_batch(records, now_ms=NOW, compression=codec)
    for where, value in mutations:
        buf[int(where * len(buf))] = value
    if crc == "restamped" and len(buf) >= 61:
        restamp(buf)
    agree(buf + tail)


@pytest.mark.parametrize(
    "change",
    [
        lambda b: struct.pack_into(">h", b, 21, 0x20),  # control batch
        lambda b: struct.pack_into(">h", b, 21, 0x08),  # LogAppendTime from a client
        lambda b: struct.pack_into(">i", b, 57, 0),  # no records
        lambda b: struct.pack_into(">i", b, 23, 5),  # lastOffsetDelta off
        lambda b: struct.pack_into(">q", b, 35, NOW - 5),  # maxTimestamp below the records'
        lambda b: struct.pack_into(">q", b, 27, 2**63 - 2),  # timestamps past int64
        lambda b: struct.pack_into(">q", b, 27, NOW - 10 * 3_600_000),  # too old
        lambda b: struct.pack_into(">b", b, 16, 1),  # magic 1
    ],
)
def test_c_and_python_agree_on_each_named_case(change) -> None:
    buf = build_batch([Record(b"v", key=b"k"), Record(b"w")], now_ms=NOW)
    change(buf)
    agree(restamp(buf))
