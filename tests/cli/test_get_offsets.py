"""``odradek get-offsets`` against a real broker: kafka-get-offsets' output and rules."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(120)

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> str:
    """12 partitions; partition p holds p records with timestamps T0 + 10 * i."""
    name = f"go-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 12, 1)])[name].result(timeout=20)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(12):
        for i in range(partition):
            producer.produce(name, b"v", partition=partition, timestamp=T0 + 10 * i)
    assert producer.flush(20) == 0
    return name


def get_offsets(bootstrap: str, *args: str):  # type: ignore[no-untyped-def]
    return odradek("get-offsets", "--bootstrap-server", bootstrap, *args)


def test_latest_is_default_and_sorted_like_kafka(bootstrap: str, topic: str) -> None:
    lines = get_offsets(bootstrap, "--topic", topic).check().lines
    # Kafka sorts by the text "topic-partition": 10 and 11 come before 2.
    order = [0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9]
    assert lines == [f"{topic}:{p}:{p}" for p in order]
    assert get_offsets(bootstrap, "--topic", topic, "--time", "-1").check().lines == lines


def test_earliest_max_timestamp_and_timestamp(bootstrap: str, topic: str) -> None:
    for spec in ("-2", "earliest"):
        lines = get_offsets(bootstrap, "--topic", topic, "--partitions", "3,5", "--time", spec)
        assert lines.check().lines == [f"{topic}:3:0", f"{topic}:5:0"]
    for spec in ("-3", "max-timestamp"):
        lines = get_offsets(bootstrap, "--topic", topic, "--partitions", "0,3,5", "--time", spec)
        # The record with the largest timestamp is the last one; empty partition 0 is left out.
        assert lines.check().lines == [f"{topic}:3:2", f"{topic}:5:4"]
    at = get_offsets(bootstrap, "--topic", topic, "--partitions", "1,4", "--time", str(T0 + 15))
    # First record at or after T0+15 is index 2; partition 1 has none, so it is left out.
    assert at.check().lines == [f"{topic}:4:2"]


def test_topic_partition_rules(bootstrap: str, topic: str) -> None:
    lines = get_offsets(bootstrap, "--topic-partitions", f"{topic}:3,{topic}:9-,{topic}:-1")
    assert lines.check().lines == [
        f"{topic}:0:0",
        f"{topic}:10:10",
        f"{topic}:11:11",
        f"{topic}:3:3",
        f"{topic}:9:9",
    ]
    ranged = get_offsets(bootstrap, "--topic-partitions", f"{topic[:5]}.*:4-6").check().lines
    assert ranged == [f"{topic}:4:4", f"{topic}:5:5"]
    # The topic regex must match the whole name.
    get_offsets(bootstrap, "--topic", topic[:-1]).check_error("Could not match any")


def test_internal_topics(bootstrap: str, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"go-{uuid.uuid4().hex}"})
    consumer.commit(offsets=[TopicPartition(topic, 1, 1)], asynchronous=False)
    consumer.close()
    listing = get_offsets(bootstrap).check().lines
    assert any(line.startswith("__consumer_offsets:") for line in listing)
    excluded = get_offsets(bootstrap, "--exclude-internal-topics").check().lines
    assert not any(line.startswith("__consumer_offsets:") for line in excluded)
    assert f"{topic}:7:7" in excluded


def test_errors(bootstrap: str, topic: str) -> None:
    get_offsets(bootstrap, "--time", "yesterday").check_error("Malformed time argument yesterday")
    get_offsets(bootstrap, "--time", "-7").check_error("Malformed time argument -7")
    get_offsets(bootstrap, "--topic-partitions", f"{topic}:1", "--topic", topic).check_error(
        "--topic-partitions cannot be used with --topic or --partitions"
    )
    get_offsets(bootstrap, "--partitions", "1,x").check_error(
        "--partitions expects a comma separated list of numeric partition ids"
    )
    get_offsets(bootstrap, "--topic-partitions", "a:b").check_error(
        "Invalid rule specification: a:b"
    )
    get_offsets(bootstrap, "--topic", "(").check_error("bad topic regular expression")
    get_offsets(bootstrap, "--topic", "no-such-topic-anywhere").check_error(
        "Could not match any topic-partitions"
    )
    odradek("get-offsets", "--bootstrap-server", f"127.0.0.1:{free_port()}").check_error(
        "no broker reachable"
    )
