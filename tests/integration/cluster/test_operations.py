"""The operator surface of a cluster: ``topics describe`` (and its partition filters),
``cluster describe`` and ``elect-leaders`` against three broker subprocesses on a real
ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.cluster.zk.client import ZkClient
from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess
from tests.helpers.cluster import wait_for, zk_broker
from tests.helpers.raw import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(240)]
ELECT_LEADERS = 43


@pytest.fixture
def zk(zk_connect: str) -> Iterator[ZkClient]:
    client = ZkClient.connect(zk_connect, session_timeout_ms=6000)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def brokers(tmp_path: Path, zk_connect: str, zk: ZkClient) -> Iterator[dict[int, BrokerProcess]]:
    started: dict[int, BrokerProcess] = {}
    try:
        for broker_id in (1, 2, 3):
            started[broker_id] = zk_broker(
                tmp_path, zk_connect, broker_id, {"auto.leader.rebalance.enable": "false"}
            ).start()
        yield started
    finally:
        # The controller last: a controller broker stopping while others still run can
        # hang in its shutdown (seen before this module existed; reported, not fixed here).
        found = zk.get_controller() if zk.connected else None
        controller = found.broker_id if found else None
        for broker_id in sorted(started, key=lambda i: i == controller):
            started[broker_id].stop()


def bootstrap(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values() if b.is_running())


def describe(brokers: dict[int, BrokerProcess], *args: str) -> list[str]:
    return odradek("topics", "describe", *args, "-b", bootstrap(brokers)).check().lines


def fields(line: str) -> dict[str, str]:
    return dict(item.split(": ", 1) for item in line.strip("\t").split("\t"))


def test_describe_cluster_topics_and_elect_preferred_leaders(
    brokers: dict[int, BrokerProcess], zk: ZkClient, zk_connect: str
) -> None:
    boot = bootstrap(brokers)
    odradek(
        "topics", "create", "ops", "-p", "3", "-r", "3", "-c", "retention.ms=600000", "-b", boot
    ).check()

    # cluster describe: the cluster id, controller and epoch ZooKeeper holds, every broker.
    controller = zk.get_controller()
    epoch = zk.get_controller_epoch()
    assert controller is not None and epoch is not None
    lines = odradek("cluster", "describe", "-b", boot, "--zookeeper", zk_connect).check().lines
    assert lines[:3] == [
        f"Cluster ID: {zk.get_cluster_id()}",
        f"Controller: {controller.broker_id}",
        f"Controller epoch: {epoch.epoch}",
    ]
    assert lines[3:] == [
        f"Broker: {i}\tEndpoint: 127.0.0.1:{brokers[i].port}\tRack: none" for i in (1, 2, 3)
    ]

    # topics describe: kafka-topics' layout, leaders are the preferred replicas.
    lines = describe(brokers, "ops")
    header = fields(lines[0])
    assert lines[0].startswith("Topic: ops\t")
    assert (header["PartitionCount"], header["ReplicationFactor"]) == ("3", "3")
    assert header["Configs"] == "retention.ms=600000"
    assignment, _version = zk.get_topic_assignment("ops")  # type: ignore[misc]
    for p, line in enumerate(lines[1:]):
        replicas = assignment.partitions[p]
        assert fields(line) == {
            "Topic": "ops",
            "Partition": str(p),
            "Leader": str(replicas[0]),
            "Replicas": ",".join(map(str, replicas)),
            "Isr": ",".join(map(str, replicas)),
        }
    for flag in ("--under-replicated-partitions", "--unavailable-partitions"):
        assert describe(brokers, "ops", flag) == []

    # The preferred leader of ops-0 stops: leadership moves, it leaves every ISR and,
    # once its registration is gone, is listed offline.
    gone = assignment.partitions[0][0]
    brokers[gone].stop()
    under = wait_for(
        lambda: (
            (found := describe(brokers, "ops", "--under-replicated-partitions"))
            and len(found) == 3
            and all("\tOffline: " in line for line in found)
            and found
        ),
        30,
        "three under-replicated partitions with an offline replica",
    )
    for line in under:
        row = fields(line)
        assert str(gone) not in row["Isr"].split(",")
        assert row["Offline"] == str(gone)
        assert row["Leader"] != str(gone)
    assert describe(brokers, "ops", "--unavailable-partitions") == []
    assert describe(brokers, "ops", "--under-min-isr-partitions") == []

    # Back: it catches up by fetching from the leader and rejoins the ISR (replication),
    # after which the preferred replica can be elected on request.
    brokers[gone].start()
    wait_for(
        lambda: str(gone) in fields(describe(brokers, "ops")[1])["Isr"].split(","),
        30,
        "the returning broker back in the ISR of ops-0",
    )
    result = odradek(
        "elect-leaders", "--election-type", "preferred", "--all-topic-partitions",
        "-b", bootstrap(brokers),
    )  # fmt: skip
    assert result.check().lines[0] == (
        "Successfully completed leader election (PREFERRED) for partitions ops-0"
    )
    assert result.lines[1].startswith("Valid replica already elected for partitions ")
    assert {"ops-1", "ops-2"} <= set(result.lines[1].split("partitions ", 1)[1].split(", "))
    # The answer waited until the metadata showed the new leader.
    assert fields(describe(brokers, "ops")[1])["Leader"] == str(gone)

    # Unclean: every partition has a live leader.
    result = odradek(
        "elect-leaders", "--election-type", "unclean", "--path-to-json-file",
        str(write_json(zk_connect, brokers)), "-b", bootstrap(brokers),
    )  # fmt: skip
    assert result.check().lines == ["Valid replica already elected for partitions ops-1"]

    # Any broker but the controller answers NOT_CONTROLLER (the admin client goes to it).
    controller_id = zk.get_controller().broker_id  # type: ignore[union-attr]
    other = next(b for i, b in brokers.items() if i != controller_id)
    response: Any = RawClient(other.port).call(
        ELECT_LEADERS,
        2,
        {
            "election_type": 0,
            "topic_partitions": [{"topic": "ops", "partitions": [0]}],
            "timeout": 5000,
        },
    )
    assert response.error_code == ErrorCode.none
    [topic] = response.replica_election_results
    assert topic.partition_result[0].error_code == ErrorCode.not_controller


def write_json(zk_connect: str, brokers: dict[int, BrokerProcess]) -> Path:
    path = next(iter(brokers.values())).data_dir.parent / "election.json"
    path.write_text('{"partitions": [{"topic": "ops", "partition": 1}]}')
    return path


def test_elect_leaders_argument_errors(tmp_path: Path) -> None:
    def elect(*args: str) -> Any:
        return odradek("elect-leaders", "--election-type", "preferred", *args, "-b", "127.0.0.1:1")

    elect().check_error("One and only one of the following options is required")
    elect("--topic", "t").check_error("Missing required option(s): --partition")
    elect("--all-topic-partitions", "--partition", "0").check_error(
        "Option --partition is only allowed if --topic is used"
    )
    elect("--all-topic-partitions", "--topic", "t", "--partition", "0").check_error(
        "One and only one of the following options is required"
    )
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}'
    )
    elect("--path-to-json-file", str(bad)).check_error("duplicate partitions: t-0")
    bad.write_text("{}")
    elect("--path-to-json-file", str(bad)).check_error('missing "partitions" field')


DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3


def alter(port: int, resource_type: int, name: str, *changes: tuple[str, int, str | None]) -> Any:
    response: Any = RawClient(port).call(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": resource_type,
                    "resource_name": name,
                    "configs": [
                        {"name": k, "config_operation": op, "value": v} for k, op, v in changes
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    return response.responses[0]


def described(port: int, resource_type: int, name: str, *keys: str) -> Any:
    response: Any = RawClient(port).call(
        DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {
                    "resource_type": resource_type,
                    "resource_name": name,
                    "configuration_keys": list(keys) or None,
                }
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    return response.results[0]


def config(result: Any, key: str) -> tuple[str | None, int]:
    [entry] = [c for c in result.configs if c.name == key]
    return entry.value, int(entry.config_source)


def test_configs_go_through_zookeeper_to_every_broker(
    brokers: dict[int, BrokerProcess], zk: ZkClient
) -> None:
    first, second = brokers[1], brokers[2]
    odradek("topics", "create", "cfg", "-p", "1", "-r", "3", "-b", bootstrap(brokers)).check()

    # Altered on broker 1: written to ZooKeeper, announced, applied by every broker.
    assert alter(first.port, TOPIC, "cfg", ("retention.ms", 0, "123456")).error_code == 0
    assert zk.get_entity_config("topics", "cfg") == {"retention.ms": "123456"}
    result = described(second.port, TOPIC, "cfg", "retention.ms")
    assert result.error_code == 0
    assert config(result, "retention.ms") == ("123456", DYNAMIC_TOPIC_CONFIG)
    for broker in brokers.values():
        wait_for(
            lambda b=broker: (
                "Processing override for entityPath: topics/cfg with config: "
                "{'retention.ms': '123456'}" in b.log_text()
            ),
            30,
            f"broker {broker.port} applied the topic config",
        )
    # Back to the default (deleted override) on broker 2.
    assert alter(second.port, TOPIC, "cfg", ("retention.ms", 1, None)).error_code == 0
    assert config(described(first.port, TOPIC, "cfg", "retention.ms"), "retention.ms") == (
        "604800000",
        5,
    )

    # Bad values and unknown topics are refused before anything is written.
    bad = alter(first.port, TOPIC, "cfg", ("retention.ms", 0, "soon"))
    assert bad.error_code == ErrorCode.invalid_config
    assert zk.get_entity_config("topics", "cfg") == {}
    assert alter(first.port, TOPIC, "nope", ("retention.ms", 0, "1")).error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    assert described(first.port, TOPIC, "nope").error_code == ErrorCode.unknown_topic_or_partition

    # Dynamic broker configs: <default> for every broker, <id> for one (and it wins).
    assert alter(first.port, BROKER, "", ("log.retention.ms", 0, "7200000")).error_code == 0
    assert zk.get_entity_config("brokers", "<default>") == {"log.retention.ms": "7200000"}
    assert alter(second.port, BROKER, "2", ("log.retention.ms", 0, "3600000")).error_code == 0
    assert config(described(first.port, BROKER, "1"), "log.retention.ms") == (
        "7200000",
        DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert config(described(second.port, BROKER, "2"), "log.retention.ms") == (
        "3600000",
        DYNAMIC_BROKER_CONFIG,
    )
    # A topic without an override takes the broker's dynamic default.
    assert config(described(second.port, TOPIC, "cfg"), "retention.ms")[0] == "3600000"
    assert config(described(first.port, TOPIC, "cfg"), "retention.ms")[0] == "7200000"
    wait_for(
        lambda: "Processing override for entityPath: brokers/<default>" in second.log_text(),
        30,
        "broker 2 applied the default broker config",
    )
    # Only log.* topic defaults are dynamic; another broker's id is not this broker.
    assert alter(first.port, BROKER, "", ("num.io.threads", 0, "4")).error_code == (
        ErrorCode.invalid_request
    )
    assert alter(first.port, BROKER, "2", ("log.retention.ms", 0, "1")).error_code == (
        ErrorCode.invalid_request
    )
