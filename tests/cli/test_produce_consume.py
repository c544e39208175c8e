"""``odradek produce`` and ``odradek consume`` as subprocesses against a real broker."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def produce(bootstrap: str, topic: str, data: bytes, *args: str):  # type: ignore[no-untyped-def]
    return odradek("produce", topic, "--bootstrap-server", bootstrap, *args, stdin=data)


def consume(bootstrap: str, topic: str, *args: str):  # type: ignore[no-untyped-def]
    return odradek(
        "consume", topic, "--bootstrap-server", bootstrap, "--timeout-ms", "15000", *args
    )


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    # Through a third-party admin client, so these tests depend only on produce/consume.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=20)


def test_round_trip_with_keys_headers_and_timestamps(bootstrap: str) -> None:
    topic = unique("cli-rt")
    create(bootstrap, topic)
    lines = b"".join(f"user{i % 3}:event {i}\n".encode() for i in range(20))
    before_ms = int(time.time() * 1000)
    result = produce(
        bootstrap,
        topic,
        lines,
        "--key-separator",
        ":",
        "--header",
        "source=cli",
        "--header",
        "flag",
        "--print-offsets",
    ).check()
    assert result.lines == [f"{topic}\t0\t{i}" for i in range(20)]

    out = consume(
        bootstrap,
        topic,
        "--from-beginning",
        "--max-messages",
        "20",
        "--print-key",
        "--print-headers",
        "--print-timestamp",
        "--print-offset",
    ).check()
    assert "Processed a total of 20 messages" in out.stderr
    assert len(out.lines) == 20
    for i, line in enumerate(out.lines):
        timestamp, offset, headers, key, value = line.split("\t")
        assert timestamp.startswith("CreateTime:")
        assert before_ms - 1000 <= int(timestamp.split(":")[1]) <= time.time() * 1000
        assert offset == f"Offset:{i}"
        assert headers == "source:cli,flag:null"
        assert (key, value) == (f"user{i % 3}", f"event {i}")


def test_keyed_records_are_partitioned_like_the_java_client(bootstrap: str) -> None:
    topic = unique("cli-keys")
    create(bootstrap, topic, partitions=4)
    lines = b"".join(f"k{i % 8}\tv{i}\n".encode() for i in range(200))
    produce(bootstrap, topic, lines, "--key-separator", "\\t").check()
    out = consume(
        bootstrap,
        topic,
        "--from-beginning",
        "--max-messages",
        "200",
        "--property",
        "print.key=true",
        "--property",
        "print.partition=true",
        "--property",
        "key.separator=|",
    ).check()
    rows = [line.split("|") for line in out.lines]
    assert len(rows) == 200
    partition_of_key: dict[str, set[str]] = {}
    for partition, key, _value in rows:
        partition_of_key.setdefault(key, set()).add(partition)
    assert all(len(parts) == 1 for parts in partition_of_key.values())
    # librdkafka's murmur2_random partitioner is the Java client's mapping: same answer.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique("check"), "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(4)])
        seen: dict[bytes, int] = {}
        deadline = time.monotonic() + 20
        while len(seen) < 8 and time.monotonic() < deadline:
            for message in consumer.consume(100, timeout=0.5):
                if message.error() is None:
                    seen[message.key()] = message.partition()
    finally:
        consumer.close()
    from confluent_kafka import Producer

    checker = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    expected: dict[bytes, int] = {}

    def remember(err: object, msg: object) -> None:
        assert err is None
        expected[msg.key()] = msg.partition()  # type: ignore[attr-defined]

    check_topic = unique("cli-keys-check")
    create(bootstrap, check_topic, partitions=4)
    for key in seen:
        checker.produce(check_topic, value=b"x", key=key, on_delivery=remember)
    assert checker.flush(20) == 0
    assert seen == expected


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_and_binary_values(bootstrap: str, codec: str) -> None:
    topic = unique(f"cli-{codec}")
    # Any bytes but a line end: not \n, and no \r right before it (CRLF input is allowed).
    values = [bytes([i, 0xFF, 0xFE, 0x00, i]) * (i + 1) for i in range(1, 60) if i not in (10, 13)]
    data = b"".join(v + b"\n" for v in values)
    produce(bootstrap, topic, data, "--compression", codec, "--acks", "1").check()
    out = consume(bootstrap, topic, "--from-beginning", "--max-messages", str(len(values)))
    assert out.check().stdout == data


def test_null_marker_tombstones_and_empty_lines(bootstrap: str) -> None:
    topic = unique("cli-null")
    produce(
        bootstrap,
        topic,
        b"a:1\nb:NULL\nNULL:3\n:\n",
        "--key-separator",
        ":",
        "--null-marker",
        "NULL",
    ).check()
    out = consume(bootstrap, topic, "--from-beginning", "--max-messages", "4", "--print-key")
    assert out.check().lines == ["a\t1", "b\tnull", "null\t3", "\t"]


def test_offset_and_partition_selection(bootstrap: str) -> None:
    topic = unique("cli-offsets")
    create(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, b"".join(b"p0-%d\n" % i for i in range(10)), "-p", "0").check()
    produce(bootstrap, topic, b"".join(b"p1-%d\n" % i for i in range(5)), "-p", "1").check()

    out = consume(bootstrap, topic, "--partition", "0", "--offset", "7", "--max-messages", "3")
    assert out.check().lines == ["p0-7", "p0-8", "p0-9"]
    # Nothing more after those: the idle timeout ends it with exactly the three.
    out = consume(bootstrap, topic, "--partition", "0", "--offset", "7", "--timeout-ms", "2000")
    assert out.check().lines == ["p0-7", "p0-8", "p0-9"]
    out = consume(
        bootstrap, topic, "--partition", "1", "--offset", "earliest", "--max-messages", "2"
    )
    assert out.check().lines == ["p1-0", "p1-1"]
    # Past the end: reset to the end, so nothing (and no error) before the timeout.
    out = consume(bootstrap, topic, "--partition", "1", "--offset", "100", "--timeout-ms", "1500")
    assert out.check().lines == []
    out = consume(bootstrap, topic, "--from-beginning", "--max-messages", "15").check()
    assert sorted(out.lines) == sorted(
        [f"p0-{i}" for i in range(10)] + [f"p1-{i}" for i in range(5)]
    )
    # --timeout-ms ends an idle consumer cleanly.
    idle = consume(bootstrap, topic, "--timeout-ms", "1000").check()
    assert idle.lines == [] and "Processed a total of 0 messages" in idle.stderr


def test_default_start_is_the_end_of_the_log(bootstrap: str) -> None:
    topic = unique("cli-latest")
    produce(bootstrap, topic, b"old-1\nold-2\n").check()
    reader = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "odradek",
            "consume",
            topic,
            "--bootstrap-server",
            bootstrap,
            "--max-messages",
            "2",
            "--timeout-ms",
            "30000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        n = 0
        while reader.poll() is None and time.monotonic() < deadline:
            # The reader's start position is set some time after it starts: keep writing
            # until it has seen two new records.
            produce(bootstrap, topic, f"new-{n}\n".encode()).check()
            n += 1
            time.sleep(0.3)
        stdout, stderr = reader.communicate(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait(10)
    assert reader.returncode == 0, stderr
    lines = stdout.decode().splitlines()
    assert len(lines) == 2 and all(line.startswith("new-") for line in lines)
    first = int(lines[0].split("-")[1])
    assert lines[1] == f"new-{first + 1}"


def test_produce_and_consume_errors(bootstrap: str) -> None:
    topic = unique("cli-errors")
    create(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, b"k:v\nno separator here\n", "--key-separator", ":").check_error(
        "line 2", "no key separator"
    )
    produce(bootstrap, topic, b"x\n", "--partition", "5").check_error("no partition 5")
    produce(bootstrap, topic, b"x" * 2_000_000 + b"\n").check_error("MESSAGE_TOO_LARGE")
    produce(bootstrap, "bad/topic", b"x\n").check_error("INVALID_TOPIC_EXCEPTION")
    produce(bootstrap, topic, b"x\n", "--header", "=v").check_error("--header")
    produce(bootstrap, topic, b"x\n", "--key-separator", "\\q").check_error("unknown escape")

    consume(bootstrap, unique("cli-nope")).check_error("does not exist")
    consume(bootstrap, topic, "--partition", "9").check_error("no partition 9")
    consume(bootstrap, topic, "--offset", "5").check_error("needs --partition")
    consume(bootstrap, topic, "--offset", "soon", "-p", "0").check_error("--offset")
    consume(bootstrap, topic, "--offset", str(2**63), "-p", "0").check_error("--offset")
    consume(bootstrap, topic, "--from-beginning", "--offset", "1", "-p", "0").check_error(
        "cannot be used together"
    )
    consume(bootstrap, topic, "--property", "print.everything=true").check_error("--property")


def test_many_lines_from_a_pipe(bootstrap: str) -> None:
    topic = unique("cli-many")
    count = 30_000
    data = b"".join(b"record-%06d\n" % i for i in range(count))
    started = time.monotonic()
    produce(bootstrap, topic, data, "--linger-ms", "20").check()
    produced_in = time.monotonic() - started
    out = consume(bootstrap, topic, "--from-beginning", "--max-messages", str(count)).check()
    assert out.stdout == data
    assert produced_in < 30


def test_produce_to_unknown_topic_without_auto_create(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broker = BrokerProcess(
        tmp_path / "data", overrides={"auto.create.topics.enable": "false"}
    ).start()
    try:
        produce(broker.bootstrap, "never-created", b"x\n").check_error("does not exist")
    finally:
        broker.stop()
