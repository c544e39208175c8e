"""Structured Streaming reads: exactly-once across stop and SIGKILL, admission control,
partitions that appear later, and offsets deleted under a running query."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, produce, topic_name, wait_for_leaders

pytestmark = [pytest.mark.spark, pytest.mark.integration]

CHILD = Path(__file__).with_name("stream_child.py")


def committed_batches(output: Path) -> int:
    log = output / "_spark_metadata"
    if not log.is_dir():
        return 0
    return sum(1 for f in log.iterdir() if f.name.split(".")[0].isdigit())


def start_child(
    bootstrap: str, topic: str, output: Path, checkpoint: Path, *flags: str
) -> subprocess.Popen:
    args = [sys.executable, str(CHILD), bootstrap, topic, str(output), str(checkpoint), *flags]
    log = open(output.parent / f"child-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
    # Its own process group, so SIGKILL takes the JVM down with it: a real crash.
    return subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip


def wait_for_batches(child: subprocess.Popen, output: Path, at_least: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert child.poll() is None, "the streaming child exited early"
        if committed_batches(output) >= at_least:
            return
        time.sleep(0.2)
    raise TimeoutError(f"fewer than {at_least} micro-batches committed in {timeout}s")


def test_exactly_once_across_stop_and_sigkill(spark, spark_broker, tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    topic = topic_name("eos")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [(i % 2, None, b"first-%d" % i) for i in range(6000)])
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    # 1. Crash in the middle: SIGKILL the driver (Python and JVM) after two committed batches.
    #    The run that restarts afterwards starts its Spark now and waits for the go file.
    go_file, stop_file = tmp_path / "go", tmp_path / "stop"
    child = start_child(bootstrap, topic, output, checkpoint)
    restart = start_child(
        bootstrap,
        topic,
        output,
        checkpoint,
        "--go-file",
        str(go_file),
        "--stop-file",
        str(stop_file),
    )
    try:
        try:
            wait_for_batches(child, output, 2, timeout=150)
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(30)
        assert committed_batches(output) < 12, "the query finished before it could be killed"

        # 2. More data, then the restart from the checkpoint, and a graceful stop.
        produce(bootstrap, topic, [(i % 2, None, b"second-%d" % i) for i in range(2000)])
        before = committed_batches(output)
        go_file.touch()
        wait_for_batches(restart, output, before + 2, timeout=150)
        stop_file.touch()
        assert restart.wait(60) == 0
    finally:
        if restart.poll() is None:
            os.killpg(restart.pid, signal.SIGKILL)
            restart.wait(30)

    # 3. Restart once more, in this process, and drain everything (AvailableNow ends by itself).
    drain = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "5000")
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert drain.awaitTermination(180)
    assert drain.exception() is None

    rows = spark.read.parquet(str(output)).collect()
    seen = sorted((r.partition, r.offset) for r in rows)
    assert len(seen) == len(set(seen)), "a record was written twice"
    assert seen == sorted([(0, o) for o in range(4000)] + [(1, o) for o in range(4000)])
    values = {r.value for r in rows}
    assert values == {f"first-{i}" for i in range(6000)} | {f"second-{i}" for i in range(2000)}


def test_max_offsets_per_trigger_with_available_now(spark, spark_broker, tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    topic = topic_name("limit")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [(i % 2, None, b"%d" % i) for i in range(1000)])
    query = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "300")
        .load()
        .writeStream.format("memory")
        .queryName("limited")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 1000
    assert len(sizes) >= 4 and max(sizes) <= 300
    assert spark.sql("SELECT count(DISTINCT value) AS n FROM limited").collect()[0].n == 1000


def test_new_partitions_and_matching_topics_are_picked_up(spark, spark_broker, tmp_path) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    bootstrap = spark_broker.bootstrap
    prefix = topic_name("grow")
    first = f"{prefix}-a"
    create_topic(bootstrap, first, 1)
    produce(bootstrap, first, [(0, None, b"a0-%d" % i) for i in range(10)])
    query = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", f"{prefix}-.*")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName("growing")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_partitions([NewPartitions(first, 3)]).values():
            future.result(30)
        wait_for_leaders(bootstrap, first, 3)
        second = f"{prefix}-b"
        create_topic(bootstrap, second, 1)
        produce(bootstrap, first, [(p, None, b"a%d-new" % p) for p in (1, 2)])
        produce(bootstrap, second, [(0, None, b"b0-%d" % i) for i in range(5)])
        expected = {(first, 0): 10, (first, 1): 1, (first, 2): 1, (second, 0): 5}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            query.processAllAvailable()
            got = spark.sql("SELECT topic, partition, count(*) AS n FROM growing "
                            "GROUP BY topic, partition").collect()  # fmt: skip
            counts = {(r.topic, r.partition): r.n for r in got}
            # Until all of it: a batch may see a partition before every record of it.
            if counts == expected:
                break
            time.sleep(0.3)
        assert counts == expected
    finally:
        query.stop()


def test_offsets_deleted_under_a_query_follow_fail_on_data_loss(spark, spark_broker, tmp_path):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    from pyspark.errors import PySparkException

    bootstrap = spark_broker.bootstrap
    topic = topic_name("loss")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [(0, None, b"%d" % i) for i in range(100)])

    def run(name: str, checkpoint: Path, fail: bool):
        query = (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", str(fail).lower())
            .load()
            .selectExpr("offset")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / name))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        return query

    strict_cp, lenient_cp = tmp_path / "strict", tmp_path / "lenient"
    run("strict", strict_cp, True)
    run("lenient", lenient_cp, False)
    # Retention (here DeleteRecords) removes offsets 0..149 of which 100..149 were never read.
    produce(bootstrap, topic, [(0, None, b"%d" % i) for i in range(100, 200)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 150)]).values():
        future.result(30)

    lenient = run("lenient", lenient_cp, False)
    assert lenient.exception() is None
    offsets = sorted(r.offset for r in spark.read.parquet(str(tmp_path / "lenient")).collect())
    assert offsets == list(range(100)) + list(range(150, 200))

    with pytest.raises(PySparkException) as info:
        run("strict", strict_cp, True).awaitTermination(60)
    assert "failOnDataLoss" in str(info.value)
