"""The demo pipeline: activity events -> odradek -> Spark Structured Streaming -> Parquet + a topic.

1. A generator thread produces page views and clicks (JSON, :mod:`odradek.demo.events`) to the
   ``activity-events`` topic at a steady rate, with odradek's own producer.
2. A streaming query reads the topic with ``format("odradek")``, parses the JSON, puts a
   watermark on event time and counts views and clicks per page per minute.
3. The counts go to two sinks, as two queries with their own checkpoints: Parquet files in the
   warehouse directory (Spark's file sink: exactly-once across restarts) and the
   ``page-minute-counts`` topic (JSON values keyed by page).
4. When the generator is done, it sends a heartbeat event dated after the last window, so that
   the watermark passes and the last windows are emitted; the job waits for both queries to
   drain, stops them, and prints the warehouse table.

Meanwhile :mod:`odradek.demo.progress` shows what is happening. Everything a Spark user would
write for Kafka stays the same except the format name and the one ``register(spark)`` call
(:mod:`odradek.demo.session`). Run it again with the same ``--checkpoint`` and it resumes where
it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructField, StructType

from odradek.demo.config import WATERMARK_MS, WINDOW_MS, DemoConfig
from odradek.demo.events import EVENT_TYPES
from odradek.demo.generator import GeneratorThread, ensure_topics
from odradek.demo.progress import ProgressDisplay, ProgressTracker
from odradek.demo.session import build_spark

EVENT_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("type", StringType()),
        StructField("user_id", StringType()),
        StructField("page", StringType()),
        StructField("element", StringType()),
        StructField("ts", LongType()),
    ]
)
WATERMARK = f"{WATERMARK_MS // 1000} seconds"
WINDOW = f"{WINDOW_MS // 1000} seconds"


def read_events(spark: SparkSession, cfg: DemoConfig) -> DataFrame:
    return (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", cfg.bootstrap_server)
        .option("subscribe", cfg.events_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50000")
        .load()
    )


def counts_per_minute(events: DataFrame) -> DataFrame:
    """Views and clicks per page per event-time minute, final once the watermark passes.

    Heartbeats must reach the watermark operator, and Spark's optimizer pushes filters on
    ordinary columns (even ones written after the aggregation, on a grouping column) below it.
    So nothing filters rows by type or page: heartbeats count as neither view nor click, and the
    groups with nothing counted (theirs) are dropped by a filter on the aggregates, which cannot
    be pushed down.
    """
    parsed = (
        events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
        .where(F.col("event_time").isNotNull())
    )
    counted = F.col("type").isin(*EVENT_TYPES)
    return (
        parsed.withWatermark("event_time", WATERMARK)
        .groupBy(F.window("event_time", WINDOW).alias("w"), F.col("page"))
        .agg(
            F.sum(F.when(counted & (F.col("type") == "page_view"), 1).otherwise(0)).alias("views"),
            F.sum(F.when(counted & (F.col("type") == "click"), 1).otherwise(0)).alias("clicks"),
        )
        .where((F.col("views") + F.col("clicks")) > 0)
        .select(
            F.col("w.start").alias("minute"),
            "page",
            F.col("views").cast("long").alias("views"),
            F.col("clicks").cast("long").alias("clicks"),
        )
    )


def start_queries(spark: SparkSession, cfg: DemoConfig) -> list[StreamingQuery]:
    counts = counts_per_minute(read_events(spark, cfg))
    trigger = {"processingTime": f"{cfg.trigger_seconds} seconds"}
    to_parquet = (
        counts.writeStream.format("parquet")
        .option("path", str(cfg.warehouse / "page_minute_counts"))
        .option("checkpointLocation", str(cfg.checkpoint / "parquet"))
        .outputMode("append")
        .trigger(**trigger)
        .queryName("counts_to_parquet")
        .start()
    )
    to_topic = (
        counts.select(
            F.col("page").cast("binary").alias("key"),
            F.to_json(F.struct("minute", "page", "views", "clicks")).alias("value"),
        )
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", cfg.bootstrap_server)
        .option("topic", cfg.results_topic)
        .option("checkpointLocation", str(cfg.checkpoint / "topic"))
        .outputMode("append")
        .trigger(**trigger)
        .queryName("counts_to_topic")
        .start()
    )
    return [to_parquet, to_topic]


def print_results(spark: SparkSession, cfg: DemoConfig, produced: int) -> int:
    """Print the warehouse table; returns its number of rows."""
    from rich.console import Console
    from rich.table import Table

    path = cfg.warehouse / "page_minute_counts"
    console = Console()
    if not path.exists():
        console.print("[yellow]no results were written to the warehouse[/yellow]")
        return 0
    rows = spark.read.parquet(str(path)).orderBy("minute", "page").collect()
    table = Table(title=f"page views and clicks per minute ({path})")
    for column in ("minute (UTC)", "page", "views", "clicks"):
        table.add_column(column, justify="right" if column in ("views", "clicks") else "left")
    for row in rows:
        table.add_row(
            row["minute"].strftime("%Y-%m-%d %H:%M"), row["page"], str(row["views"]),
            str(row["clicks"]),
        )  # fmt: skip
    console.print(table)
    total = sum(r["views"] + r["clicks"] for r in rows)
    topic_rows = (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", cfg.bootstrap_server)
        .option("subscribe", cfg.results_topic)
        .load()
        .count()
    )
    print(f"events produced this run: {produced}")
    print(f"events counted in the warehouse (all runs): {total}")
    print(f"rows in topic '{cfg.results_topic}': {topic_rows}")
    return len(rows)


def run(cfg: DemoConfig) -> int:
    """Run the whole demo; returns a process exit code.

    Ctrl-C (KeyboardInterrupt) may arrive anywhere; the caller (``__main__``) turns it into
    one line and a bounded shutdown. Whatever happens, the generator and the queries stop.
    """
    generator = GeneratorThread(cfg)
    tracker = ProgressTracker(cfg.events_per_second, lambda: generator.produced)
    queries: list[StreamingQuery] = []
    print(
        f"producing ~{cfg.events_per_second} events/s to '{cfg.events_topic}' for "
        f"{cfg.duration:g}s; Spark ({cfg.master}) counts them per page per minute "
        f"(Spark's log: {cfg.log_file})",
        flush=True,
    )
    display = ProgressDisplay(tracker)
    try:
        with display:
            tracker.phase = "creating topics"
            asyncio.run(ensure_topics(cfg.bootstrap_server, {cfg.events_topic: cfg.partitions,
                                                              cfg.results_topic: 1}))  # fmt: skip
            tracker.phase = "starting Spark"
            spark = build_spark(cfg.master, cfg.log_file)
            queries = start_queries(spark, cfg)
            tracker.watch(queries[0], cfg.warehouse / "page_minute_counts")
            tracker.watch(queries[1])
            tracker.phase = "streaming"
            generator.start()
            while generator.is_alive():
                generator.join(timeout=1.0)
                for query in queries:
                    if query.exception() is not None:
                        raise RuntimeError(f"query {query.name} failed: {query.exception()}")
            if generator.error is not None:
                raise RuntimeError(f"the event generator failed: {generator.error}")
            tracker.phase = "closing the last windows"
            # Two rounds: the batch that reads the heartbeat moves the watermark; the next
            # (no-data) batch emits the windows it closed.
            for _ in range(2):
                for query in queries:
                    query.processAllAvailable()
                time.sleep(cfg.trigger_seconds + 1)
            for query in queries:
                query.processAllAvailable()
            tracker.phase = "done"
    finally:
        generator.stop()
        for query in queries:
            with contextlib.suppress(Exception):
                query.stop()
    print_results(spark, cfg, generator.produced)
    spark.stop()
    return 0
