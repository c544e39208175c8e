"""``odradek groups ...`` as a subprocess against a real broker subprocess.

Groups are made real: an active one by a librdkafka consumer subscribed in this process, an
inactive one by committing offsets from outside (odradek's GroupAdmin, as
kafka-consumer-groups does). Every expectation is computed from what was produced and
committed, and checked again through OffsetFetch after each ``--execute``.
"""

from __future__ import annotations

import datetime
import os
import pty
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.group_admin import SyncGroupAdmin
from tests.cli.helpers import Result, odradek
from tests.helpers.broker import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(180)

WAIT_S = 20.0
# Records per partition of the test topics: three partitions with different ends.
SIZES = (10, 20, 30)
T0 = 1_700_000_000_000  # record i of a partition has timestamp T0 + i seconds


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


@pytest.fixture(scope="module")
def group_admin(bootstrap: str) -> Iterator[SyncGroupAdmin]:
    admin = SyncGroupAdmin(bootstrap)
    try:
        yield admin
    finally:
        admin.close()


def groups(bootstrap: str, *args: str) -> Result:
    return odradek("groups", *args, "--bootstrap-server", bootstrap)


def make_topic(bootstrap: str) -> str:
    topic = unique("cli-grp")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, len(SIZES), 1)])[topic].result(timeout=WAIT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, size in enumerate(SIZES):
        for i in range(size):
            producer.produce(topic, b"x", partition=partition, timestamp=T0 + i * 1000)
    assert producer.flush(WAIT_S) == 0
    return topic


def rows(result: Result) -> list[dict[str, str]]:
    """A kafka-consumer-groups table (columns apart by spaces) as dicts per row."""
    # Columns are at least two spaces apart; a cell may hold one ("COORDINATOR (ID)").
    # Several groups print several tables, each with its header, apart by a blank line.
    parsed: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in result.lines:
        if not line.strip():
            header = None
            continue
        cells = re.split(r" {2,}", line.strip())
        if header is None:
            header = cells
        else:
            parsed.append(dict(zip(header, cells, strict=True)))
    return parsed


def committed(admin: SyncGroupAdmin, group: str, topic: str) -> dict[int, int]:
    return {p: o.offset for (t, p), o in admin.fetch_offsets(group).items() if t == topic}


class ActiveMember:
    """A librdkafka consumer in ``group`` kept alive (polled) while the CLI runs."""

    def __init__(self, bootstrap: str, group: str, topic: str, admin: SyncGroupAdmin) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": "cli-test-client",
                "enable.auto.commit": False,
                "session.timeout.ms": 30000,  # the CLI subprocesses take a while; stay in
                "partition.assignment.strategy": "range",
            }
        )
        self.consumer.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            self.consumer.poll(0.1)
            described = admin.describe_group(group)
            if described.state == "Stable" and len(self.consumer.assignment()) == len(SIZES):
                return
        raise AssertionError("the consumer never became a stable member")

    def close(self) -> None:
        self.consumer.close()


