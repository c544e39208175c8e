"""``odradek consume --group``: a real member of a consumer group, seen by Kafka's clients."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.cli.helpers import odradek
from tests.cli.test_produce_consume import create, produce, unique
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=15)}
    finally:
        consumer.close()


def group_consume(bootstrap: str, topic: str, group: str, *args: str):  # type: ignore[no-untyped-def]
    return odradek("consume", topic, "-b", bootstrap, "--group", group, "--timeout-ms", "8000",
                   *args)  # fmt: skip


def test_commits_what_it_printed_and_resumes_there(bootstrap: str) -> None:
    topic, group = unique("grp"), unique("app")
    create(bootstrap, topic, partitions=3)
    produce(bootstrap, topic, b"".join(b"k%d:v%d\n" % (i, i) for i in range(30)),
            "--key-separator", ":").check()  # fmt: skip
    first = group_consume(bootstrap, topic, group, "--from-beginning", "--max-messages", "30")
    assert sorted(first.check().lines) == sorted(f"v{i}" for i in range(30))
    # Kafka's clients read the group's commits: every partition at its end.
    offsets = committed(bootstrap, group, topic, 3)
    assert sum(offsets.values()) == 30
    # A second run resumes at the commits: --from-beginning only applies without one.
    produce(bootstrap, topic, b"late\n").check()
    again = group_consume(bootstrap, topic, group, "--from-beginning", "--max-messages", "1")
    assert again.check().lines == ["late"]
    assert sum(committed(bootstrap, group, topic, 3).values()) == 31


def test_members_share_partitions_by_range_and_are_described(bootstrap: str) -> None:
    topic, group = unique("grp"), unique("app")
    create(bootstrap, topic, partitions=4)
    cmd = [sys.executable, "-m", "odradek", "consume", topic, "-b", bootstrap,
           "--group", group, "--timeout-ms", "60000"]  # fmt: skip
    members = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)
    ]
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while True:
            description = admin.describe_consumer_groups([group])[group].result(timeout=15)
            owned = [
                sorted(tp.partition for tp in m.assignment.topic_partitions)
                for m in description.members
            ]
            if len(owned) == 2 and sum(map(len, owned)) == 4 and all(owned):
                break
            assert time.monotonic() < deadline, f"no stable assignment: {owned}"
            time.sleep(0.5)
        # Range: two members, four partitions -> 0-1 and 2-3.
        assert sorted(owned) == [[0, 1], [2, 3]]
        assert description.partition_assignor == "range"
        assert {m.client_id for m in description.members} == {"odradek-console-consumer"}
        described = odradek("groups", "describe", "--group", group, "-b", bootstrap, "--members")
        assert len([line for line in described.check().lines if group in line]) == 2
    finally:
        for member in members:
            member.send_signal(signal.SIGTERM if member is members[0] else signal.SIGINT)
        for member in members:
            member.communicate(timeout=30)
    # Both left the group on the way out (SIGTERM and Ctrl-C alike): it is empty at once,
    # not after a session timeout.
    description = admin.describe_consumer_groups([group])[group].result(timeout=15)
    assert description.members == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--group", "g", "--partition", "0"], "--group and --partition cannot be used together"),
        (["--group", ""], "--group must not be empty"),
    ],
)
def test_group_usage_errors(bootstrap: str, args: list[str], fragment: str) -> None:
    odradek("consume", "t", "-b", bootstrap, *args).check_error(fragment)


def test_shares_the_group_with_a_kafka_consumer(bootstrap: str) -> None:
    """A confluent-kafka consumer joins mid-way: odradek's member rejoins on the rebalance,
    each gets one partition, and every record is printed by exactly one of them."""
    topic, group = unique("grp"), unique("mixed")
    create(bootstrap, topic, partitions=2)
    cmd = [sys.executable, "-m", "odradek", "consume", topic, "-b", bootstrap,
           "--group", group, "--timeout-ms", "60000"]  # fmt: skip
    ours = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    theirs = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "auto.offset.reset": "earliest", "session.timeout.ms": 10000})  # fmt: skip
    admin = AdminClient({"bootstrap.servers": bootstrap})
    received: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while len(admin.describe_consumer_groups([group])[group].result(15).members) != 1:
            assert time.monotonic() < deadline, "odradek consume never joined"
            time.sleep(0.3)
        theirs.subscribe([topic])
        while True:
            message = theirs.poll(0.3)
            assert message is None or message.error() is None
            owned = [
                sorted(tp.partition for tp in m.assignment.topic_partitions)
                for m in admin.describe_consumer_groups([group])[group].result(15).members
            ]
            if sorted(owned) == [[0], [1]] and theirs.assignment():
                break
            assert time.monotonic() < deadline, f"no shared assignment: {owned}"
        values = [f"v{i}" for i in range(40)]
        produce(bootstrap, topic, "".join(f"k{i}:{v}\n" for i, v in enumerate(values)).encode(),
                "--key-separator", ":").check()  # fmt: skip
        deadline = time.monotonic() + 30
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            message = theirs.poll(0.3)
            if message is not None and message.error() is None:
                received.append(message.value().decode())
                quiet_since = time.monotonic()
            elif received and time.monotonic() - quiet_since > 3:
                break  # their partition is drained
    finally:
        theirs.close()
        ours.send_signal(signal.SIGTERM)
        out, err = ours.communicate(timeout=30)
    printed = out.decode().splitlines()
    assert received and printed, err.decode()
    assert sorted(received + printed) == sorted(values)  # each record once, none lost
