"""``odradek topics ...`` as a subprocess against a real broker subprocess."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(120)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def topics(bootstrap: str, *args: str):  # type: ignore[no-untyped-def]
    return odradek("topics", *args, "--bootstrap-server", bootstrap)


def describe_lines(bootstrap: str, name: str, *extra: str) -> list[str]:
    return topics(bootstrap, "describe", name, *extra).check().lines


def configs_of(header_line: str) -> dict[str, str]:
    # Values may hold commas (cleanup.policy=compact,delete): split only before "key=".
    text = header_line.split("Configs: ", 1)[1]
    return dict(item.split("=", 1) for item in re.split(r",(?=[\w.]+=)", text) if item)


def test_create_list_describe_delete(bootstrap: str) -> None:
    name = unique("cli-topic")
    result = topics(
        bootstrap,
        "create",
        name,
        "--partitions",
        "3",
        "--config",
        "retention.ms=3600000",
        "--config",
        "cleanup.policy=compact,delete",
    ).check()
    assert result.lines == [f"Created topic {name}."]

    assert name in topics(bootstrap, "list").check().lines

    lines = describe_lines(bootstrap, name)
    header = lines[0].split("\t")
    assert header[:3] == [f"Topic: {name}", "PartitionCount: 3", "ReplicationFactor: 1"]
    assert configs_of(lines[0]) == {
        "retention.ms": "3600000",
        "cleanup.policy": "compact,delete",
    }
    assert lines[1:] == [
        f"\tTopic: {name}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(3)
    ]
    all_configs = configs_of(describe_lines(bootstrap, name, "--all-configs")[0])
    assert all_configs["segment.bytes"] == "1073741824"
    assert all_configs["retention.ms"] == "3600000"

    assert topics(bootstrap, "delete", name).check().lines == [f"Deleted topic {name}."]
    deadline = time.monotonic() + 20
    while name in topics(bootstrap, "list").check().lines and time.monotonic() < deadline:
        time.sleep(0.2)
    assert name not in topics(bootstrap, "list").check().lines


def test_create_uses_broker_defaults(bootstrap: str) -> None:
    name = unique("cli-defaults")
    topics(bootstrap, "create", name).check()
    header = describe_lines(bootstrap, name)[0]
    assert "PartitionCount: 1\tReplicationFactor: 1\tConfigs: " in header
    assert configs_of(header) == {}


def test_create_errors(bootstrap: str) -> None:
    name = unique("cli-dup")
    topics(bootstrap, "create", name).check()
    topics(bootstrap, "create", name).check_error("TOPIC_ALREADY_EXISTS")
    assert topics(bootstrap, "create", name, "--if-not-exists").check().lines == [
        f"Topic {name} already exists."
    ]
    topics(bootstrap, "create", unique("cli-bad"), "--config", "retention.ms=soon").check_error(
        "INVALID_CONFIG"
    )
    topics(bootstrap, "create", unique("cli-bad"), "--config", "no.such.key=1").check_error(
        "INVALID_CONFIG"
    )
    topics(bootstrap, "create", unique("cli-bad"), "--config", "retention.ms").check_error(
        "--config expects KEY=VALUE"
    )
    topics(bootstrap, "create", "bad/name").check_error("INVALID_TOPIC_EXCEPTION")
    topics(bootstrap, "create", "").check_error("topic name")
    topics(bootstrap, "create", unique("cli-bad"), "--replication-factor", "3").check_error(
        "INVALID_REPLICATION_FACTOR"
    )
    # click's own usage errors are one line too (exit 2 is click's usage code).
    usage = topics(bootstrap, "create", unique("cli-bad"), "--partitions", "0")
    assert usage.code == 2 and "Traceback" not in usage.stderr
    valid = topics(bootstrap, "create", unique("cli-valid"), "--validate-only").check()
    assert "not created" in valid.out


def test_alter_configs_and_partitions(bootstrap: str) -> None:
    name = unique("cli-alter")
    topics(bootstrap, "create", name, "--partitions", "2", "--config", "retention.ms=1000").check()
    result = topics(
        bootstrap,
        "alter",
        name,
        "--add-config",
        "max.message.bytes=500000",
        "--add-config",
        "segment.ms=600000",
        "--delete-config",
        "retention.ms",
        "--partitions",
        "4",
    ).check()
    assert result.lines == [
        f"Updated config of topic {name}.",
        f"Topic {name} now has 4 partitions.",
    ]
    lines = describe_lines(bootstrap, name)
    assert "PartitionCount: 4" in lines[0]
    assert configs_of(lines[0]) == {"max.message.bytes": "500000", "segment.ms": "600000"}
    assert len(lines) == 5

    # Incremental: untouched keys keep their values.
    topics(bootstrap, "alter", name, "--add-config", "retention.ms=5000").check()
    assert configs_of(describe_lines(bootstrap, name)[0]) == {
        "max.message.bytes": "500000",
        "segment.ms": "600000",
        "retention.ms": "5000",
    }

    topics(bootstrap, "alter", name, "--partitions", "2").check_error("INVALID_PARTITIONS")
    topics(bootstrap, "alter", name).check_error("nothing to alter")
    topics(bootstrap, "alter", name, "--add-config", "retention.ms=x").check_error("INVALID_CONFIG")
    topics(bootstrap, "alter", name, "--delete-config", "a=b").check_error("--delete-config")
    topics(bootstrap, "alter", unique("cli-missing"), "--partitions", "3").check_error(
        "does not exist"
    )


def test_delete_and_describe_unknown_topics(bootstrap: str) -> None:
    missing = unique("cli-missing")
    topics(bootstrap, "delete", missing).check_error("UNKNOWN_TOPIC_OR_PARTITION")
    assert topics(bootstrap, "delete", missing, "--if-exists").check().lines == [
        f"Topic {missing} does not exist."
    ]
    topics(bootstrap, "describe", missing).check_error("does not exist")


def test_describe_every_topic(bootstrap: str) -> None:
    names = sorted(unique("cli-all") for _ in range(2))
    for name in names:
        topics(bootstrap, "create", name).check()
    lines = topics(bootstrap, "describe").check().lines
    headers = [line for line in lines if line.startswith("Topic: ")]
    described = [re.match(r"Topic: (\S+)", line).group(1) for line in headers]  # type: ignore[union-attr]
    assert set(names) <= set(described)
    assert described == sorted(described)


@pytest.mark.parametrize(
    "args",
    [
        ("topics", "list"),
        ("topics", "create", "x"),
        ("topics", "describe"),
        ("topics", "delete", "x"),
        ("topics", "alter", "x", "--partitions", "3"),
        ("produce", "x"),
        ("consume", "x", "--timeout-ms", "1000"),
    ],
)
def test_unreachable_broker_is_one_line_error(args: tuple[str, ...]) -> None:
    port = free_port()  # nothing listens here
    started = time.monotonic()
    result = odradek(*args, "--bootstrap-server", f"127.0.0.1:{port}", stdin=b"line\n")
    result.check_error(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 30


def test_bad_bootstrap_server_argument() -> None:
    odradek("topics", "list", "--bootstrap-server", "localhost:notaport").check_error(
        "--bootstrap-server"
    )


def test_describe_partition_filters_on_the_embedded_broker(bootstrap: str) -> None:
    name = unique("cli-filters")
    topics(bootstrap, "create", name, "--partitions", "2").check()
    # One replica (the broker itself) in the ISR: nothing under-replicated or unavailable.
    for flag in ("--under-replicated-partitions", "--unavailable-partitions"):
        assert describe_lines(bootstrap, name, flag) == []
    # min.insync.replicas=1 (the default): an ISR of one is at the minimum, not under it.
    assert describe_lines(bootstrap, name, "--at-min-isr-partitions") == [
        f"\tTopic: {name}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(2)
    ]
    assert describe_lines(bootstrap, name, "--under-min-isr-partitions") == []
    topics(bootstrap, "alter", name, "--add-config", "min.insync.replicas=2").check()
    assert len(describe_lines(bootstrap, name, "--under-min-isr-partitions")) == 2
    assert describe_lines(bootstrap, name, "--at-min-isr-partitions") == []
