"""Client security settings from Java client properties, and the client's SASL exchanges
checked against the broker's own server side (one layer each, no sockets)."""

from __future__ import annotations

import base64

import pytest

from odradek.broker.security.scram import ScramError, ScramServer, credential_from_password
from odradek.client.security import ClientSecurity, SecurityConfigError

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="a,b=c" password="p\\"w";'
)


def test_properties_with_java_names() -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": JAAS,
        }
    )
    assert (security.protocol, security.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-512")
    assert (security.username, security.password) == ("a,b=c", 'p"w')
    assert security.uses_sasl and not security.uses_tls and security.ssl_context is None
    assert "p\"w" not in repr(security)  # never printed
    librdkafka_names = ClientSecurity.from_properties(
        {"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "x",
         "ssl.endpoint.identification.algorithm": ""}
    )  # fmt: skip
    assert librdkafka_names.uses_tls and librdkafka_names.ssl_context is not None
    assert librdkafka_names.ssl_context.check_hostname is False
    assert ClientSecurity.from_properties({}).protocol == "PLAINTEXT"


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"security.protocol": "TLS"}, "security.protocol must be one of"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism must"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "SASL needs a user"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent.pem"}, "TLS"),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "reads PEM files only"),
    ],
)
def test_unusable_properties_are_one_error(props: dict[str, str], fragment: str) -> None:
    with pytest.raises(SecurityConfigError, match=fragment):
        ClientSecurity.from_properties(props)


def test_plain_token() -> None:
    exchange = ClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", "pw").exchange()
    assert exchange.respond(b"") == b"\0alice\0pw"
    assert exchange.done


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_against_the_broker(mechanism: str) -> None:
    stored = credential_from_password(mechanism, "s3cret", iterations=4096)
    for password, accepted in (("s3cret", True), ("wrong", False)):
        server = ScramServer(mechanism, lambda _user, _mech: stored)
        client = ClientSecurity("SASL_SSL", mechanism, "carol", password).exchange()
        server_first = server.evaluate(client.respond(b"") or b"")
        client_final = client.respond(server_first) or b""
        if not accepted:
            with pytest.raises(ScramError):
                server.evaluate(client_final)
            continue
        server_final = server.evaluate(client_final)
        assert server.complete and server.user == "carol"
        assert client.respond(server_final) is None and client.done


def test_scram_refuses_a_broker_that_does_not_know_the_password() -> None:
    stored = credential_from_password("SCRAM-SHA-256", "real")
    server = ScramServer("SCRAM-SHA-256", lambda _user, _mech: stored)
    client = ClientSecurity("SASL_SSL", "SCRAM-SHA-256", "carol", "real").exchange()
    client.respond(server.evaluate(client.respond(b"") or b""))
    # A server-final message whose signature is not derived from the password is refused.
    with pytest.raises(ValueError, match="signature"):
        client.respond(b"v=" + base64.b64encode(bytes(32)))
