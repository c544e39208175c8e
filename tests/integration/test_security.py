"""SSL, SASL_PLAINTEXT and SASL_SSL listeners with real clients (confluent-kafka,
kafka-python, aiokafka), PLAIN and SCRAM, mutual TLS, and hostile input on the SASL path.

One broker serves four listeners; SCRAM users are created over PLAINTEXT with
AlterUserScramCredentials as a Kafka admin would. Certificates are generated per run.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.helpers.raw import RawClient
from tests.helpers.secured import SecuredBroker, start_secured_broker

pytestmark = pytest.mark.integration

SCRAM_PASSWORD = "scram-secret-1"
Secured = SecuredBroker


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    secured = start_secured_broker(
        tmp_path_factory.mktemp("security"),
        ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
        plain_users={"alice": "alice-secret", "bob": "bob-secret"},
        mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        overrides={"listener.name.ssl.ssl.client.auth": "requested"},
    )
    broker = secured.broker
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "carol", ScramCredentialInfo(mechanism, 4096), SCRAM_PASSWORD.encode()
                )
                for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
            ][:1]
        )
        for future in futures.values():
            future.result(10)
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "carol",
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                    SCRAM_PASSWORD.encode(),
                )
            ]
        )
        for future in futures.values():
            future.result(10)
        yield secured
    finally:
        broker.stop()


def _confluent(secured: Secured, listener: str, **extra: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": secured.bootstrap(listener),
        "security.protocol": listener,
        **extra,
    }
    if listener in ("SSL", "SASL_SSL"):
        config["ssl.ca.location"] = str(secured.pki.ca)
    return config


def _round_trip(config: dict[str, Any], count: int = 20) -> list[bytes]:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    for i in range(count):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {**config, "group.id": topic, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


@pytest.mark.parametrize(
    ("listener", "extra"),
    [
        ("SSL", {}),
        (
            "SASL_PLAINTEXT",
            {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"},
        ),
        (
            "SASL_PLAINTEXT",
            {
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "carol",
                "sasl.password": SCRAM_PASSWORD,
            },
        ),
        (
            "SASL_SSL",
            {
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "carol",
                "sasl.password": SCRAM_PASSWORD,
            },
        ),
        (
            "SASL_SSL",
            {"sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": "bob-secret"},
        ),
    ],
    ids=[
        "ssl",
        "sasl-plaintext-plain",
        "sasl-plaintext-scram256",
        "sasl-ssl-scram512",
        "sasl-ssl-plain",
    ],
)
def test_confluent_kafka_produces_and_consumes(
    secured: Secured, listener: str, extra: dict
) -> None:
    got = _round_trip(_confluent(secured, listener, **extra))
    assert got == [f"m{i}".encode() for i in range(20)]


def test_confluent_kafka_mutual_tls_principal_is_the_certificate_name(secured: Secured) -> None:
    config = _confluent(
        secured,
        "SSL",
        **{
            "ssl.certificate.location": str(secured.pki.client_cert),
            "ssl.key.location": str(secured.pki.client_key),
        },
    )
    assert len(_round_trip(config, count=3)) == 3
    deadline = time.monotonic() + 5
    while "User:CN=alice,OU=eng,O=acme" not in secured.broker.log_text():
        assert time.monotonic() < deadline, "principal not logged"
        time.sleep(0.1)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_fails_and_is_never_logged(secured: Secured, mechanism: str) -> None:
    user = "alice" if mechanism == "PLAIN" else "carol"
    config = _confluent(
        secured,
        "SASL_PLAINTEXT",
        **{"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": "wrong-pw-xyz"},
    )
    errors: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)  # serves error_cb
    failures = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert failures, errors
    assert "Authentication failed" in failures[0].str()
    text = secured.broker.log_text()
    assert "wrong-pw-xyz" not in text
    assert "alice-secret" not in text and SCRAM_PASSWORD not in text


def test_kafka_python_scram_over_sasl_ssl(secured: Secured) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = f"kp-{uuid.uuid4().hex[:8]}"
    common = {
        "bootstrap_servers": secured.bootstrap("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "carol",
        "sasl_plain_password": SCRAM_PASSWORD,
        "ssl_cafile": str(secured.pki.ca),
    }
    producer = KafkaProducer(**common)
    for i in range(10):
        producer.send(topic, f"k{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **common
    )
    got = [m.value for _, m in zip(range(10), consumer, strict=False)]
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(10)]


def test_kafka_python_plain_over_sasl_plaintext(secured: Secured) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(
        bootstrap_servers=secured.bootstrap("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
    )
    assert isinstance(admin.list_topics(), list)
    admin.close()


def test_aiokafka_plain_and_scram_over_sasl_ssl(secured: Secured) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run(mechanism: str, user: str, password: str) -> list[bytes]:
        topic = f"aio-{uuid.uuid4().hex[:8]}"
        common = {
            "bootstrap_servers": secured.bootstrap("SASL_SSL"),
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
            "ssl_context": create_ssl_context(cafile=str(secured.pki.ca)),
        }
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(20):
                async for message in consumer:
                    got.append(message.value)
                    if len(got) == 5:
                        break
        finally:
            await consumer.stop()
        return got

    expected = [f"a{i}".encode() for i in range(5)]
    assert asyncio.run(run("PLAIN", "alice", "alice-secret")) == expected
    assert asyncio.run(run("SCRAM-SHA-512", "carol", SCRAM_PASSWORD)) == expected


def test_untrusted_client_certificate_is_refused_and_others_are_served(secured: Secured) -> None:
    context = ssl.create_default_context(cafile=str(secured.pki.ca))
    context.load_cert_chain(secured.pki.other_ca_client_cert, secured.pki.other_ca_client_key)
    with (
        pytest.raises((ssl.SSLError, ConnectionError, OSError)),
        socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(b"\x00\x00\x00\x00")
        if not tls.recv(1):
            raise ConnectionError("closed")
    assert len(_round_trip(_confluent(secured, "SSL"), count=2)) == 2


# Hostile input on the SASL path -------------------------------------------------------


class _Raw(RawClient):
    def assert_closed(self) -> None:
        self.sock.settimeout(10)
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionResetError:
            pass


def _still_serving(secured: Secured) -> None:
    config = _confluent(
        secured,
        "SASL_PLAINTEXT",
        **{"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"},
    )
    assert isinstance(AdminClient(config).list_topics(timeout=10).topics, dict)


def test_request_before_authentication_closes_the_connection(secured: Secured) -> None:
    raw = _Raw(secured.ports["SASL_PLAINTEXT"])
    versions = raw.call(18, 0, {})
    assert versions.error_code == 0  # ApiVersions is allowed first
    raw.send(3, 4, {"topics": None, "allow_auto_topic_creation": False})
    raw.assert_closed()
    _still_serving(secured)


def test_authenticate_before_handshake_closes(secured: Secured) -> None:
    raw = _Raw(secured.ports["SASL_PLAINTEXT"])
    raw.send(36, 1, {"auth_bytes": b"\x00alice\x00alice-secret"})
    raw.assert_closed()
    _still_serving(secured)


def test_repeated_handshake_closes(secured: Secured) -> None:
    raw = _Raw(secured.ports["SASL_PLAINTEXT"])
    first = raw.call(17, 1, {"mechanism": "PLAIN"})
    assert first.error_code == 0
    raw.send(17, 1, {"mechanism": "PLAIN"})
    raw.assert_closed()
    _still_serving(secured)


def test_unsupported_mechanism_lists_the_enabled_ones_and_closes(secured: Secured) -> None:
    raw = _Raw(secured.ports["SASL_PLAINTEXT"])
    response = raw.call(17, 1, {"mechanism": "GSSAPI"})
    assert response.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
    assert list(response.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    raw.assert_closed()


@pytest.mark.parametrize(
    "token",
    [b"\xff\xfe garbage", b"no-nul-bytes", b"n,,n=carol", b"p=tls-unique,,n=carol,r=abc"],
)
def test_garbage_tokens_fail_authentication_and_close(secured: Secured, token: bytes) -> None:
    raw = _Raw(secured.ports["SASL_PLAINTEXT"])
    mechanism = "PLAIN" if b"n=" not in token else "SCRAM-SHA-256"
    assert raw.call(17, 1, {"mechanism": mechanism}).error_code == 0
    response = raw.call(36, 1, {"auth_bytes": token})
    assert response.error_code == 58  # SASL_AUTHENTICATION_FAILED
    raw.assert_closed()
    _still_serving(secured)


def test_huge_token_closes_the_connection(secured: Secured) -> None:
    raw = _Raw(secured.ports["SASL_PLAINTEXT"])
    assert raw.call(17, 0, {"mechanism": "PLAIN"}).error_code == 0
    raw.sock.sendall(struct.pack(">i", 600_000) + b"\x00" * 600_000)
    raw.assert_closed()
    _still_serving(secured)


def test_v0_handshake_then_raw_plain_token(secured: Secured) -> None:
    raw = _Raw(secured.ports["SASL_PLAINTEXT"])
    assert raw.call(17, 0, {"mechanism": "PLAIN"}).error_code == 0
    token = b"\x00alice\x00alice-secret"
    raw.sock.sendall(struct.pack(">i", len(token)) + token)
    assert raw.read(4) == b"\x00\x00\x00\x00"  # an empty server token: authenticated
    metadata = raw.call(3, 4, {"topics": None, "allow_auto_topic_creation": False})
    assert len(metadata.brokers) == 1


def test_sasl_handshake_on_plaintext_is_illegal_sasl_state(secured: Secured) -> None:
    raw = _Raw(secured.ports["PLAINTEXT"])
    assert raw.call(17, 1, {"mechanism": "PLAIN"}).error_code == 34


def test_describe_user_scram_credentials_lists_mechanisms_not_secrets(secured: Secured) -> None:
    admin = AdminClient({"bootstrap.servers": secured.bootstrap("PLAINTEXT")})
    description = admin.describe_user_scram_credentials(["carol"])["carol"].result(10)
    infos = {(i.mechanism, i.iterations) for i in description.scram_credential_infos}
    assert infos == {(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)}
    stored = (secured.broker.data_dir / "odradek-metadata.json").read_text()
    assert SCRAM_PASSWORD not in stored and "stored_key=" in stored


def test_users_cli_adds_describes_and_deletes_scram_credentials(secured: Secured) -> None:
    from tests.cli.helpers import odradek

    bootstrap = secured.bootstrap("PLAINTEXT")
    odradek(
        "users",
        "add",
        "dave",
        "-b",
        bootstrap,
        "--add-config",
        "SCRAM-SHA-512=[iterations=4096,password=dave-pw]",
    ).check()
    described = odradek("users", "describe", "dave", "-b", bootstrap).check()
    assert described.lines == [
        "SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-512=iterations=4096"
    ]
    login = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "dave", "sasl.password": "dave-pw"}
    config = _confluent(secured, "SASL_PLAINTEXT", **login)
    assert isinstance(AdminClient(config).list_topics(timeout=10).topics, dict)
    odradek("users", "delete", "dave", "-b", bootstrap).check()
    with pytest.raises(KafkaException):
        AdminClient(config).list_topics(timeout=3)
    odradek("users", "describe", "dave", "-b", bootstrap).check_error("RESOURCE_NOT_FOUND")
    odradek(
        "users", "add", "dave", "-b", bootstrap, "--add-config", "SCRAM-SHA-1=[password=x]"
    ).check_error("--add-config")
    assert "dave-pw" not in secured.broker.log_text()


def test_a_silent_tls_client_does_not_hold_up_the_others(secured: Secured) -> None:
    # TLS handshakes run apart from accepting: a peer that connects and sends nothing
    # must not keep the next client from being served.
    silent = [socket.create_connection(("127.0.0.1", secured.ports["SSL"])) for _ in range(3)]
    try:
        assert len(_round_trip(_confluent(secured, "SSL"), count=2)) == 2
    finally:
        for sock in silent:
            sock.close()


def test_clients_reauthenticate_and_silent_sessions_expire(tmp_path: Path) -> None:
    # KIP-368: librdkafka re-authenticates before connections.max.reauth.ms ends; a client
    # that does not is closed at its next request after expiry.
    secured = start_secured_broker(
        tmp_path,
        ["SASL_PLAINTEXT"],
        plain_users={"alice": "alice-secret"},
        overrides={"connections.max.reauth.ms": "1500"},
    )
    broker, port = secured.broker, secured.ports["SASL_PLAINTEXT"]
    try:
        config = {
            "bootstrap.servers": broker.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        producer = Producer(config)
        delivered: list[object] = []
        deadline = time.monotonic() + 4.5
        while time.monotonic() < deadline:
            producer.produce("reauth", b"x", on_delivery=lambda err, _m: delivered.append(err))
            producer.poll(0.2)
        assert producer.flush(30) == 0
        assert delivered and all(err is None for err in delivered)
        assert "re-authenticated as User:alice" in broker.log_text()

        raw = _Raw(port)
        assert raw.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        answer = raw.call(36, 1, {"auth_bytes": b"\x00alice\x00alice-secret"})
        assert answer.session_lifetime.total_seconds() == 1.5
        time.sleep(1.7)
        raw.send(3, 4, {"topics": None, "allow_auto_topic_creation": False})
        raw.assert_closed()
    finally:
        broker.stop()


def test_odradek_client_over_every_listener(secured: Secured) -> None:
    """odradek's own client (the console's and the CLI's) with the Java client's properties:
    TLS with a trust store, mutual TLS, SASL PLAIN and SCRAM over TLS; a wrong password is
    SASL_AUTHENTICATION_FAILED; a CA that is not the broker's fails the TLS handshake."""
    from odradek.client.admin import Admin
    from odradek.client.core import KafkaClient
    from odradek.client.errors import ClientError
    from odradek.client.errors import KafkaError as OdradekKafkaError
    from odradek.client.security import ClientSecurity

    pki = secured.pki
    tls = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}

    def jaas(user: str, password: str) -> str:
        return (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";'
        )

    async def brokers(listener: str, props: dict[str, str]) -> list[int]:
        client = KafkaClient(
            secured.bootstrap(listener), security=ClientSecurity.from_properties(props)
        )
        try:
            await client.start()
            return sorted((await Admin(client).describe_cluster()).brokers)
        finally:
            await client.close()

    cases = {
        "SSL": {"security.protocol": "SSL", **tls},
        "SASL_PLAINTEXT": {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": jaas("alice", "alice-secret"),
        },
        "SASL_SSL": {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas("carol", SCRAM_PASSWORD),
            **tls,
        },
    }
    for listener, props in cases.items():
        assert asyncio.run(brokers(listener, props)) == [0], listener
    mutual = {
        **cases["SSL"],
        "ssl.keystore.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    }
    assert asyncio.run(brokers("SSL", mutual)) == [0]
    wrong = {**cases["SASL_SSL"], "sasl.jaas.config": jaas("carol", "not-the-password")}
    with pytest.raises(OdradekKafkaError) as refused:
        asyncio.run(brokers("SASL_SSL", wrong))
    assert refused.value.name == "SASL_AUTHENTICATION_FAILED"
    assert "not-the-password" not in str(refused.value)
    untrusted = {"security.protocol": "SSL"}  # the system's CAs: not this broker's
    with pytest.raises(ClientError) as failed:
        asyncio.run(brokers("SSL", untrusted))
    assert "certificate" in str(failed.value).lower(), failed.value
