"""``--command-config`` without a broker: which commands take it, unusable files are one
error line before any connection, which keys are warned about as unused
(tests/integration/test_command_config.py uses it against SASL and SSL listeners)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from odradek.cli.command_config import unused_warning
from odradek.cli.errors import CliError
from odradek.cli.perf_consume import consumer_config
from odradek.cli.perf_produce import parse_producer_props
from odradek.client.config_names import KAFKA_CLIENT_SETTINGS
from odradek.client.security import SECURITY_KEYS, ClientSecurity
from tests.cli.helpers import odradek
from tests.helpers.certs import make_pki

JAAS = (
    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="pw";\n'
)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (None, "cannot read config file"),
        ("security.protocol=KERBEROS\n", "security.protocol must be one of"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n", "sasl.mechanism must"),
        ("security.protocol=SASL_SSL\n", "SASL needs a user"),
        ("security.protocol=SSL\nssl.truststore.location=/nonexistent/ca.pem\n", "TLS"),
        ("\udcff\udcfe", "not a text properties file"),
    ],
)
def test_unusable_files_are_one_line(tmp_path: Path, text: str | None, fragment: str) -> None:
    path = tmp_path / "client.properties"
    if text is not None:
        path.write_bytes(text.encode(errors="surrogateescape"))
    # No broker is contacted (none listens there): the file is refused before connecting.
    odradek("topics", "list", "-b", "127.0.0.1:1", "--command-config", str(path)).check_error(
        "--command-config", fragment
    )


def test_every_broker_command_takes_it() -> None:
    from odradek.cli.main import _register, cli

    _register()
    missing = []

    def walk(command: click.Command, path: str) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")
            return
        names = {opt for param in command.params for opt in getattr(param, "opts", [])}
        reaches_a_broker = "--bootstrap-server" in names and path != "odradek demo"
        if reaches_a_broker and not names & {"--command-config", "--producer.config"}:
            missing.append(path)

    walk(cli, "odradek")
    assert not missing


def test_the_console_tools_older_names(tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=TLS\n")
    for args in (["produce", "t", "--producer.config"], ["consume", "t", "--consumer.config"]):
        odradek(*args, str(bad), "-b", "127.0.0.1:1").check_error(
            f"{args[-1]} {bad}", "security.protocol must be one of"
        )
    other = tmp_path / "other.properties"
    other.write_text("security.protocol=PLAINTEXT\n")
    odradek(
        "produce", "t", "-b", "127.0.0.1:1", "--producer.config", str(bad),
        "--command-config", str(other),
    ).check_error("name different files")  # fmt: skip


def test_perf_config_files_carry_the_security_keys(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n" + JAAS + "acks=1\n")
    _, config, warnings = parse_producer_props((), str(path), None)
    assert warnings == []  # not "supplied but isn't a known config"
    security = config.pop("security")
    assert (security.protocol, security.username, security.password) == (
        "SASL_PLAINTEXT", "admin", "pw"
    )
    assert config == {"client_id": "perf-producer-client", "acks": 1}
    consumer, warnings = consumer_config(path, 1024)
    assert consumer["security"].sasl_mechanism == "PLAIN"
    assert warnings == [unused_warning("acks")]  # a producer setting: no effect on a consumer
    plain, _ = consumer_config(None, 1024)
    assert "security" not in plain
    path.write_text("security.protocol=SASL_PLAINTEXT\n")
    with pytest.raises(CliError, match=r"--producer\.config: SASL needs a user"):
        parse_producer_props((), str(path), None)


class _Recording(dict):  # type: ignore[type-arg]
    """A properties dict that remembers which keys were asked for."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.asked: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(key)
        return super().get(key, default)


def test_security_keys_are_the_keys_the_client_reads(tmp_path: Path) -> None:
    # The one list the warnings use must follow from_properties: a key read there but missing
    # from SECURITY_KEYS would be warned about although it works, and the reverse.
    pki = make_pki(tmp_path)
    props = _Recording(
        {
            "security.protocol": "SASL_SSL",
            "sasl.username": "u",
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    ClientSecurity.from_properties(props)
    assert props.asked == SECURITY_KEYS
    # Java's names among them are Kafka client settings; librdkafka's are the others.
    not_java = SECURITY_KEYS - KAFKA_CLIENT_SETTINGS
    assert not_java == {
        "sasl.username", "sasl.password", "ssl.ca.location", "ssl.certificate.location",
        "ssl.key.location",
    }  # fmt: skip


def test_unused_keys_are_told_apart() -> None:
    assert unused_warning("sasl.mechanisms") == (
        "The configuration 'sasl.mechanisms' was supplied but isn't a known config."
    )
    assert "has no effect" in unused_warning("request.timeout.ms")
    assert "Kafka client setting" in unused_warning("bootstrap.servers")


def test_an_unreachable_broker_gets_no_security_hint() -> None:
    # Not a hang-up during set-up: nothing points at the security settings.
    result = odradek("topics", "list", "-b", "127.0.0.1:1").check_error("cannot connect")
    assert "command-config" not in result.stderr