def test_list_describe_and_states(bootstrap: str, group_admin: SyncGroupAdmin) -> None:
    topic = make_topic(bootstrap)
    idle, active = unique("cli-idle"), unique("cli-active")
    group_admin.commit_offsets(idle, {(topic, 0): 4, (topic, 1): 20})
    member = ActiveMember(bootstrap, active, topic, group_admin)
    try:
        listed = groups(bootstrap, "list").check().lines
        assert idle in listed and active in listed
        stable = rows(groups(bootstrap, "list", "--state", "stable").check())
        assert {"GROUP": active, "STATE": "Stable"} in stable
        assert all(r["GROUP"] != idle for r in stable)
        empty = rows(groups(bootstrap, "list", "--state", "Empty").check())
        assert {"GROUP": idle, "STATE": "Empty"} in empty

        # An inactive group: only partitions with committed offsets, no consumer.
        result = groups(bootstrap, "describe", "--group", idle).check()
        assert f"Consumer group '{idle}' has no active members." in result.stderr
        assert rows(result) == [
            {
                "GROUP": idle,
                "TOPIC": topic,
                "PARTITION": "0",
                "CURRENT-OFFSET": "4",
                "LOG-END-OFFSET": "10",
                "LAG": "6",
                "CONSUMER-ID": "-",
                "HOST": "-",
                "CLIENT-ID": "-",
            },
            {
                "GROUP": idle,
                "TOPIC": topic,
                "PARTITION": "1",
                "CURRENT-OFFSET": "20",
                "LOG-END-OFFSET": "20",
                "LAG": "0",
                "CONSUMER-ID": "-",
                "HOST": "-",
                "CLIENT-ID": "-",
            },
        ]

        # An active group: every assigned partition, with its consumer; nothing committed.
        member_id = group_admin.describe_group(active).members[0].member_id
        result = groups(bootstrap, "describe", "--group", active).check()
        assert "no active members" not in result.stderr
        described = rows(result)
        assert [r["PARTITION"] for r in described] == ["0", "1", "2"]
        for row, size in zip(described, SIZES, strict=True):
            assert row["CURRENT-OFFSET"] == "-" and row["LAG"] == "-"
            assert row["LOG-END-OFFSET"] == str(size)
            assert row["CONSUMER-ID"] == member_id
            assert row["HOST"] == "/127.0.0.1"
            assert row["CLIENT-ID"] == "cli-test-client"

        members = rows(groups(bootstrap, "describe", "--group", active, "--members").check())
        assert members == [
            {
                "GROUP": active,
                "CONSUMER-ID": member_id,
                "GROUP-INSTANCE-ID": "-",
                "HOST": "/127.0.0.1",
                "CLIENT-ID": "cli-test-client",
                "#PARTITIONS": "3",
            }
        ]
        (state,) = rows(groups(bootstrap, "describe", "--group", active, "--state").check())
        assert state["STATE"] == "Stable"
        assert state["ASSIGNMENT-STRATEGY"] == "range"
        assert state["#MEMBERS"] == "1"
        assert state["COORDINATOR (ID)"] == f"{bootstrap} (0)"

        # Two groups at once, and a topic filter that matches nothing.
        both = rows(groups(bootstrap, "describe", "--group", idle, "--group", active).check())
        assert len(both) == 2 + 3
        none = groups(bootstrap, "describe", "--group", idle, "--topic", "elsewhere").check()
        assert rows(none) == []
    finally:
        member.close()

    groups(bootstrap, "describe", "--group", unique("cli-nope")).check_error("does not exist")


def test_delete(bootstrap: str, group_admin: SyncGroupAdmin) -> None:
    topic = make_topic(bootstrap)
    idle, active = unique("cli-del-idle"), unique("cli-del-active")
    group_admin.commit_offsets(idle, {(topic, 0): 1})
    member = ActiveMember(bootstrap, active, topic, group_admin)
    try:
        groups(bootstrap, "delete", "--group", active).check_error("NON_EMPTY_GROUP", active)
        assert group_admin.describe_group(active).state == "Stable"
    finally:
        member.close()
    result = groups(bootstrap, "delete", "--group", idle).check()
    assert result.lines == [f"Deletion of requested consumer groups ('{idle}') was successful."]
    assert idle not in groups(bootstrap, "list").check().lines
    assert group_admin.fetch_offsets(idle) == {}
    groups(bootstrap, "delete", "--group", idle).check_error("GROUP_ID_NOT_FOUND")


def test_delete_offsets(bootstrap: str, group_admin: SyncGroupAdmin) -> None:
    topic = make_topic(bootstrap)
    group = unique("cli-delofs")
    group_admin.commit_offsets(group, {(topic, 0): 1, (topic, 1): 2, (topic, 2): 3})
    result = groups(bootstrap, "delete-offsets", "--group", group, "--topic", f"{topic}:1")
    assert rows(result.check()) == [{"TOPIC": topic, "PARTITION": "1", "STATUS": "Successful"}]
    assert committed(group_admin, group, topic) == {0: 1, 2: 3}


def reset(bootstrap: str, group: str, *args: str) -> Result:
    return groups(bootstrap, "reset-offsets", "--group", group, *args)


def plan(result: Result) -> dict[int, int]:
    return {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in rows(result.check())}


