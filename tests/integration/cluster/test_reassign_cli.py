"""``odradek reassign-partitions`` (kafka-reassign-partitions.sh) against broker
subprocesses on a real ZooKeeper: generate, execute with a throttle, verify (which
removes the throttles), list, cancel, and one-line errors that change nothing. The
throttle test measures the copy rate of a new replica against the limit."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from odradek.cluster.zk.paths import CONFIG_TYPE_BROKER, CONFIG_TYPE_TOPIC
from tests.cli.helpers import odradek
from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(240)]
MiB = 1024 * 1024


def reassign(cluster: BrokerCluster, *args: str) -> Any:
    return odradek("reassign-partitions", "--bootstrap-server", cluster.bootstrap(), *args)


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def plan(moves: dict[tuple[str, int], list[int]]) -> dict[str, Any]:
    return {
        "version": 1,
        "partitions": [
            {"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(moves.items())
        ],
    }


def fill(bootstrap: str, topic: str, nbytes: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    value = b"x" * 10_000
    for i in range(nbytes // len(value)):
        producer.produce(topic, value=value, partition=partition)
        if i % 100 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def preset_throttles(
    cluster: BrokerCluster, topic: str, source: int, target: int, limit: int
) -> None:
    """What --execute --throttle writes, written first and waited for on the brokers."""
    from odradek.client.admin import Admin, ConfigResource

    async def go() -> None:
        admin = Admin(cluster.bootstrap())
        await admin.start()
        try:
            await admin.incremental_alter_configs(
                {
                    ConfigResource("topic", topic): [
                        ("leader.replication.throttled.replicas", "set", f"0:{source}"),
                        ("follower.replication.throttled.replicas", "set", f"0:{target}"),
                    ]
                }
            )
            for broker in (source, target):
                await admin.incremental_alter_configs(
                    {
                        ConfigResource("broker", str(broker)): [
                            ("leader.replication.throttled.rate", "set", str(limit)),
                            ("follower.replication.throttled.rate", "set", str(limit)),
                        ]
                    }
                )
        finally:
            await admin.close()

    asyncio.run(go())
    for broker in (source, target):
        wait_for(
            lambda b=broker: f"Processing override for entityPath: brokers/{b}"
            in cluster.brokers[b].log_text(),
            30,
            f"broker {broker} to apply its throttle",
        )
    wait_for(
        lambda: f"entityPath: topics/{topic}" in cluster.brokers[source].log_text(),
        30,
        "the leader to apply the topic's throttled replicas",
    )


def create_topic(cluster: BrokerCluster, topic: str, assignment: dict[int, list[int]]) -> None:
    from odradek.client.admin import Admin, NewTopic

    async def go() -> None:
        admin = Admin(cluster.bootstrap())
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, replica_assignment=assignment)])
        finally:
            await admin.close()

    asyncio.run(go())
    wait_for(lambda: len(cluster.leaders(topic, 1)) == len(assignment), 30, f"{topic} leaders")


def replicas(cluster: BrokerCluster, topic: str, partition: int) -> tuple[int, ...]:
    return tuple(cluster.zk.get_topic_assignment(topic)[0].partitions[partition])


def test_execute_with_a_throttle_copies_at_the_limit_and_verify_removes_it(
    cluster_factory: Any, tmp_path: Path
) -> None:
    limit = MiB  # bytes/s
    cluster = cluster_factory(
        3,
        **{
            # Two 1 s samples: the rate may start with a burst of about one second's worth.
            "replication.quota.window.num": "2",
            "replica.fetch.max.bytes": str(256 * 1024),
        },
    )
    cluster.create_topic("slow", 1, replication_factor=1)
    (source,) = replicas(cluster, "slow", 0)
    target = next(b for b in (1, 2, 3) if b != source)
    size = 8 * MiB
    fill(cluster.bootstrap(), "slow", size)
    moves = write(tmp_path, "moves.json", plan({("slow", 0): [source, target]}))

    # The throttle applies once each broker has processed the config notification; set it
    # first (as --execute will again) so the copy is throttled from its first byte.
    preset_throttles(cluster, "slow", source, target, limit)
    throttle = ["--execute", "--reassignment-json-file", moves, "--throttle", str(limit)]
    started = time.monotonic()
    result = reassign(cluster, *throttle)
    assert result.code == 0, result.stderr
    assert result.lines[0] == "Current partition replica assignment"
    assert json.loads(result.lines[2]) == {
        "version": 1,
        "partitions": [
            {"topic": "slow", "partition": 0, "replicas": [source], "log_dirs": ["any"]}
        ],
    }
    assert "Save this to use as the --reassignment-json-file option during rollback" in result.out
    assert result.lines[-3].startswith("Warning: You must run --verify periodically")
    assert result.lines[-2] == f"The inter-broker throttle limit was set to {limit} B/s"
    assert result.lines[-1] == "Successfully started partition reassignment for slow-0"
    topic_config = cluster.zk.get_entity_config(CONFIG_TYPE_TOPIC, "slow")
    assert topic_config["leader.replication.throttled.replicas"] == f"0:{source}"
    assert topic_config["follower.replication.throttled.replicas"] == f"0:{target}"
    for broker in (source, target):
        rates = cluster.zk.get_entity_config(CONFIG_TYPE_BROKER, str(broker))
        assert rates["leader.replication.throttled.rate"] == str(limit)
        assert rates["follower.replication.throttled.rate"] == str(limit)

    def in_isr() -> bool:
        state = cluster.zk.get_partition_state("slow", 0)
        return state is not None and target in state[0].isr

    # Mid-copy (8 MiB at 1 MiB/s), --verify says how far the new replica is.
    verify = ["--verify", "--reassignment-json-file", moves]
    midway = reassign(cluster, *verify)
    assert midway.code == 0, midway.stderr
    if not in_isr():  # a very slow CLI start could miss the copy; then nothing to see
        assert midway.lines[:2] == [
            "Status of partition reassignment:",
            "Reassignment of partition slow-0 is still in progress.",
        ]
        copy = re.fullmatch(
            rf"  Replica {target}: (\d+) of (\d+) bytes copied from leader {source} \((\d+)%\)",
            midway.lines[2],
        )
        assert copy is not None, midway.lines
        done, total, percent = map(int, copy.groups())
        assert total >= size and 0 <= done < total
        assert percent == round(100 * done / total)
        assert len(midway.lines) == 3  # throttles are kept while it moves

    wait_for(in_isr, 120, "the new replica to join the ISR")
    elapsed = time.monotonic() - started
    rate = size / elapsed
    # A loaded machine only makes the copy slower; the bound is on the fast side. Allowed:
    # the limit, plus the initial window's burst, plus one fetch beyond it.
    assert rate < 1.6 * limit, f"copied {size} bytes in {elapsed:.1f}s: {rate / MiB:.2f} MiB/s"

    wait_for(lambda: "is completed" in reassign(cluster, *verify).out, 60, "verify: completed")
    wait_for(
        lambda: "leader.replication.throttled.replicas"
        not in cluster.zk.get_entity_config(CONFIG_TYPE_TOPIC, "slow"),
        30,
        "topic throttles removed",
    )
    final = reassign(cluster, *verify)
    assert final.lines == [
        "Status of partition reassignment:",
        "Reassignment of partition slow-0 is completed.",
        "Clearing broker-level throttles on brokers 1,2,3",
        "Clearing topic-level throttles on topic slow",
    ]
    for broker in (1, 2, 3):
        rates = cluster.zk.get_entity_config(CONFIG_TYPE_BROKER, str(broker))
        assert "leader.replication.throttled.rate" not in rates
    assert replicas(cluster, "slow", 0) == (source, target)


def test_generate_list_cancel_and_errors(cluster_factory: Any, tmp_path: Path) -> None:
    # A paused broker keeps its registration for the session timeout: long enough for the
    # tool to run several times while the move waits for it.
    cluster = cluster_factory(3, **{"zookeeper.session.timeout.ms": "60000"})
    ctl = cluster.controller_id()
    x, y = [b for b in (1, 2, 3) if b != ctl]
    # Partition 0 lives on the controller and x: y (not the controller) is the spare.
    create_topic(cluster, "gen", {0: [ctl, x], 1: [x, y], 2: [y, ctl]})
    topics = write(tmp_path, "topics.json", {"version": 1, "topics": [{"topic": "gen"}]})
    generated = reassign(
        cluster, "--generate", "--topics-to-move-json-file", topics, "--broker-list", "2,3"
    )
    assert generated.code == 0, generated.stderr
    lines = generated.lines
    assert lines[0] == "Current partition replica assignment"
    current = json.loads(lines[1])
    assert lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])
    assert [p["partition"] for p in current["partitions"]] == [0, 1, 2]
    for entry in proposed["partitions"]:
        assert sorted(entry["replicas"]) == [2, 3] and entry["log_dirs"] == ["any", "any"]

    before = cluster.zk.get_topic_assignment("gen")
    bad_cases = [
        (["--execute", "--reassignment-json-file", write(tmp_path, "bad.json", "{not json")],
         "is not valid JSON"),
        (["--execute", "--reassignment-json-file",
          write(tmp_path, "b1.json", plan({("gen", 0): [1, 9]}))], "Unknown broker id 9"),
        (["--execute", "--reassignment-json-file",
          write(tmp_path, "b2.json", plan({("ghost", 0): [1]}))],
         "Unable to find partition: ghost-0"),
        (["--execute", "--reassignment-json-file",
          write(tmp_path, "b3.json", plan({("gen", 0): [1, 1]}))],
         "Partition replica lists may not contain duplicate entries: gen-0 contains multiple "
         "entries for 1"),
        (["--execute", "--reassignment-json-file",
          write(tmp_path, "b4.json", {"version": 1, "partitions": []})],
         "Partition reassignment list cannot be empty"),
        (["--generate", "--topics-to-move-json-file", topics, "--broker-list", "1,7"],
         "Unknown broker id 7"),
        (["--generate", "--topics-to-move-json-file",
          write(tmp_path, "t2.json", {"topics": [{"topic": "ghost"}]}), "--broker-list", "1,2"],
         "Topic ghost not found"),
        (["--list", "--verify"], "Command must include exactly one action"),
    ]
    for args, message in bad_cases:
        result = reassign(cluster, *args)
        assert result.code == 1, (args, result.out)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert cluster.zk.get_topic_assignment("gen") == before
    assert reassign(cluster, "--list").lines == ["No partition reassignments found."]

    # A move that waits (its new replica's broker is paused), listed, then cancelled.
    current_0 = replicas(cluster, "gen", 0)
    spare = y
    target = [spare, current_0[1]]
    moves = write(tmp_path, "wait.json", plan({("gen", 0): target}))
    cluster.brokers[spare].proc.send_signal(signal.SIGSTOP)
    try:
        started = reassign(cluster, "--execute", "--reassignment-json-file", moves)
        assert started.code == 0, started.stderr
        assert started.lines[-1] == "Successfully started partition reassignment for gen-0"
        again = reassign(cluster, "--execute", "--reassignment-json-file", moves)
        assert again.code == 1 and "Cannot execute because there is an existing" in again.stderr
        full = ",".join(map(str, [*target, current_0[0]]))
        assert reassign(cluster, "--list").lines == [
            "Current partition reassignments:",
            f"gen-0: replicas: {full}. adding: {spare}. removing: {current_0[0]}.",
        ]
        verifying = reassign(cluster, "--verify", "--reassignment-json-file", moves)
        assert verifying.lines == [
            "Status of partition reassignment:",
            "Reassignment of partition gen-0 is still in progress.",
            f"  Replica {spare}: broker {spare} did not answer",
        ]
        # The paused broker cannot take a throttle change: keep them for now.
        cancel = ["--cancel", "--reassignment-json-file", moves]
        cancelled = reassign(cluster, *cancel, "--preserve-throttles")
        assert cancelled.code == 0, cancelled.stderr
        assert cancelled.lines == ["Successfully cancelled partition reassignment for: gen-0"]
    finally:
        cluster.brokers[spare].proc.send_signal(signal.SIGCONT)
    # Kafka's cancel restores the original replica set in RS order (target first), so the
    # replica the target kept comes first: (x, ctl) rather than (ctl, x).
    assert replicas(cluster, "gen", 0) == (current_0[1], current_0[0])
    assert reassign(cluster, "--list").lines == ["No partition reassignments found."]
    nothing = reassign(cluster, *cancel)
    assert nothing.lines == [
        "None of the specified partition reassignments are active.",
        "Clearing broker-level throttles on brokers 1,2,3",
        "Clearing topic-level throttles on topic gen",
    ]
