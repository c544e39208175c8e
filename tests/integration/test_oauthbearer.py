"""SASL OAUTHBEARER with unsecured JWS tokens (KIP-255) and confluent-kafka clients.

One broker: a SASL_PLAINTEXT listener with OAUTHBEARER (required scope ``kafka``) behind
the ACL authorizer, and a PLAINTEXT listener whose anonymous clients are super users (the
test's admin). librdkafka builds its own unsecured tokens
(``enable.sasl.oauthbearer.unsecure.jwt``); raw connections send bad ones.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from odradek.protocol.build import build_request
from odradek.protocol.codec import encode_request
from tests.helpers.broker import BrokerProcess, free_port, wait_for_port
from tests.helpers.raw import RawClient

pytestmark = pytest.mark.integration

JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredValidatorRequiredScope="kafka";'
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    sasl_port, plain_port = free_port(), free_port()
    proc = BrokerProcess(
        tmp_path_factory.mktemp("oauth") / "data",
        port=plain_port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",
            "num.partitions": "1",
        },
    ).start()
    try:
        wait_for_port(sasl_port, 30, proc.proc)
        yield proc, sasl_port
    finally:
        proc.stop()


def _client(port: int, principal: str, scope: str = "kafka", **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": f"principal={principal} scope={scope}",
        **extra,
    }


def test_token_principal_produces_and_consumes_under_its_acls(
    broker: tuple[BrokerProcess, int],
) -> None:
    proc, port = broker
    topic, group = f"oauth-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    allow = AclPermissionType.ALLOW
    literal = ResourcePatternType.LITERAL
    operations = (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, literal, "User:alice", "*", operation, allow)
        for operation in (*operations, AclOperation.CREATE)
    ]
    bindings.append(
        AclBinding(ResourceType.GROUP, group, literal, "User:alice", "*", AclOperation.READ, allow)
    )
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    for future in admin.create_acls(bindings).values():
        future.result(15)

    producer = Producer(_client(port, "alice"))
    errors: list[Any] = []
    for i in range(10):
        producer.produce(topic, f"m{i}".encode(), on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(30) == 0
    assert errors == [None] * 10
    consumer = Consumer(
        _client(port, "alice", **{"group.id": group, "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"m{i}".encode() for i in range(10)]
    assert "authenticated as User:alice with OAUTHBEARER" in proc.log_text()

    # bob's token is valid, but bob has no ACL on the topic: refused as User:bob.
    refused: list[Any] = []
    intruder = Producer(_client(port, "bob", **{"message.timeout.ms": 5000}))
    intruder.produce(topic, b"no", on_delivery=lambda e, _m: refused.append(e))
    intruder.flush(15)
    assert refused and refused[0] is not None
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_client_without_the_required_scope_fails_authentication(
    broker: tuple[BrokerProcess, int],
) -> None:
    port = broker[1]
    errors: list[Any] = []
    config = _client(port, "alice", scope="other", error_cb=errors.append)
    producer = Producer(config)
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors


def _token(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}."


class _Raw(RawClient):
    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


@pytest.mark.parametrize(
    ("token", "status"),
    [
        ("garbage", {"status": "invalid_token"}),
        (
            _token({"sub": "alice", "exp": 1_000_000, "scope": ["kafka"]}),
            {"status": "invalid_token"},
        ),
        (
            _token({"sub": "alice", "exp": time.time() + 3600, "scope": ["other"]}),
            {"status": "insufficient_scope", "scope": "kafka"},
        ),
    ],
    ids=["garbage", "expired", "missing-scope"],
)
def test_bad_tokens_are_refused_and_only_that_connection_closes(
    broker: tuple[BrokerProcess, int], token: str, status: dict[str, str]
) -> None:
    port = broker[1]
    bystander = _Raw(port)
    assert bystander.call(17, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
    good = _token({"sub": "carol", "exp": time.time() + 3600, "scope": ["kafka"]})
    assert bystander.call(36, 1, {"auth_bytes": f"n,,\x01auth=Bearer {good}\x01\x01".encode()}
                          ).error_code == 0  # fmt: skip

    raw = _Raw(port)
    assert raw.call(17, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
    first = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    challenge = raw.call(36, 1, {"auth_bytes": first})
    # RFC 7628: the error is the server's challenge; the client acknowledges with %x01.
    assert challenge.error_code == 0 and json.loads(challenge.auth_bytes) == status
    failed = raw.call(36, 1, {"auth_bytes": b"\x01"})
    assert failed.error_code == 58  # SASL_AUTHENTICATION_FAILED
    assert json.loads(failed.error_message) == status
    assert raw.closed()

    # The other connection is still served.
    metadata = bystander.call(3, 4, {"topics": None, "allow_auto_topic_creation": False})
    assert len(metadata.brokers) == 1
    bystander.sock.close()


def test_malformed_first_message_fails_at_once(broker: tuple[BrokerProcess, int]) -> None:
    raw = _Raw(broker[1])
    assert raw.call(17, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
    failed = raw.call(36, 1, {"auth_bytes": b"auth=Bearer x"})
    assert failed.error_code == 58
    assert raw.closed()


def test_token_expiry_bounds_the_session(broker: tuple[BrokerProcess, int]) -> None:
    # connections.max.reauth.ms is 0 here: the token's exp alone ends the session (KIP-368).
    raw = _Raw(broker[1])
    assert raw.call(17, 1, {"mechanism": "OAUTHBEARER"}).error_code == 0
    token = _token({"sub": "dave", "exp": time.time() + 2, "scope": ["kafka"]})
    answer = raw.call(36, 1, {"auth_bytes": f"n,,\x01auth=Bearer {token}\x01\x01".encode()})
    assert answer.error_code == 0 and 0 < answer.session_lifetime.total_seconds() <= 2
    assert raw.call(3, 4, {"topics": None, "allow_auto_topic_creation": False}).brokers
    time.sleep(2.3)
    # Not re-authenticated before the token expired: the next request closes the connection.
    request = build_request(3, 4, {"topics": None, "allow_auto_topic_creation": False})
    raw.sock.sendall(encode_request(4, 99, "raw", request))
    assert raw.closed()


def test_librdkafka_reauthenticates_before_its_token_expires(
    broker: tuple[BrokerProcess, int],
) -> None:
    proc, port = broker
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:erin", "*",
                   operation, AclPermissionType.ALLOW)
        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)
    ]  # fmt: skip
    for future in admin.create_acls(bindings).values():
        future.result(15)
    config = _client(port, "erin")
    config["sasl.oauthbearer.config"] += " lifeSeconds=3"
    producer = Producer(config)
    delivered: list[Any] = []
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda err, _m: delivered.append(err))
        producer.poll(0.2)
    assert producer.flush(30) == 0
    assert delivered and all(err is None for err in delivered), delivered[:3]
    assert "re-authenticated as User:erin with OAUTHBEARER" in proc.log_text()
