"""``odradek delete-records`` (kafka-delete-records): the JSON file's rules and the output
lines as units, then against a real broker: the log start really moves, and every failure
is Kafka's per-partition line or one error line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition

from odradek.cli.delete_records import delete_records, parse_offset_json, report_lines
from odradek.cli.errors import CliError
from odradek.client.errors import ClientError, ErrorCode, KafkaError
from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess, free_port

OUT_OF_RANGE = (
    "org.apache.kafka.common.errors.OffsetOutOfRangeException: "
    "The requested offset is not within the range of offsets maintained by the server."
)
UNKNOWN = (
    "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
    "This server does not host this topic-partition."
)

# -- units ----------------------------------------------------------------------------------


def test_parse_kafkas_format() -> None:
    text = json.dumps(
        {
            "partitions": [
                {"topic": "a", "partition": 0, "offset": 5},
                {"topic": "a", "partition": 1, "offset": -1},
                {"topic": "b", "partition": 0, "offset": 0},
            ],
            "version": 1,
        }
    )
    assert parse_offset_json(text) == {("a", 0): 5, ("a", 1): -1, ("b", 0): 0}
    # No version field: version 1, as Kafka's tool assumes; an empty list is nothing to do.
    assert parse_offset_json('{"partitions": []}') == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "The input string is not a valid JSON"),
        ("[1, 2]", "must be an object"),
        ('{"version": 1}', "Missing partitions field"),
        ('{"partitions": [], "version": 2}', "Not supported version field value 2"),
        ('{"partitions": {"topic": "a"}}', '"partitions" must be a list'),
        ('{"partitions": [{"topic": "a", "partition": 0}]}', "invalid partition entry"),
        ('{"partitions": [{"topic": "a", "partition": "0", "offset": 1}]}', "invalid partition"),
        ('{"partitions": [{"topic": 1, "partition": 0, "offset": 1}]}', "invalid partition"),
        ('{"partitions": [{"topic": "a", "partition": 0, "offset": true}]}', "invalid partition"),
        ('{"partitions": [{"topic": "a", "partition": 0, "offset": -2}]}', "invalid offset -2"),
        (
            '{"partitions": [{"topic": "a", "partition": 0, "offset": 1},'
            ' {"topic": "a", "partition": 0, "offset": 2}]}',
            "Offset json file contains duplicate topic partitions: a-0",
        ),
    ],
)
def test_parse_refuses_bad_files(text: str, message: str) -> None:
    with pytest.raises(CliError, match=message):
        parse_offset_json(text)


def test_report_lines_are_kafkas_sorted() -> None:
    lines, failed = report_lines(
        {
            ("b", 0): KafkaError(ErrorCode.offset_out_of_range, "DeleteRecords for b-0"),
            ("a", 1): 7,
            ("a", 0): KafkaError(ErrorCode.unknown_topic_or_partition, "topic 'a'"),
            ("c", 0): KafkaError(ErrorCode.not_enough_replicas, "DeleteRecords for c-0"),
            ("d", 0): ClientError("connection to 127.0.0.1:1 refused"),
        }
    )
    assert lines == [
        f"partition: a-0\terror: {UNKNOWN}",
        "partition: a-1\tlow_watermark: 7",
        f"partition: b-0\terror: {OUT_OF_RANGE}",
        # Errors without a Java twin in the table print as odradek's own error.
        "partition: c-0\terror: NOT_ENOUGH_REPLICAS: DeleteRecords for c-0",
        "partition: d-0\terror: connection to 127.0.0.1:1 refused",
    ]
    assert failed == 4


def test_help_is_kafkas() -> None:
    text = CliRunner().invoke(delete_records, ["--help"]).output
    assert "This tool helps to delete records of the given partitions down to the" in text
    assert "REQUIRED: The JSON file with offset per" in text
    assert "--command-config" in text and "--bootstrap-server" in text


# -- against a broker -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(shared_broker: BrokerProcess) -> BrokerProcess:
    bootstrap = shared_broker.bootstrap
    odradek("topics", "create", "dr", "--partitions", "2", "-b", bootstrap).check()
    odradek("produce", "dr", "-p", "0", "-b", bootstrap, stdin=b"a\nb\nc\nd\ne\n").check()
    odradek("produce", "dr", "-p", "1", "-b", bootstrap, stdin=b"x\ny\n").check()
    return shared_broker


def offsets_file(path: Path, *entries: tuple[str, int, int]) -> str:
    partitions = [{"topic": t, "partition": p, "offset": o} for t, p, o in entries]
    path.write_text(json.dumps({"partitions": partitions, "version": 1}))
    return str(path)


@pytest.mark.timeout(120)
def test_delete_moves_the_log_start(loaded: BrokerProcess, tmp_path: Path) -> None:
    boot = loaded.bootstrap
    spec = offsets_file(tmp_path / "o.json", ("dr", 0, 3), ("dr", 1, -1))
    result = odradek("delete-records", "--bootstrap-server", boot, "--offset-json-file", spec)
    assert result.check().lines == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: dr-0\tlow_watermark: 3",
        "partition: dr-1\tlow_watermark: 2",  # -1: up to the high watermark
    ]
    # What another client sees: the low watermarks moved, the high ones did not.
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "dr-watermarks"})
    try:
        marks = [consumer.get_watermark_offsets(TopicPartition("dr", p), 10) for p in (0, 1)]
    finally:
        consumer.close()
    assert marks == [(3, 5), (2, 2)]
    read = odradek(
        "consume", "dr", "-p", "0", "--from-beginning", "--timeout-ms", "3000", "-b", boot
    )
    assert read.check().lines == ["d", "e"]


@pytest.mark.timeout(120)
def test_partition_errors_are_kafkas_lines(loaded: BrokerProcess, tmp_path: Path) -> None:
    spec = offsets_file(
        tmp_path / "o.json", ("dr", 0, 99), ("ghost", 0, 1), ("dr", 7, 0), ("dr", 1, 2)
    )
    result = odradek("delete-records", "-b", loaded.bootstrap, "--offset-json-file", spec)
    result.check_error("3 partition(s) could not be deleted")
    assert result.lines == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: dr-0\terror: {OUT_OF_RANGE}",  # beyond the high watermark (5)
        "partition: dr-1\tlow_watermark: 2",  # the good partition is still done
        f"partition: dr-7\terror: {UNKNOWN}",
        f"partition: ghost-0\terror: {UNKNOWN}",
    ]


@pytest.mark.timeout(120)
def test_unusable_input_is_one_line(loaded: BrokerProcess, tmp_path: Path) -> None:
    boot = loaded.bootstrap
    missing = str(tmp_path / "nope.json")
    odradek("delete-records", "-b", boot, "--offset-json-file", missing).check_error(
        "cannot read", "nope.json"
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    result = odradek("delete-records", "-b", boot, "--offset-json-file", str(bad))
    assert result.check_error("not a valid JSON").out == ""  # nothing executed
    dup = offsets_file(tmp_path / "dup.json", ("dr", 0, 1), ("dr", 0, 2))
    odradek("delete-records", "-b", boot, "--offset-json-file", dup).check_error(
        "duplicate topic partitions: dr-0"
    )
    spec = offsets_file(tmp_path / "o.json", ("dr", 0, 1))
    down = odradek("delete-records", "-b", f"127.0.0.1:{free_port()}", "--offset-json-file", spec)
    assert down.check_error("no broker reachable").out == ""
    usage = odradek("delete-records", "-b", boot)
    assert usage.code == 2 and "--offset-json-file" in usage.stderr
    assert "Traceback" not in usage.stderr
