"""``--command-config``: every broker-facing command reaches SASL and SSL listeners.

One broker serves SASL_PLAINTEXT (PLAIN and SCRAM-SHA-256) and SSL; the commands that must
pass are aimed at those, so a command that ignored the properties file could not pass (a
PLAINTEXT listener is there for an SSL client to miss). Each command runs as a user runs it
(a subprocess); a refused login, an unusable file, an untrusted certificate or a listener
that speaks another security protocol is one error line; unused keys of the file are
warnings and the command runs on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import Result, odradek
from tests.helpers.secured import SecuredBroker, client_properties, start_secured_broker

pytestmark = pytest.mark.integration

ADMIN_PASSWORD = "admin-secret"
SCRAM_PASSWORD = "carol-scram-secret"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    broker = start_secured_broker(
        tmp_path_factory.mktemp("command-config"),
        ["SASL_PLAINTEXT", "SSL", "PLAINTEXT"],
        plain_users={"admin": ADMIN_PASSWORD},
        mechanisms="PLAIN,SCRAM-SHA-256",
    )
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def sasl_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("props") / "admin.properties"
    return client_properties(path, "SASL_PLAINTEXT", user="admin", password=ADMIN_PASSWORD)


def sasl(secured: SecuredBroker, config: Path, *args: str, stdin: bytes | None = None) -> Result:
    """``odradek <args>`` against the SASL listener with ``--command-config``."""
    where = ["--bootstrap-server", secured.bootstrap("SASL_PLAINTEXT"), "--command-config"]
    return odradek(*args, *where, str(config), stdin=stdin)


def test_admin_commands_over_sasl(secured: SecuredBroker, sasl_config: Path) -> None:
    sasl(secured, sasl_config, "topics", "create", "orders", "--partitions", "2").check()
    assert "orders" in sasl(secured, sasl_config, "topics", "list").lines
    described = sasl(secured, sasl_config, "topics", "describe", "orders").check()
    assert "PartitionCount: 2" in described.out
    sasl(
        secured, sasl_config, "configs", "--alter", "--entity-type", "topics",
        "--entity-name", "orders", "--add-config", "retention.ms=3600000",
    ).check()  # fmt: skip
    configs = sasl(
        secured, sasl_config, "configs", "--describe", "--entity-type", "topics",
        "--entity-name", "orders",
    ).check()  # fmt: skip
    assert "retention.ms=3600000" in configs.out
    assert '"orders-1"' in sasl(secured, sasl_config, "log-dirs", "describe").check().out
    cluster = sasl(secured, sasl_config, "cluster", "describe").check()
    assert "127.0.0.1" in cluster.out
    sasl(secured, sasl_config, "transactions", "list").check()
    # Each broker is asked on the listener the metadata names: the SASL one, logged in.
    versions = sasl(secured, sasl_config, "broker-api-versions").check()
    assert versions.lines[0].endswith("(id: 0 rack: null) -> (")
    assert "\tProduce(0): " in versions.out and "ERROR" not in versions.out
    # A single broker without ZooKeeper serves neither reassignments nor elections: the
    # broker's answer (not a refused login) proves the command got through the SASL listener.
    for args in (
        ["reassign-partitions", "--list"],
        ["elect-leaders", "--election-type", "preferred", "--all-topic-partitions"],
    ):
        sasl(secured, sasl_config, *args).check_error("UNSUPPORTED_VERSION")


def test_records_and_groups_over_sasl(
    secured: SecuredBroker, sasl_config: Path, tmp_path: Path
) -> None:
    sasl(secured, sasl_config, "topics", "create", "events", "--partitions", "1").check()
    sasl(secured, sasl_config, "produce", "events", stdin=b"one\ntwo\nthree\n").check()
    got = sasl(
        secured, sasl_config, "consume", "events", "--from-beginning", "--max-messages", "3",
        "--group", "readers",
    ).check()  # fmt: skip
    assert got.lines == ["one", "two", "three"]
    assert "events:0:3" in sasl(secured, sasl_config, "get-offsets", "--topic", "events").lines
    offsets = tmp_path / "offsets.json"
    offsets.write_text('{"partitions": [{"topic": "events", "partition": 0, "offset": 1}]}')
    deleted = sasl(secured, sasl_config, "delete-records", "--offset-json-file", str(offsets))
    assert deleted.check().lines[-1] == "partition: events-0\tlow_watermark: 1"
    assert "readers" in sasl(secured, sasl_config, "groups", "list").check().lines
    described = sasl(secured, sasl_config, "groups", "describe", "--group", "readers").check()
    assert any(line.split()[:2] == ["readers", "events"] for line in described.lines)


def test_perf_tools_read_security_from_their_config_files(
    secured: SecuredBroker, sasl_config: Path
) -> None:
    bootstrap = secured.bootstrap("SASL_PLAINTEXT")
    sasl(secured, sasl_config, "topics", "create", "perf", "--partitions", "1").check()
    produced = odradek(
        "perf", "produce", "--topic", "perf", "--num-records", "50", "--record-size", "10",
        "--throughput", "-1", "--bootstrap-server", bootstrap,
        "--producer.config", str(sasl_config),
    ).check()  # fmt: skip
    assert "50 records sent" in produced.out
    assert "WARN" not in produced.stderr  # security keys are known settings, not extras
    consumed = odradek(
        "perf", "consume", "--topic", "perf", "--messages", "50", "--bootstrap-server",
        bootstrap, "--consumer.config", str(sasl_config),
    ).check()  # fmt: skip
    assert consumed.lines[-1].split(", ")[4] == "50"  # data.consumed.in.nMsg


def test_scram_user_made_over_sasl_then_used(
    secured: SecuredBroker, sasl_config: Path, tmp_path: Path
) -> None:
    sasl(
        secured, sasl_config, "users", "add", "carol",
        "--add-config", f"SCRAM-SHA-256=[iterations=4096,password={SCRAM_PASSWORD}]",
    ).check()  # fmt: skip
    carol = client_properties(
        tmp_path / "carol.properties", "SASL_PLAINTEXT", user="carol",
        password=SCRAM_PASSWORD, mechanism="SCRAM-SHA-256",
    )  # fmt: skip
    sasl(secured, carol, "topics", "list").check()
    wrong = client_properties(
        tmp_path / "wrong.properties", "SASL_PLAINTEXT", user="carol",
        password="not-it", mechanism="SCRAM-SHA-256",
    )  # fmt: skip
    sasl(secured, wrong, "topics", "list").check_error("uthentication failed")


def test_a_wrong_password_is_one_line(
    secured: SecuredBroker, sasl_config: Path, tmp_path: Path
) -> None:
    wrong = client_properties(
        tmp_path / "wrong.properties", "SASL_PLAINTEXT", user="admin", password="nope"
    )
    for args in (["topics", "list"], ["groups", "list"], ["consume", "events"]):
        result = sasl(secured, wrong, *args).check_error("uthentication failed")
        assert "nope" not in result.stderr  # the password is never printed


def test_ssl_listener(secured: SecuredBroker, tmp_path: Path) -> None:
    assert secured.pki is not None
    trusted = client_properties(tmp_path / "ssl.properties", "SSL", ca=secured.pki.ca)
    bootstrap = secured.bootstrap("SSL")
    secure = ["-b", bootstrap, "--command-config", str(trusted)]
    odradek("topics", "create", "over-tls", *secure).check()
    listed = odradek("topics", "list", *secure).check()
    assert "over-tls" in listed.lines
    # Without the CA the system's trust store is used, and it does not know ours.
    untrusted = client_properties(tmp_path / "untrusted.properties", "SSL")
    refused = odradek("topics", "list", "-b", bootstrap, "--command-config", str(untrusted))
    refused.check_error("CERTIFICATE_VERIFY_FAILED")
    assert "security.protocol" not in refused.stderr  # not a protocol mismatch: no hint


@pytest.mark.parametrize(
    ("listener", "client", "fragments"),
    [
        # (a) SASL listener: ApiVersions is answered, the next request closes the connection.
        ("SASL_PLAINTEXT", None, ["before answering Metadata", "--command-config FILE"]),
        # (b) SSL listener: the plaintext ApiVersions request is not TLS.
        ("SSL", None, ["before answering ApiVersions", "--command-config FILE"]),
        # (c) SSL client, PLAINTEXT listener: the broker drops the ClientHello.
        ("PLAINTEXT", "SSL", ["TLS handshake", "check that security.protocol in --command"]),
    ],
)
def test_a_listener_of_another_security_protocol_gets_a_hint(
    secured: SecuredBroker, tmp_path: Path, listener: str, client: str | None, fragments: list
) -> None:
    args = ["topics", "list", "-b", secured.bootstrap(listener)]
    if client is not None:
        assert secured.pki is not None
        path = client_properties(tmp_path / "client.properties", client, ca=secured.pki.ca)
        args += ["--command-config", str(path)]
    started = time.monotonic()
    odradek(*args, timeout=30).check_error(*fragments)
    assert time.monotonic() - started < 20  # a hint, not a hang (Kafka's tools time out)


def test_unused_keys_are_warnings(
    secured: SecuredBroker, sasl_config: Path, tmp_path: Path
) -> None:
    assert not sasl(secured, sasl_config, "topics", "list").check().stderr  # a proper file
    extra = tmp_path / "extra.properties"
    extra.write_text(sasl_config.read_text() + "request.timeout.ms=5000\nsasl.mechanisms=PLAIN\n")
    no_effect = "WARN The configuration 'request.timeout.ms' is a Kafka client setting"
    typo = "WARN The configuration 'sasl.mechanisms' was supplied but isn't a known config."
    # odradek's own client (topics) and librdkafka's (acls) read the file apart: both warn.
    for args in (["topics", "list"], ["acls", "--list"]):
        result = sasl(secured, extra, *args).check()
        lines = result.stderr.splitlines()
        assert len(lines) == 2 and lines[0].startswith(no_effect) and lines[1] == typo, lines
