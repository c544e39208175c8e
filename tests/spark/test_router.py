"""Placement of sink rows into per-partition record chunks (no broker, no Spark)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from odradek.client.partitioner import partition_for_key
from odradek.records.batch import (
    DecodedRecord,
    EncodedRecords,
    Record,
    build_batch,
    build_encoded_batch,
    decode_batch,
)
from odradek.spark.connector import RowRouter
from odradek.spark.options import parse_sink_options
from odradek.spark.schema import SinkColumns

COUNTS = {"a": 4, "b": 2}


def router(
    sink_topic: str | None = "a", batch_size: int = 16384, **columns: str | None
) -> RowRouter:
    options = parse_sink_options(
        {"kafka.bootstrap.servers": "h:1", "kafka.batch.size": str(batch_size)}
        | ({"topic": sink_topic} if sink_topic else {})
    )
    spec = {"value": "value", "key": None, "topic": None, "partition": None, "headers": None}
    spec.update(columns)
    return RowRouter(options, SinkColumns(**spec), COUNTS.__getitem__)


def decoded(records: EncodedRecords) -> list[DecodedRecord]:
    """The records of one encoded chunk, read back by the reference decoder."""
    return decode_batch(bytes(build_encoded_batch(records))).records


def placed(chunks) -> dict[tuple[str, bytes | None, bytes | None], int]:
    return {(t, r.key, r.value): p for t, p, records in chunks for r in decoded(records)}


def test_keys_go_where_the_java_client_puts_them() -> None:
    keys = [f"user-{i}".encode() for i in range(200)]
    batch = pa.RecordBatch.from_pydict({"key": keys, "value": [b"v"] * 200})
    got = placed(router(key="key").route(batch))
    assert len(got) == 200
    for (_, key, _), partition in got.items():
        assert partition == partition_for_key(key, 4)


def test_explicit_partition_wins_and_is_checked() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"key": [b"k1", b"k2", b"k3"], "value": [b"1", b"2", b"3"], "p": [3, None, 0]},
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary()), ("p", pa.int32())]),
    )
    got = placed(router(key="key", partition="p").route(batch))
    assert got[("a", b"k1", b"1")] == 3
    assert got[("a", b"k2", b"2")] == partition_for_key(b"k2", 4)
    assert got[("a", b"k3", b"3")] == 0
    bad = pa.RecordBatch.from_pydict({"value": [b"x"], "p": [4]})
    with pytest.raises(ValueError, match="Invalid partition 4 for topic 'a'"):
        list(router(partition="p").route(bad))


def test_rows_without_key_rotate_chunk_by_chunk_and_keep_order() -> None:
    values = [b"%05d" % i for i in range(1000)]
    batch = pa.RecordBatch.from_pydict({"value": values})
    chunks = list(router(batch_size=2000).route(batch))
    assert all(
        sum(len(r.value) + 24 for r in decoded(records)) <= 2000 for _, _, records in chunks
    )
    assert [r.value for _, _, records in chunks for r in decoded(records)] == values
    partitions = [p for _, p, _ in chunks]
    assert all((b - a) % 4 == 1 for a, b in itertools.pairwise(partitions))


def test_topic_column_strings_and_headers() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["a", "b", "a"],
            "value": ["x", "y", None],
            "headers": [[{"key": "h", "value": b"1"}], [], None],
        },
        schema=pa.schema(
            [
                ("topic", pa.string()),
                ("value", pa.string()),
                ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ]
        ),
    )
    rows = router(sink_topic=None, topic="topic", headers="headers")
    chunks = list(rows.route(batch))
    records = {(t, r.value): (p, list(r.headers)) for t, p, rs in chunks for r in decoded(rs)}
    assert records[("a", b"x")][1] == [("h", b"1")]
    assert records[("b", b"y")][1] == []
    assert records[("a", None)][1] == []
    assert {t for t, _, _ in chunks} == {"a", "b"}
    null_topic = pa.RecordBatch.from_pydict(
        {"topic": [None], "value": ["v"]},
        schema=pa.schema([("topic", pa.string()), ("value", pa.string())]),
    )
    with pytest.raises(ValueError, match="null topic"):
        rows.topics(null_topic)


def test_encoded_chunks_are_the_bytes_the_record_encoder_writes() -> None:
    # Null and empty keys and values, long values (2-byte length varints), headers with null
    # values, offset deltas past 63 (2-byte varints): every field of the bulk encoder
    # against build_batch, byte for byte, CRC included.
    count = 300
    keys = [None if i % 7 == 0 else (b"" if i % 13 == 0 else b"key-%d" % i) for i in range(count)]
    values = [None if i % 11 == 0 else b"v" * (i * 3 % 400) for i in range(count)]
    headers = [
        [{"key": "h", "value": b"1"}, {"key": "n\u00e9", "value": None}] if i % 5 == 0 else []
        for i in range(count)
    ]
    batch = pa.RecordBatch.from_pydict(
        {"key": keys, "value": values, "headers": headers},
        schema=pa.schema(
            [
                ("key", pa.binary()),
                ("value", pa.binary()),
                ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ]
        ),
    )
    chunks = list(router(key="key", headers="headers", batch_size=4000).route(batch))
    seen = []
    for _, _, records in chunks:
        got = decoded(records)
        assert [r.offset for r in got] == list(range(len(records)))
        assert {r.timestamp_ms for r in got} == {records.base_timestamp}
        again = [Record(r.value, r.key, r.headers, r.timestamp_ms) for r in got]
        assert bytes(build_encoded_batch(records)) == bytes(build_batch(again))
        # The exactly-once sink's transactional producer marks its batches transactional.
        ids = {"producer_id": 7, "producer_epoch": 1, "base_sequence": 0}
        assert bytes(build_encoded_batch(records, transactional=True, **ids)) == bytes(
            build_batch(again, transactional=True, **ids)
        )
        seen += [(r.key, r.value, [tuple(h) for h in r.headers]) for r in got]
    expected = [
        (keys[i], values[i], [(h["key"], h["value"]) for h in headers[i]]) for i in range(count)
    ]
    assert sorted(seen, key=repr) == sorted(expected, key=repr)
    assert len(chunks) > 4  # several chunks per partition: offset deltas restart at 0
