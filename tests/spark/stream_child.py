"""A streaming query in its own process, for the exactly-once tests (which stop or SIGKILL it).

    python stream_child.py BOOTSTRAP TOPIC OUTPUT CHECKPOINT [--go-file F] [--stop-file F]
                           [--sink-topic T]

It reads TOPIC from the earliest offset, 500 offsets per trigger, every 0.3 s, and appends
``partition, offset, value`` to Parquet files under OUTPUT (Spark's file sink), checkpointing in
CHECKPOINT. With ``--go-file`` it starts Spark at once but the query only when that file
exists (so a restart can be warmed up while the previous run is still going). It runs until
killed, or until the ``--stop-file`` appears: then it stops the query and exits 0. With
``--sink-topic`` it writes to that odradek topic instead, with ``exactlyOnce=true`` (key
``partition:offset`` of the input record, same value); OUTPUT is then unused.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

LIFETIME_S = 300


def wait_for(path: str) -> None:
    deadline = time.monotonic() + LIFETIME_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} never appeared")
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "topic", "output", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--go-file")
    parser.add_argument("--stop-file")
    parser.add_argument("--sink-topic")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from odradek.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-stream-child")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    if args.go_file:
        wait_for(args.go_file)
    stream = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")
        .load()
    )
    if args.sink_topic:
        writer = (
            stream.selectExpr("CAST(concat(partition, ':', offset) AS BINARY) AS key", "value")
            .writeStream.format("odradek")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("topic", args.sink_topic)
            .option("exactlyOnce", "true")
        )
    else:
        writer = (
            stream.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("parquet")
            .option("path", args.output)
        )
    query = (
        writer.option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            return 1
        if args.stop_file and os.path.exists(args.stop_file):
            query.stop()
            return 0
        time.sleep(0.1)
    return 2


if __name__ == "__main__":
    sys.exit(main())
