"""kafka-console-consumer's formatter options: --formatter and --formatter-config."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import odradek
from tests.cli.test_produce_consume import create, produce, unique
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def topic(shared_broker: BrokerProcess) -> str:
    name = unique("fmt")
    create(shared_broker.bootstrap, name)
    produce(shared_broker.bootstrap, name, b"a:1\nb:2\n", "--key-separator", ":").check()
    return name


def consume(broker: BrokerProcess, topic: str, *args: str):  # type: ignore[no-untyped-def]
    return odradek("consume", topic, "-b", broker.bootstrap, "--from-beginning",
                   "--max-messages", "2", *args)  # fmt: skip


def test_formatter_config_file_then_property(
    shared_broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    config = tmp_path / "formatter.properties"
    config.write_text("# as for kafka-console-consumer --formatter-config\n"
                      "print.key=true\nkey.separator=|\nprint.offset=true\n")  # fmt: skip
    result = consume(shared_broker, topic, "--formatter-config", str(config))
    assert result.check().lines == ["Offset:0|a|1", "Offset:1|b|2"]
    # --property wins over the file, as in Kafka.
    result = consume(shared_broker, topic, "--formatter-config", str(config),
                     "--property", "print.offset=false")  # fmt: skip
    assert result.check().lines == ["a|1", "b|2"]


@pytest.mark.parametrize(
    "name", ["NoOpMessageFormatter", "kafka.tools.NoOpMessageFormatter",
             "org.apache.kafka.tools.consumer.NoOpMessageFormatter"],
)  # fmt: skip
def test_noop_formatter_counts_only(shared_broker: BrokerProcess, topic: str, name: str) -> None:
    result = consume(shared_broker, topic, "--formatter", name).check()
    assert result.stdout == b""
    assert "Processed a total of 2 messages" in result.stderr


def test_default_formatter_by_kafka_class_name(shared_broker: BrokerProcess, topic: str) -> None:
    result = consume(shared_broker, topic, "--formatter", "kafka.tools.DefaultMessageFormatter")
    assert result.check().lines == ["1", "2"]


def test_formatter_errors(shared_broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    consume(shared_broker, topic, "--formatter", "kafka.tools.LoggingMessageFormatter").check_error(
        "--formatter: unsupported formatter", "NoOpMessageFormatter"
    )
    consume(shared_broker, topic, "--formatter-config", str(tmp_path / "missing")).check_error(
        "--formatter-config", "cannot read config file"
    )
    bad = tmp_path / "bad.properties"
    bad.write_text("print.everything=true\n")
    consume(shared_broker, topic, "--formatter-config", str(bad)).check_error(
        "unknown formatter property 'print.everything'"
    )
