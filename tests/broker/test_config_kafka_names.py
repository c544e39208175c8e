"""Kafka's broker keys are accepted (and reported unused); misspelt keys are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.config import KEYS, BrokerConfig, ConfigError
from odradek.broker.kafka_config_names import (
    ACCEPTED_WITHOUT_EFFECT,
    KAFKA_BROKER_CONFIG_NAMES,
    PLUGIN_KEYS,
)


def test_every_documented_kafka_key_is_accepted() -> None:
    # A sample from each part of Kafka's broker config table, including keys with no
    # meaning for a lone broker.
    for name in ["process.roles", "controller.quorum.voters", "ssl.keystore.location",
                 "sasl.enabled.mechanisms", "remote.log.storage.system.enable",
                 "num.replica.alter.log.dirs.threads", "metric.reporters",
                 "controller.quota.window.num",
                 "log.cleaner.dedupe.buffer.size", "socket.send.buffer.bytes"]:  # fmt: skip
        assert name in KAFKA_BROKER_CONFIG_NAMES
        config = BrokerConfig({name: "x"})
        assert config.unused == {name: "x"}
    assert len(KAFKA_BROKER_CONFIG_NAMES) > 300


def test_keys_odradek_acts_on_are_kafkas() -> None:
    # cluster.id is Kafka's meta.properties field, not a server.properties key. The
    # observability keys are odradek's own: Kafka has JMX and log4j files instead. The
    # authorizer's keys are read outside Kafka's table (PLUGIN_KEYS).
    own = {"metrics.port", "metrics.host", "log.format", "log.slow.request.threshold.ms"}
    own.add("append.thread.min.bytes")  # the produce path's append thread (off by default)
    own.add("produce.lane.enable")  # the direct path of one-partition Produce requests
    assert set(KEYS) - KAFKA_BROKER_CONFIG_NAMES - PLUGIN_KEYS == {"cluster.id"} | own


def test_keys_odradek_acts_on_are_not_reported_unused() -> None:
    config = BrokerConfig({"num.partitions": "3", "log.retention.hours": "1"})
    assert config.unused == {}


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("log.retention.hour", "log.retention.hours"),
        ("num.partition", "num.partitions"),
        ("auto.create.topic.enable", "auto.create.topics.enable"),
        ("log.dir.s", "log.dirs"),
        ("controller.quorum.voter", "controller.quorum.voters"),
    ],
)
def test_a_misspelt_key_is_refused_with_a_suggestion(name: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig({name: "1"})
    assert str(info.value) == f"unknown config key {name!r}; did you mean {suggestion!r}?"


def test_a_key_like_nothing_gets_no_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig({"qqqq.zzzz": "1"})
    assert str(info.value) == "unknown config key 'qqqq.zzzz'"


def test_zookeeper_connect_in_a_file_turns_cluster_mode_on(tmp_path: Path) -> None:
    # As in Kafka: the stock ZooKeeper-mode file joins the ZooKeeper it names.
    path = tmp_path / "server.properties"
    path.write_text("zookeeper.connect=localhost:2181\n")
    config = BrokerConfig.load(path)
    assert config.unused == {}
    assert config.zookeeper_connect == "localhost:2181"
    with pytest.raises(ConfigError, match=r"zookeeper\.connect"):
        BrokerConfig.load(path, ["zookeeper.connect=localhost:notaport"])


def test_keys_without_effect_are_reported_unused_too() -> None:
    config = BrokerConfig({"fetch.max.bytes": "1048576", "num.io.threads": "4"})
    assert config.unused == {"fetch.max.bytes": "1048576"}
    assert config.get("fetch.max.bytes") == 1048576  # still parsed and validated
    with pytest.raises(ConfigError, match="expected int"):
        BrokerConfig({"fetch.max.bytes": "many"})


def test_keys_without_effect_really_are_read_nowhere() -> None:
    # If the broker starts acting on one of these, it must leave ACCEPTED_WITHOUT_EFFECT.
    src = Path(__file__).resolve().parents[2] / "src" / "odradek"
    skip = {src / "broker" / "config.py", src / "broker" / "kafka_config_names.py"}
    # Only the broker's own code: client-side tools read client keys of the same name
    # (a consumer's fetch.max.bytes).
    broker_code = ("broker", "storage", "cluster", "protocol", "records")
    sources = [
        p.read_text()
        for package in broker_code
        for p in (src / package).rglob("*.py")
        if p not in skip
    ]
    for name in ACCEPTED_WITHOUT_EFFECT:
        assert name in KEYS
        assert not any(f'"{name}"' in text for text in sources), name


@pytest.mark.parametrize(
    "name",
    [
        "listener.name.internal.ssl.keystore.location",
        "listener.name.client.scram-sha-256.sasl.jaas.config",
        "listener.name.controller.sasl.enabled.mechanisms",
        "config.providers",
        "config.providers.file.class",
    ],
)
def test_keys_kafka_reads_outside_its_table_are_accepted(name: str) -> None:
    assert BrokerConfig({name: "x"}).unused == {name: "x"}


@pytest.mark.parametrize(
    "name", ["listener.name.internal.no.such.key", "listener.name.x", "super.userz"]
)
def test_listener_scoped_nonsense_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="unknown config key"):
        BrokerConfig({name: "x"})


def test_plugin_keys_are_suggested_too() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'super\.users'"):
        BrokerConfig({"super.user": "User:admin"})