def test_reset_offsets_scenarios(bootstrap: str, group_admin: SyncGroupAdmin) -> None:
    topic = make_topic(bootstrap)
    group = unique("cli-reset")
    start = {0: 4, 1: 15, 2: 2}
    group_admin.commit_offsets(group, {(topic, p): o for p, o in start.items()})

    # Dry run is the default (and --dry-run says so): nothing changes.
    dry = reset(bootstrap, group, "--topic", topic, "--to-earliest")
    assert plan(dry) == {0: 0, 1: 0, 2: 0}
    # stderr is not a terminal here: no progress display, only the one note.
    assert dry.stderr.strip() == "(dry run: nothing was changed; add --execute to commit)"
    assert plan(reset(bootstrap, group, "--topic", topic, "--to-latest", "--dry-run")) == {
        0: 10,
        1: 20,
        2: 30,
    }
    assert committed(group_admin, group, topic) == start

    def execute(*args: str) -> dict[int, int]:
        planned = plan(reset(bootstrap, group, *args, "--execute"))
        assert committed(group_admin, group, topic) == planned | {
            p: o for p, o in committed(group_admin, group, topic).items() if p not in planned
        }
        return planned

    assert execute("--topic", topic, "--to-earliest") == {0: 0, 1: 0, 2: 0}
    assert execute("--all-topics", "--to-latest") == {0: 10, 1: 20, 2: 30}
    # Out-of-range targets are clamped to [log start, log end], as Kafka does.
    assert execute("--topic", topic, "--to-offset", "25") == {0: 10, 1: 20, 2: 25}
    assert execute("--topic", topic, "--shift-by", "-12") == {0: 0, 1: 8, 2: 13}
    assert execute("--topic", topic, "--shift-by", "5") == {0: 5, 1: 13, 2: 18}
    # Only the named partitions.
    assert execute("--topic", f"{topic}:0,2", "--to-offset", "1") == {0: 1, 2: 1}
    assert committed(group_admin, group, topic) == {0: 1, 1: 13, 2: 1}
    # --to-datetime: the first record at or after it (record i is at T0 + i s); after the
    # last record: the log end.
    utc = datetime.datetime.fromtimestamp((T0 + 5500) / 1000, tz=datetime.UTC)
    assert execute("--topic", topic, "--to-datetime", utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")) == {
        0: 6,
        1: 6,
        2: 6,
    }
    # No zone: local time, as kafka-consumer-groups reads it.
    local = datetime.datetime.fromtimestamp((T0 + 15000) / 1000).strftime("%Y-%m-%dT%H:%M:%S.000")
    assert execute("--topic", topic, "--to-datetime", local) == {0: 10, 1: 15, 2: 15}
    assert execute("--topic", topic, "--to-datetime", "2001-01-01T00:00:00Z") == {
        0: 0,
        1: 0,
        2: 0,
    }

    # A partition the group has no offset for cannot be shifted.
    other = unique("cli-reset-fresh")
    group_admin.commit_offsets(other, {(topic, 0): 3})
    reset(bootstrap, other, "--topic", topic, "--shift-by", "1").check_error(
        "Cannot shift offset", f"{topic}-1"
    )
    # --all-topics: the partitions the group has offsets for.
    assert plan(reset(bootstrap, other, "--all-topics", "--shift-by", "1", "--execute")) == {0: 4}
    # A group that does not exist yet can be given offsets (it is Dead, i.e. inactive).
    fresh = unique("cli-reset-new")
    assert plan(
        reset(bootstrap, fresh, "--topic", f"{topic}:2", "--to-offset", "7", "--execute")
    ) == {2: 7}
    assert committed(group_admin, fresh, topic) == {2: 7}


def test_reset_offsets_refuses_an_active_group(bootstrap: str, group_admin: SyncGroupAdmin) -> None:
    topic = make_topic(bootstrap)
    group = unique("cli-reset-active")
    member = ActiveMember(bootstrap, group, topic, group_admin)
    try:
        member.consumer.commit(
            offsets=[TopicPartition(topic, p, 3) for p in range(3)], asynchronous=False
        )
        for mode in ("--dry-run", "--execute"):
            reset(bootstrap, group, "--topic", topic, "--to-earliest", mode).check_error(
                "can only be reset if the group", "inactive", "Stable"
            )
        assert committed(group_admin, group, topic) == {0: 3, 1: 3, 2: 3}
    finally:
        member.close()
    # Once the member has left, the same reset goes through.
    assert plan(reset(bootstrap, group, "--topic", topic, "--to-earliest", "--execute")) == {
        0: 0,
        1: 0,
        2: 0,
    }


