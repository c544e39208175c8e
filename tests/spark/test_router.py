"""Placement of sink rows into per-partition record chunks (no broker, no Spark)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from odradek.client.partitioner import partition_for_key
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


def placed(chunks) -> dict[tuple[str, bytes | None, bytes | None], int]:
    return {(t, r.key, r.value): p for t, p, records in chunks for r in records}


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
    assert all(sum(len(r.value) + 24 for r in records) <= 2000 for _, _, records in chunks)
    assert [r.value for _, _, records in chunks for r in records] == values
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
    records = {(t, r.value): (p, list(r.headers)) for t, p, rs in chunks for r in rs}
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
