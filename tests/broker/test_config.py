from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig, ConfigError, parse_overrides, read_properties


def test_defaults_are_kafkas() -> None:
    config = BrokerConfig()
    assert config.listener == ("127.0.0.1", 9092)
    assert config.get("num.partitions") == 1
    assert config.get("auto.create.topics.enable") is True
    assert config.get("message.max.bytes") == 1048588
    assert config.get("offsets.topic.num.partitions") == 50
    assert config.data_dir == Path("odradek-data")
    defaults = config.topic_defaults()
    assert defaults["retention.ms"] == str(168 * 3600_000)
    assert defaults["segment.bytes"] == "1073741824"
    assert defaults["cleanup.policy"] == "delete"


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n! another\nbroker.id=3\nlisteners=PLAINTEXT://127.0.0.1:19092\n"
        "log.retention.hours : 24\nlog.dirs=/tmp/a\\\n-b\n"
    )
    props = read_properties(path)
    assert props["log.retention.hours"] == "24"
    assert props["log.dirs"] == "/tmp/a-b"
    config = BrokerConfig.load(path, ["log.retention.hours=48", "num.partitions=4"])
    assert config.broker_id == 3
    assert config.listener == ("127.0.0.1", 19092)
    assert config.topic_defaults()["retention.ms"] == str(48 * 3600_000)
    assert config.get("num.partitions") == 4
    assert config.data_dir == Path("/tmp/a-b")


def test_retention_precedence() -> None:
    config = BrokerConfig({"log.retention.minutes": "5", "log.retention.hours": "1"})
    assert config.topic_defaults()["retention.ms"] == "300000"
    config = BrokerConfig({"log.retention.minutes": "5", "log.retention.ms": "7"})
    assert config.topic_defaults()["retention.ms"] == "7"


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"no.such.key": "1"}, "unknown config key 'no.such.key'"),
        ({"num.partitions": "zero"}, "num.partitions: expected int"),
        ({"num.partitions": "0"}, "must be at least 1"),
        ({"auto.create.topics.enable": "yes"}, "expected bool"),
        ({"log.cleanup.policy": "shred"}, "delete and/or compact"),
        ({"listeners": "SSL://h:1"}, "an SSL listener needs ssl.keystore.location"),
        ({"listeners": "nonsense"}, "expected PLAINTEXT://host:port"),
        ({"log.message.timestamp.type": "Wallclock"}, "must be one of"),
        ({"num.partitions": str(2**31)}, "expected int"),
        ({"zookeeper.connect": "127.0.0.1:99999"}, "invalid port"),
        ({"zookeeper.connect": "127.0.0.1:2181/a/"}, "invalid chroot"),
        ({"broker.id": "-1"}, "at least 0 without zookeeper.connect"),
        ({"broker.id": "-2", "zookeeper.connect": "127.0.0.1:2181"}, "at least -1"),
        (
            {
                "broker.id": "-1",
                "zookeeper.connect": "127.0.0.1:2181",
                "broker.id.generation.enable": "false",
            },
            "needs broker.id.generation.enable",
        ),
    ],
)
def test_bad_config_is_one_clear_line(props: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_zookeeper_connect_turns_cluster_mode_on() -> None:
    config = BrokerConfig({"zookeeper.connect": "127.0.0.1:2181/odradek", "broker.id": "-1"})
    assert config.zookeeper_connect == "127.0.0.1:2181/odradek"
    assert config.broker_id == -1
    assert config.get("zookeeper.connection.timeout.ms") is None  # = the session timeout
    assert config.get("broker.id.generation.enable") is True
    assert BrokerConfig().zookeeper_connect == ""  # the embedded default stays


def test_bad_override_syntax() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["justakey"])


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        BrokerConfig.load(tmp_path / "missing.properties")


def test_malformed_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("log.dirs=\\u12\n")  # Java's one malformed input: a bad \u escape
    with pytest.raises(ConfigError, match=r"bad\.properties:1"):
        read_properties(path)
