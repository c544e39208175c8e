"""RecordsAppender (the producer's incremental encoder) writes build_batch's exact bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import Compression, Record, build_batch, decode_batch
from odradek.records.appender import RecordsAppender
from odradek.records.batch import build_encoded_batch

NOW = 1_700_000_000_000

records_strategy = st.lists(
    st.builds(
        Record,
        # Values past the varint cache's lengths too (hypothesis draws big binaries slowly).
        value=st.none()
        | st.binary(max_size=300)
        | st.integers(16_380, 16_400).map(lambda n: b"x" * n),
        key=st.none() | st.binary(max_size=20),
        headers=st.lists(
            st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2
        ),
        # Deltas from the first record: negative, zero, small and beyond the varint cache.
        timestamp_ms=st.integers(NOW - 10**7, NOW + 10**7),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(records_strategy, st.sampled_from(list(Compression)))
def test_same_bytes_as_build_batch(records: list[Record], codec: Compression) -> None:
    appender = RecordsAppender()
    for record in records:
        assert record.timestamp_ms is not None
        appender.append(record.value, record.key, record.headers, record.timestamp_ms)
    assert len(appender) == len(records)
    assert appender.timestamps == [r.timestamp_ms for r in records]
    built = build_encoded_batch(appender.encoded(), compression=codec, producer_id=7)
    expected = build_batch(records, compression=codec, producer_id=7)
    if codec is Compression.NONE:
        assert built == expected
    decoded = decode_batch(built)
    assert decoded.header.max_timestamp == max(r.timestamp_ms for r in records)  # type: ignore[type-var]
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in decoded.records] == [
        (r.key, r.value, list(r.headers), r.timestamp_ms) for r in records
    ]


def test_many_records_past_the_varint_cache() -> None:
    appender = RecordsAppender()
    records = [Record(b"v%d" % i, None, (), NOW + i) for i in range(17_000)]
    for record in records:
        appender.append(record.value, None, (), record.timestamp_ms)  # type: ignore[arg-type]
    assert build_encoded_batch(appender.encoded()) == build_batch(records)
