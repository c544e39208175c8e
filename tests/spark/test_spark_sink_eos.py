"""The exactly-once streaming sink (``exactlyOnce=true``): a query SIGKILLed and restarted from
its checkpoint, and a batch re-run after its transactions committed, leave every row exactly
once for read_committed readers (counted with librdkafka)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
import pytest

from odradek.client import SyncProducer
from odradek.client.group_admin import SyncGroupAdmin
from tests.spark.conftest import create_topic, produce, topic_name
from tests.spark.test_spark_stream import start_child

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]


def spark_commits(checkpoint: Path) -> list[int]:
    """Batch ids in the query's commit log."""
    log = checkpoint / "commits"
    if not log.is_dir():
        return []
    return sorted(int(f.name) for f in log.iterdir() if f.name.isdigit())


def wait_for_commits(child, checkpoint: Path, at_least: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert child.poll() is None, "the streaming child exited early"
        if len(spark_commits(checkpoint)) >= at_least:
            return
        time.sleep(0.2)
    raise TimeoutError(f"fewer than {at_least} micro-batches committed in {timeout}s")


def committed_keys(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every key a read_committed librdkafka consumer sees, up to the end of each partition."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    keys, eofs = [], set()
    deadline = time.monotonic() + 60
    try:
        while len(eofs) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is not None:
                    if message.error().code() == ck.KafkaError._PARTITION_EOF:
                        eofs.add(message.partition())
                    continue
                keys.append(message.key())
    finally:
        consumer.close()
    assert len(eofs) == partitions, f"timed out reading {topic}"
    return keys


def test_exactly_once_sink_across_sigkill_and_a_rerun_batch(
    spark, spark_broker, tmp_path: Path
) -> None:
    bootstrap = spark_broker.bootstrap
    source, sink = topic_name("eos-in"), topic_name("eos-out")
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 2)
    produce(bootstrap, source, [(i % 2, None, b"first-%d" % i) for i in range(4000)])
    # The broker's first transaction creates __transaction_state and __consumer_offsets (100
    # partitions): do that now, not inside the first micro-batch.
    with SyncProducer(bootstrap, transactional_id=topic_name("warm-up")) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(sink, 0): 0}, topic_name("warm-up"))
        producer.commit_transaction()
    output, checkpoint = tmp_path / "unused", tmp_path / "checkpoint"
    go_file, stop_file = tmp_path / "go", tmp_path / "stop"
    flags = ("--sink-topic", sink)

    # 1. SIGKILL the query (driver and JVM) after its first committed batch, wherever it is.
    child = start_child(bootstrap, source, output, checkpoint, *flags)
    restart = start_child(
        bootstrap, source, output, checkpoint, *flags,
        "--go-file", str(go_file), "--stop-file", str(stop_file),
    )  # fmt: skip
    try:
        try:
            wait_for_commits(child, checkpoint, 1, timeout=300)
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(30)
        assert len(spark_commits(checkpoint)) < 8, "the query finished before it was killed"

        # 2. Restart from the checkpoint, one more batch, then a graceful stop.
        before = len(spark_commits(checkpoint))
        go_file.touch()
        wait_for_commits(restart, checkpoint, before + 1, timeout=300)
        stop_file.touch()
        assert restart.wait(60) == 0
    finally:
        if restart.poll() is None:
            os.killpg(restart.pid, signal.SIGKILL)
            restart.wait(30)

    # 3. The crash the design is about: the batch's transactions committed, Spark's commit log
    #    entry is missing. Spark runs that batch again; its tasks must find it written.
    #    (A batch the stop interrupted is planned again from the offsets before it.)
    last = spark_commits(checkpoint)[-1]
    for name, first_removed in (("offsets", last + 1), ("commits", last)):
        for entry in (checkpoint / name).iterdir():
            if entry.name.isdigit() and int(entry.name) >= first_removed:
                entry.unlink()
                (checkpoint / name / f".{entry.name}.crc").unlink(missing_ok=True)  # Hadoop's

    # 4. Drain the rest in this process (AvailableNow ends by itself), from the same checkpoint.
    produce(bootstrap, source, [(i % 2, None, b"second-%d" % i) for i in range(1000)])
    drain = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")
        .load()
        .selectExpr("CAST(concat(partition, ':', offset) AS BINARY) AS key", "value")
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert drain.awaitTermination(180)
    assert drain.exception() is None
    query_id = str(drain.id)

    keys = committed_keys(bootstrap, sink, 2)
    expected = sorted(f"{p}:{o}".encode() for p in range(2) for o in range(2500))
    assert len(keys) == len(set(keys)), "a row was written twice"
    assert sorted(keys) == expected

    # Each task partition's marker names the last batch it wrote.
    with SyncGroupAdmin(bootstrap) as groups:
        marker = groups.fetch_offsets(f"odradek-spark-{query_id}-0", [(sink, 0)])
    assert marker[(sink, 0)].offset > last
