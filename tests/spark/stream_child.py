"""A streaming query in its own process, for the exactly-once tests (which stop or SIGKILL it).

    python stream_child.py BOOTSTRAP TOPIC OUTPUT CHECKPOINT MODE [STOP_FILE]

It reads TOPIC from the earliest offset with ``maxOffsetsPerTrigger`` 500 and appends
``partition, offset, value`` to Parquet files under OUTPUT (Spark's file sink), checkpointing in
CHECKPOINT. MODE ``run`` triggers every 0.3 s until killed, or until STOP_FILE appears, when
it stops the query and exits 0. MODE ``drain`` uses Trigger.AvailableNow: it reads what there
is and exits 0.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    bootstrap, topic, output, checkpoint, mode = sys.argv[1:6]
    stop_file = sys.argv[6] if len(sys.argv) > 6 else None
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
    source = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
    )
    writer = (
        source.writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "drain":
        writer.trigger(availableNow=True).start().awaitTermination()
        return 0
    query = writer.trigger(processingTime="300 milliseconds").start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            return 1
        if stop_file is not None and os.path.exists(stop_file):
            query.stop()
            return 0
        time.sleep(0.1)
    return 2


if __name__ == "__main__":
    sys.exit(main())
