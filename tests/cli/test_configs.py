"""``odradek configs`` (kafka-configs.sh) as a subprocess against a real broker: describe
and alter topic and broker configs, Kafka's output lines, one-line errors."""

from __future__ import annotations

import uuid

import pytest

from odradek.cli.configs import parse_add_config
from odradek.cli.errors import CliError
from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def configs(bootstrap: str, *args: str):  # type: ignore[no-untyped-def]
    return odradek("configs", "--bootstrap-server", bootstrap, *args)


def entries(lines: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Config lines ``  k=v sensitive=false synonyms={S:k=v, ...}`` -> {k: (v, [S:k=v, ...])}."""
    found = {}
    for line in lines:
        assert line.startswith("  "), line
        head, synonyms = line.strip().split(" synonyms={", 1)
        setting, sensitive = head.rsplit(" sensitive=", 1)
        assert sensitive == "false", line
        name, value = setting.split("=", 1)
        found[name] = (value, [s for s in synonyms.rstrip("}").split(", ") if s])
    return found


def new_topic(bootstrap: str) -> str:
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    odradek("topics", "create", name, "-b", bootstrap).check()
    return name


def test_add_config_splits_like_kafka_configs() -> None:
    assert parse_add_config("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    assert parse_add_config("k=v=w") == {"k": "v=w"}
    with pytest.raises(CliError, match="is not key=value"):
        parse_add_config("a=1,oops")


def test_topic_alter_and_describe(bootstrap: str) -> None:
    topic = new_topic(bootstrap)
    entity = ("--entity-type", "topics", "--entity-name", topic)
    assert configs(bootstrap, *entity, "--describe").check().lines == [
        f"Dynamic configs for topic {topic} are:"
    ]
    altered = configs(
        bootstrap, *entity, "--alter",
        "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]",
    )  # fmt: skip
    assert altered.check().lines == [f"Completed updating config for topic {topic}."]
    # The verb form is the same command.
    lines = configs(bootstrap, "describe", *entity).check().lines
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert [line.split("=", 1)[0] for line in lines[1:]] == ["  cleanup.policy", "  retention.ms"]
    found = entries(lines[1:])
    # Synonyms: the override first, Kafka's broker-level default last.
    assert found["cleanup.policy"][0] == "compact,delete"
    assert found["cleanup.policy"][1][0] == "DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete"
    assert found["cleanup.policy"][1][-1] == "DEFAULT_CONFIG:log.cleanup.policy=delete"
    assert found["retention.ms"][0] == "3600000"
    assert found["retention.ms"][1][0] == "DYNAMIC_TOPIC_CONFIG:retention.ms=3600000"
    assert found["retention.ms"][1][-1] == "DEFAULT_CONFIG:log.retention.hours=168"
    configs(bootstrap, *entity, "--alter", "--delete-config", "cleanup.policy").check()
    lines = configs(bootstrap, *entity, "--describe").check().lines
    assert list(entries(lines[1:])) == ["retention.ms"]
    # --all: every config, defaults included, sorted by name.
    every = configs(bootstrap, *entity, "--describe", "--all").check().lines
    assert every[0] == f"All configs for topic {topic} are:"
    names = [line.strip().split("=", 1)[0] for line in every[1:]]
    assert names == sorted(names) and {"cleanup.policy", "segment.bytes"} <= set(names)
    assert entries(every[1:])["cleanup.policy"] == (
        "delete",
        ["DEFAULT_CONFIG:log.cleanup.policy=delete"],
    )
    # kafka-configs' shorthand names the same entity.
    assert configs(bootstrap, "--topic", topic, "--describe").check().lines == lines
    # Without a name: every topic, each with its header.
    headers = [
        line
        for line in configs(bootstrap, "--entity-type", "topics", "--describe").check().lines
        if line.startswith("Dynamic configs")
    ]
    assert f"Dynamic configs for topic {topic} are:" in headers


def test_broker_default_alter_and_describe(bootstrap: str) -> None:
    default = ("--entity-type", "brokers", "--entity-default")
    try:
        done = configs(bootstrap, *default, "--alter", "--add-config", "log.retention.ms=7200000")
        assert done.check().lines == [
            "Completed updating default config for brokers in the cluster."
        ]
        line = (
            "  log.retention.ms=7200000 sensitive=false "
            "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}"
        )
        assert configs(bootstrap, *default, "--describe").check().lines == [
            "Default configs for brokers in the cluster are:",
            line,
        ]
        shorthand = configs(bootstrap, "--broker-defaults", "--describe").check().lines
        assert shorthand == ["Default configs for brokers in the cluster are:", line]
        # Every broker, then the default, when no broker is named.
        lines = configs(bootstrap, "--entity-type", "brokers", "--describe").check().lines
        assert lines[0] == "Dynamic configs for broker 0 are:"
        assert lines[-2:] == ["Default configs for brokers in the cluster are:", line]
        everything = configs(
            bootstrap, "--entity-type", "brokers", "--entity-name", "0", "--describe", "--all"
        ).check().lines
        assert everything[0] == "All configs for broker 0 are:"
        assert line in everything
        # A topic falls back on it, before the static and default retention settings.
        retention = entries(
            configs(bootstrap, "--entity-type", "topics", "--entity-name", new_topic(bootstrap),
                    "--describe", "--all").check().lines[1:]
        )["retention.ms"]  # fmt: skip
        assert retention[0] == "7200000"
        assert retention[1][0] == "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000"
    finally:
        configs(bootstrap, *default, "--alter", "--delete-config", "log.retention.ms").check()
    assert configs(bootstrap, *default, "--describe").check().lines == [
        "Default configs for brokers in the cluster are:"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--entity-type", "topics", "--entity-name", "t"), "exactly one action"),
        (
            ("--entity-type", "topics", "--entity-name", "t", "--describe", "--alter"),
            "exactly one action",
        ),
        (("--entity-type", "topics", "--alter", "--add-config", "a=1"), "entity name"),
        (("--entity-type", "topics", "--entity-name", "t", "--alter"), "--add-config"),
        (("--entity-type", "brokers", "--entity-name", "x", "--describe"), "valid integer"),
        (("--entity-type", "topics", "--entity-default", "--describe"), "--entity-default"),
        (("--describe",), "give the entity once"),
        (("--topic", "t", "--broker", "0", "--describe"), "give the entity once"),
        (("--topic", "t", "--entity-type", "topics", "--describe"), "give the entity once"),
        (("--broker", "0", "--entity-name", "1", "--describe"), "go with --entity-type"),
        (
            ("--entity-type", "topics", "--entity-name", "t", "--alter", "--add-config", "x"),
            "is not key=value",
        ),
        (
            ("--entity-type", "topics", "--entity-name", "no-such-topic", "--describe"),
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
    ],
)
def test_bad_input_is_one_error_line(
    bootstrap: str, args: tuple[str, ...], message: str
) -> None:
    configs(bootstrap, *args).check_error(message)


def test_deleting_a_config_that_is_not_set_changes_nothing(bootstrap: str) -> None:
    topic = new_topic(bootstrap)
    entity = ("--entity-type", "topics", "--entity-name", topic)
    configs(bootstrap, *entity, "--alter", "--add-config", "retention.ms=5000").check()
    configs(
        bootstrap, *entity, "--alter", "--add-config", "segment.ms=60000",
        "--delete-config", "retention.ms,flush.ms",
    ).check_error("Invalid config(s): flush.ms")  # fmt: skip
    lines = configs(bootstrap, *entity, "--describe").check().lines[1:]
    assert {k: v for k, (v, _) in entries(lines).items()} == {"retention.ms": "5000"}
    invalid = configs(bootstrap, *entity, "--alter", "--add-config", "retention.ms=soon")
    invalid.check_error("INVALID_CONFIG")
