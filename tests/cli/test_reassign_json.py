"""kafka-reassign-partitions' JSON files: parsed strictly, printed as Kafka prints them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.cli.errors import CliError
from odradek.cli.reassign_json import (
    format_reassignment,
    parse_broker_list,
    parse_reassignment,
    parse_topics_to_move,
)
from odradek.cli.reassign_partitions import throttle_configs


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "f.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_round_trip_of_kafkas_format(tmp_path: Path) -> None:
    text = format_reassignment({("b", 1): (3, 1), ("a", 0): (2,)})
    assert text == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[2],'
        '"log_dirs":["any"]},{"topic":"b","partition":1,"replicas":[3,1],'
        '"log_dirs":["any","any"]}]}'
    )
    assert parse_reassignment(write(tmp_path, text)) == {("a", 0): (2,), ("b", 1): (3, 1)}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{oops", "is not valid JSON"),
        ([], "a reassignment is a JSON object"),
        ({"version": 2, "partitions": []}, "Not supported version field value 2"),
        ({"version": 1}, 'missing a "partitions" list'),
        ({"partitions": []}, "Partition reassignment list cannot be empty"),
        ({"partitions": [{"topic": "t", "replicas": [1]}]}, "needs a topic and a partition"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": ["1"]}]}, "broker ids"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, "cannot be empty"),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": []}]},
            "Length of replicas and log_dirs must be the same",
        ),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]},
            'log_dirs other than "any" are not supported',
        ),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2},
            "Partition reassignment contains duplicate topic partitions: t-0",
        ),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 1]}]},
            "Partition replica lists may not contain duplicate entries: t-0 contains multiple "
            "entries for 1",
        ),
    ],
)
def test_bad_reassignment_files(tmp_path: Path, data: object, message: str) -> None:
    with pytest.raises(CliError, match=None) as caught:
        parse_reassignment(write(tmp_path, data))
    assert message in caught.value.format_message()
    assert "\n" not in caught.value.format_message()


def test_topics_and_broker_lists(tmp_path: Path) -> None:
    assert parse_topics_to_move(write(tmp_path, {"topics": [{"topic": "a"}, {"topic": "b"}]})) == [
        "a",
        "b",
    ]
    with pytest.raises(CliError, match="duplicate entries: a"):
        parse_topics_to_move(write(tmp_path, {"topics": [{"topic": "a"}, {"topic": "a"}]}))
    assert parse_broker_list("1,2, 3") == [1, 2, 3]
    with pytest.raises(CliError, match="Broker list contains duplicate entries: 2"):
        parse_broker_list("1,2,2")
    with pytest.raises(CliError, match="broker ids"):
        parse_broker_list("1,x")


def test_throttled_replicas_as_kafka_computes_them() -> None:
    current = {("t", 0): (1, 2), ("t", 1): (2, 3)}
    proposed = {("t", 0): (3, 2), ("t", 1): (2, 3)}
    assert throttle_configs(current, proposed) == {
        "t": {
            "leader.replication.throttled.replicas": "0:1,0:2,1:2,1:3",
            "follower.replication.throttled.replicas": "0:3",
        }
    }
