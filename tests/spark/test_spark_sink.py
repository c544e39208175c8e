"""Writes with real Spark: batch and streaming, checked by reading back with confluent-kafka."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.client.partitioner import partition_for_key
from tests.spark.conftest import consume_all, create_topic, produce, topic_name

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_batch_write_with_key_value_headers_and_partition(spark, spark_broker) -> None:
    bootstrap = spark_broker.bootstrap
    topic = topic_name("sink")
    create_topic(bootstrap, topic, 3)
    frame = spark.createDataFrame(
        [(f"k{i}", f"value {i}", i % 3, [("source", b"spark"), ("i", str(i).encode())])
         for i in range(300)],
        "key string, value string, partition int, "
        "headers array<struct<key:string,value:binary>>",
    ).repartition(2)  # fmt: skip
    (
        frame.write.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.compression.type", "gzip")
        .mode("append")
        .save()
    )
    messages = consume_all(bootstrap, topic, 3)
    assert len(messages) == 300
    for message in messages:
        i = int(message.value().split()[1])
        assert message.key() == f"k{i}".encode()
        assert message.partition() == i % 3
        assert message.headers() == [("source", b"spark"), ("i", str(i).encode())]


def test_rows_are_placed_by_key_hash_and_topic_column(spark, spark_broker) -> None:
    bootstrap = spark_broker.bootstrap
    left, right = topic_name("left"), topic_name("right")
    create_topic(bootstrap, left, 4)
    create_topic(bootstrap, right, 2)
    rows = [(left if i % 2 else right, f"user-{i}".encode(), b"%d" % i) for i in range(200)]
    rows += [(left, None, b"nokey-%d" % i) for i in range(50)]
    frame = spark.createDataFrame(rows, "topic string, key binary, value binary")
    frame.write.format("odradek").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    got_left = consume_all(bootstrap, left, 4)
    got_right = consume_all(bootstrap, right, 2)
    assert len(got_left) == 150 and len(got_right) == 100
    for message, partitions in [(m, 4) for m in got_left] + [(m, 2) for m in got_right]:
        if message.key() is not None:
            assert message.partition() == partition_for_key(message.key(), partitions)


def test_streaming_write_copies_a_topic(spark, spark_broker, tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    source, target = topic_name("copy-src"), topic_name("copy-dst")
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, target, 2)
    produce(bootstrap, source, [(i % 2, b"k%d" % i, b"v%d" % i) for i in range(2000)])
    query = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "partition")
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    copied = consume_all(bootstrap, target, 2)
    assert sorted((m.partition(), m.key(), m.value()) for m in copied) == sorted(
        (i % 2, b"k%d" % i, b"V%d" % i) for i in range(2000)
    )


def test_sink_column_errors(spark, spark_broker) -> None:
    from pyspark.errors import PySparkException

    bootstrap = spark_broker.bootstrap
    cases = [
        (spark.createDataFrame([("a",)], "key string"), {"topic": "t"}, "Required column 'value'"),
        (spark.createDataFrame([(1,)], "value int"), {"topic": "t"}, "must be string or binary"),
        (spark.createDataFrame([("v",)], "value string"), {}, "No topic to write to"),
    ]
    for frame, options, message in cases:
        writer = frame.write.format("odradek").option("kafka.bootstrap.servers", bootstrap)
        with pytest.raises(PySparkException) as info:
            writer.options(**options).mode("append").save()
        assert message in str(info.value)
    frame = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException) as info:
        frame.write.format("odradek").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", "t"
        ).mode("overwrite").save()
    assert "append-only" in str(info.value)
