"""Option parsing of the odradek Spark source and sink: Spark Kafka connector names and rules."""

from __future__ import annotations

import pytest

from odradek.spark.options import (
    OffsetSpec,
    OptionError,
    parse_sink_options,
    parse_source_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def source(streaming: bool = False, **options: str):
    return parse_source_options({**BOOT, **options}, streaming=streaming)


def error_of(streaming: bool = False, **options: str) -> str:
    with pytest.raises(OptionError) as info:
        parse_source_options(options, streaming=streaming)
    return str(info.value)


def test_defaults_follow_spark() -> None:
    batch = source(subscribe="a")
    assert batch.starting == OffsetSpec("earliest")
    assert batch.ending == OffsetSpec("latest")
    assert batch.fail_on_data_loss is True
    assert batch.include_headers is False
    stream = source(streaming=True, subscribe="a")
    assert stream.starting == OffsetSpec("latest")
    assert stream.max_offsets_per_trigger is None


def test_option_names_are_case_insensitive() -> None:
    opts = parse_source_options(
        {"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "a, b ,a", "failondataloss": "FALSE"},
        streaming=True,
    )
    assert opts.subscription.topics == ("a", "b")
    assert opts.fail_on_data_loss is False


def test_exactly_one_strategy() -> None:
    assert "must be specified" in error_of(**BOOT)
    message = error_of(**BOOT, subscribe="a", assign='{"a":[0]}')
    assert "Only one of" in message and "assign" in message and "subscribe" in message


def test_bootstrap_servers_required_and_checked() -> None:
    assert "'kafka.bootstrap.servers' must be specified" in error_of(subscribe="a")
    assert "host:port" in error_of(subscribe="a", **{"kafka.bootstrap.servers": "nohost"})


def test_assign_json() -> None:
    opts = source(assign='{"b":[1,0],"a":[2]}')
    assert opts.subscription.assignment == (("a", 2), ("b", 0), ("b", 1))
    assert opts.subscription.matches("b") and not opts.subscription.matches("c")
    assert "not valid JSON" in error_of(**BOOT, assign="{a:[0]}")
    assert "list of partition numbers" in error_of(**BOOT, assign='{"a":[-1]}')
    assert "list of partition numbers" in error_of(**BOOT, assign='{"a":"0"}')


def test_subscribe_pattern_is_a_whole_match() -> None:
    opts = source(subscribePattern="events-.*")
    assert opts.subscription.matches("events-1")
    assert not opts.subscription.matches("old-events-1")
    assert "not a valid regex" in error_of(**BOOT, subscribePattern="(")


def test_starting_offsets_json_and_rules() -> None:
    opts = source(subscribe="t", startingOffsets='{"t":{"0":23,"1":-2}}')
    assert opts.starting == OffsetSpec("offsets", {("t", 0): 23, ("t", 1): -2})
    stream = source(streaming=True, subscribe="t", startingOffsets='{"t":{"0":-1}}')
    assert stream.starting.offsets == {("t", 0): -1}
    assert "batch" in error_of(**BOOT, subscribe="t", startingOffsets="latest")
    assert "batch" in error_of(**BOOT, subscribe="t", startingOffsets='{"t":{"0":-1}}')
    assert "invalid" in error_of(**BOOT, subscribe="t", startingOffsets='{"t":{"0":-3}}')
    assert "not a partition number" in error_of(
        **BOOT, subscribe="t", startingOffsets='{"t":{"x":1}}'
    )
    assert "must be 'earliest'" in error_of(**BOOT, subscribe="t", startingOffsets="first")


def test_ending_offsets_rules() -> None:
    opts = source(subscribe="t", endingOffsets='{"t":{"0":50,"1":-1}}')
    assert opts.ending.offsets == {("t", 0): 50, ("t", 1): -1}
    assert "earliest" in error_of(**BOOT, subscribe="t", endingOffsets="earliest")
    assert "-2" in error_of(**BOOT, subscribe="t", endingOffsets='{"t":{"0":-2}}')
    message = error_of(streaming=True, **BOOT, subscribe="t", endingOffsets="latest")
    assert "batch queries" in message


def test_timestamps_take_precedence() -> None:
    opts = source(
        subscribe="t",
        startingTimestamp="1000",
        startingOffsetsByTimestamp='{"t":{"0":5}}',
        startingOffsets="earliest",
    )
    assert opts.starting == OffsetSpec("timestamp", timestamp=1000)
    opts = source(subscribe="t", startingOffsetsByTimestamp='{"t":{"0":5}}')
    assert opts.starting == OffsetSpec("timestamps", {("t", 0): 5})
    opts = source(subscribe="t", endingTimestamp="99", endingOffsets='{"t":{"0":1}}')
    assert opts.ending == OffsetSpec("timestamp", timestamp=99)
    assert "error' or 'latest'" in error_of(
        **BOOT, subscribe="t", startingOffsetsByTimestampStrategy="maybe"
    )


def test_assign_offsets_must_name_assigned_partitions() -> None:
    message = error_of(**BOOT, assign='{"t":[0]}', startingOffsets='{"t":{"1":5}}')
    assert "not assigned: t-1" in message


def test_trigger_limits_are_streaming_only_and_positive() -> None:
    opts = source(streaming=True, subscribe="t", maxOffsetsPerTrigger="100")
    assert opts.max_offsets_per_trigger == 100
    assert "streaming queries" in error_of(**BOOT, subscribe="t", maxOffsetsPerTrigger="5")
    assert "at least 1" in error_of(True, **BOOT, subscribe="t", maxOffsetsPerTrigger="0")
    assert "integer" in error_of(True, **BOOT, subscribe="t", maxOffsetsPerTrigger="lots")
    assert "must not exceed" in error_of(
        True, **BOOT, subscribe="t", maxOffsetsPerTrigger="5", minOffsetsPerTrigger="6"
    )
    opts = source(streaming=True, subscribe="t", minOffsetsPerTrigger="5", maxTriggerDelay="30s")
    assert opts.max_trigger_delay_ms == 30_000


def test_unknown_and_unsupported_options() -> None:
    assert "did you mean 'startingOffsets'" in error_of(**BOOT, subscribe="t", startingOffset="1")
    assert "not supported" in error_of(**BOOT, subscribe="t", **{"kafka.auto.offset.reset": "x"})
    assert "for writing" in error_of(**BOOT, subscribe="t", topic="x")
    assert "PLAINTEXT" in error_of(**BOOT, subscribe="t", **{"kafka.security.protocol": "SSL"})
    # Options Spark's connector accepts, and other Kafka settings, keep old jobs running.
    source(subscribe="t", groupIdPrefix="g", **{"kafka.session.timeout.ms": "10"})


def test_sink_options() -> None:
    sink = parse_sink_options({**BOOT, "topic": "out", "kafka.compression.type": "zstd"})
    assert sink.topic == "out" and sink.compression_type == "zstd" and sink.acks == -1
    # Larger batches than Java's 16 KiB by default (a write task has its rows at hand), but
    # kafka.batch.size is honoured, and the default stays inside a smaller max.request.size.
    assert sink.batch_size == 262_144
    assert parse_sink_options({**BOOT, "kafka.batch.size": "16384"}).batch_size == 16_384
    small = parse_sink_options({**BOOT, "kafka.max.request.size": "100000"})
    assert small.batch_size == 50_000 and small.max_request_size == 100_000
    with pytest.raises(OptionError, match=r"compression\.type"):
        parse_sink_options({**BOOT, "kafka.compression.type": "brotli"})
    with pytest.raises(OptionError, match=r"kafka\.acks"):
        parse_sink_options({**BOOT, "kafka.acks": "2"})
    with pytest.raises(OptionError, match="Unknown option 'subscribe'"):
        parse_sink_options({**BOOT, "subscribe": "x"})
    with pytest.raises(OptionError, match="bootstrap"):
        parse_sink_options({"topic": "x"})
    # Spark hands a streaming sink the query's checkpoint location along with its options.
    parse_sink_options({**BOOT, "topic": "x", "checkpointLocation": "/tmp/c", "queryName": "q"})


def test_exactly_once_sink_options() -> None:
    plain = parse_sink_options({**BOOT, "topic": "out"})
    assert not plain.exactly_once and plain.transactional_id_prefix == "odradek-spark"
    assert plain.transaction_timeout_ms == 60_000
    sink = parse_sink_options(
        {
            **BOOT,
            "topic": "out",
            "exactlyOnce": "TRUE",
            "transactionalIdPrefix": "receipts",
            "kafka.transaction.timeout.ms": "30000",
        }
    )
    assert sink.exactly_once and sink.transactional_id_prefix == "receipts"
    assert sink.transaction_timeout_ms == 30_000
    with pytest.raises(OptionError, match="needs the option 'topic'"):
        parse_sink_options({**BOOT, "exactlyOnce": "true"})
    with pytest.raises(OptionError, match=r"kafka\.acks"):
        parse_sink_options({**BOOT, "topic": "o", "exactlyOnce": "true", "kafka.acks": "1"})
    with pytest.raises(OptionError, match="idempotence"):
        parse_sink_options(
            {**BOOT, "topic": "o", "exactlyOnce": "true", "kafka.enable.idempotence": "false"}
        )
    with pytest.raises(OptionError, match="'exactlyOnce' must be 'true' or 'false'"):
        parse_sink_options({**BOOT, "topic": "o", "exactlyOnce": "yes"})
    with pytest.raises(OptionError, match="must not be empty"):
        parse_sink_options({**BOOT, "topic": "o", "transactionalIdPrefix": " "})
    with pytest.raises(OptionError, match="set 'exactlyOnce'"):
        parse_sink_options({**BOOT, "topic": "o", "kafka.transactional.id": "t"})


def test_exactly_once_is_for_streaming_writes_only() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    from odradek.spark.source import OdradekDataSource
    from odradek.spark.transactional import TaskTransaction

    options = {**BOOT, "topic": "o", "exactlyOnce": "true"}
    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(OptionError, match="streaming writes"):
        OdradekDataSource(options).writer(schema, False)
    assert OdradekDataSource(options).streamWriter(schema, False).options.exactly_once
    # Outside a micro-batch's task there is no batch id to key the transaction on.
    with pytest.raises(OptionError, match="streaming writes"):
        TaskTransaction.for_current_task(parse_sink_options(options))