def test_usage_errors_are_one_line(bootstrap: str) -> None:
    topic = make_topic(bootstrap)
    group = unique("cli-errors")
    reset(bootstrap, group, "--topic", topic).check_error("exactly one of")
    reset(bootstrap, group, "--topic", topic, "--to-earliest", "--to-latest").check_error(
        "exactly one of", "--to-earliest, --to-latest"
    )
    reset(bootstrap, group, "--to-earliest").check_error("--all-topics")
    reset(bootstrap, group, "--topic", topic, "--all-topics", "--to-earliest").check_error(
        "--all-topics"
    )
    reset(
        bootstrap, group, "--topic", topic, "--to-earliest", "--dry-run", "--execute"
    ).check_error("--dry-run", "--execute")
    reset(bootstrap, group, "--topic", topic, "--to-datetime", "yesterday").check_error(
        "--to-datetime", "yesterday"
    )
    reset(bootstrap, group, "--topic", "no-such-topic", "--to-earliest").check_error(
        "no-such-topic", "does not exist"
    )
    reset(bootstrap, group, "--topic", f"{topic}:7", "--to-earliest").check_error("no partition 7")
    reset(bootstrap, group, "--topic", f"{topic}:x", "--to-earliest").check_error(
        "not a partition number"
    )
    groups(bootstrap, "describe").check_error("--group")
    groups(bootstrap, "describe", "--group", "a", "--all-groups").check_error("--all-groups")
    groups(bootstrap, "describe", "--group", "a", "--members", "--state").check_error("--members")
    # Click's own usage errors (bad option values) are one line too.
    result = reset(bootstrap, group, "--topic", topic, "--to-offset", "-1")
    assert result.code == 2 and "Traceback" not in result.stderr
    # No broker there.
    odradek("groups", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}").check_error(
        "no broker reachable"
    )


def test_describe_offsets_of_a_deleted_topic(bootstrap: str, group_admin: SyncGroupAdmin) -> None:
    kept, doomed = make_topic(bootstrap), make_topic(bootstrap)
    group = unique("cli-deleted-topic")
    group_admin.commit_offsets(group, {(kept, 0): 3, (doomed, 0): 2})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([doomed])[doomed].result(timeout=WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while doomed in admin.list_topics(timeout=WAIT_S).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    described = {
        r["TOPIC"]: r for r in rows(groups(bootstrap, "describe", "--group", group).check())
    }
    assert described[kept]["LOG-END-OFFSET"] == "10" and described[kept]["LAG"] == "7"
    # Kafka's coordinator drops offsets of deleted topics; if they are still kept, the row
    # has no log end and no lag instead of failing the whole command.
    if doomed in described:
        assert described[doomed]["CURRENT-OFFSET"] == "2"
        assert described[doomed]["LOG-END-OFFSET"] == "-" and described[doomed]["LAG"] == "-"


def test_reset_offsets_progress_on_a_terminal(bootstrap: str, group_admin: SyncGroupAdmin) -> None:
    """stderr on a terminal: a live bar per group that advances by steps of 100 partitions,
    then the commit; stdout (a pipe) still gets exactly the plain table."""
    topic = unique("cli-reset-many")
    count = 150
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, count, 1)])[topic].result(timeout=WAIT_S)
    group = unique("cli-reset-progress")
    group_admin.commit_offsets(group, {(topic, p): 0 for p in range(count)})
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "ODRADEK_BOOTSTRAP_SERVER"}
    env["COLUMNS"] = "200"  # a wide terminal: rich would shorten the bar's text to fit 80
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", "groups", "reset-offsets", "--bootstrap-server",
         bootstrap, "--group", group, "--all-topics", "--to-offset", "0", "--execute"],
        stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.stdout is not None
    stdout = proc.stdout.read().decode()
    assert proc.wait(timeout=60) == 0
    terminal = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))
    frames = [line.strip() for line in re.split(r"[\r\n]+", terminal) if line.strip()]
    assert any(
        line.startswith(group) and "100/150 partitions" in line and "looking up offsets" in line
        for line in frames
    ), frames
    assert any(group in line and "150/150" in line and "committing" in line for line in frames)
    table_lines = stdout.splitlines()
    assert re.split(r" {2,}", table_lines[0]) == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert len(table_lines) == 1 + count and "\x1b" not in stdout
