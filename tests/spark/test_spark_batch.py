"""Batch reads with real Spark from a real broker: exactly what was produced, with Kafka options."""

from __future__ import annotations

import json

import pytest

from tests.spark.conftest import create_topic, produce, topic_name

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def reader(spark, bootstrap: str, **options: str):
    frame = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        frame = frame.option(key, value)
    return frame.load()


def test_batch_read_of_100k_records_over_4_partitions(spark, spark_broker) -> None:
    bootstrap = spark_broker.bootstrap
    topic = topic_name("batch100k")
    create_topic(bootstrap, topic, 4)
    expected = [
        (i % 4, f"key-{i}".encode(), f"value-{i}-{'x' * (i % 50)}".encode()) for i in range(100_000)
    ]
    produce(bootstrap, topic, expected)

    frame = reader(spark, bootstrap, subscribe=topic)
    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    rows = frame.select("partition", "offset", "key", "value", "topic").collect()
    assert len(rows) == 100_000
    got = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows)
    # Per partition, offsets run 0..n-1 in the order the records were produced.
    want = []
    for p in range(4):
        mine = [(k, v) for part, k, v in expected if part == p]
        want += [(p, offset, k, v) for offset, (k, v) in enumerate(mine)]
    assert got == sorted(want)
    assert {r.topic for r in rows} == {topic}


def test_offsets_timestamps_headers_and_splitting(spark, spark_broker) -> None:
    bootstrap = spark_broker.bootstrap
    topic = topic_name("opts")
    create_topic(bootstrap, topic, 2)
    records = [(i % 2, None if i % 7 == 0 else b"k%d" % i, b"v%d" % i) for i in range(200)]
    headers = [[("n", str(i).encode()), ("h", b"x")] for i in range(200)]
    produce(bootstrap, topic, records, headers=headers, compression="zstd")

    ranged = reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 20, "1": -1}}),
    )
    counts = {r.partition: r["count"] for r in ranged.groupBy("partition").count().collect()}
    assert counts == {0: 10, 1: 100}

    with_headers = reader(spark, bootstrap, assign=json.dumps({topic: [1]}), includeHeaders="true")
    first = with_headers.where("offset = 0").collect()[0]
    assert [(h.key, bytes(h.value)) for h in first.headers] == [("n", b"1"), ("h", b"x")]
    assert first.timestampType == 0 and first.timestamp.year >= 2024
    nulls = reader(spark, bootstrap, subscribe=topic).where("key IS NULL").count()
    assert nulls == sum(1 for _, k, _ in records if k is None)

    split = reader(spark, bootstrap, subscribePattern=f"{topic}|nothing-else", minPartitions="8")
    assert split.rdd.getNumPartitions() == 8
    assert split.count() == 200

    # A timestamp past every record selects nothing (with the 'latest' strategy).
    late = reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingTimestamp=str(2**45),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert late.count() == 0
    assert reader(spark, bootstrap, subscribe=topic, startingTimestamp="0").count() == 200


def test_option_errors_reach_the_user_as_one_message(spark, spark_broker) -> None:
    from pyspark.errors import PySparkException

    cases = [
        ({}, "One of the options 'assign', 'subscribe' or 'subscribePattern' must be specified"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the options"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "can't be 'latest' for batch queries"),
        ({"subscribe": "a", "startingOffset": "earliest"}, "did you mean 'startingOffsets'"),
    ]
    for options, message in cases:
        with pytest.raises(PySparkException) as info:
            reader(spark, spark_broker.bootstrap, **options).count()
        assert message in str(info.value)
