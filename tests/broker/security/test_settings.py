"""Listener security settings as read from Kafka's keys: what starts, what is refused."""

from __future__ import annotations

import ssl

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from tests.helpers.certs import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _ssl(pki: Pki, **extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:2",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        **extra,
    }


def test_pem_keystore_file_gives_a_server_context(pki: Pki) -> None:
    config = BrokerConfig(_ssl(pki))
    security = config.listener_security()["SSL"]
    assert isinstance(security.ssl_context, ssl.SSLContext)
    assert security.ssl_context.verify_mode == ssl.CERT_NONE
    assert not security.uses_sasl
    assert "ssl.keystore.location" not in config.unused  # read, so not "without effect"


def test_inline_pem_without_newlines_as_a_continued_properties_value(pki: Pki) -> None:
    key = pki.server_key.read_text().replace("\n", "")
    chain = pki.server_cert.read_text().replace("\n", " ")
    config = BrokerConfig(
        {
            "listeners": "SSL://127.0.0.1:2",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": key,
            "ssl.keystore.certificate.chain": chain,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": pki.ca.read_text(),
            "ssl.client.auth": "required",
        }
    )
    assert config.listener_security()["SSL"].ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_encrypted_key_needs_ssl_key_password(pki: Pki) -> None:
    props = _ssl(pki, **{"ssl.keystore.location": str(pki.encrypted_server)})
    with pytest.raises(ConfigError, match="cannot load the key store"):
        BrokerConfig(props)
    BrokerConfig({**props, "ssl.key.password": "key-pass"})


def test_listener_prefixed_keys_override_the_broker_wide_ones(pki: Pki) -> None:
    props = _ssl(
        pki,
        **{
            "ssl.keystore.location": "/nonexistent.pem",
            "listener.name.ssl.ssl.keystore.location": str(pki.server),
            "listener.name.ssl.ssl.client.auth": "requested",
        },
    )
    context = BrokerConfig(props).listener_security()["SSL"].ssl_context
    assert context.verify_mode == ssl.CERT_OPTIONAL


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type=JKS is not supported"),
        ({"ssl.keystore.location": "/nonexistent.pem"}, "cannot load the key store"),
        ({"ssl.enabled.protocols": "TLSv9"}, "ssl.enabled.protocols: unknown protocol TLSv9"),
        ({"ssl.client.auth": "maybe"}, "ssl.client.auth: expected none, requested or required"),
        ({"ssl.cipher.suites": "NOT-A-CIPHER"}, "ssl.cipher.suites"),
        ({"ssl.principal.mapping.rules": "RULE:[/x/"}, "bad pattern"),
    ],
)
def test_bad_tls_settings_are_one_line_errors(pki: Pki, extra: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match="listener SSL") as info:
        BrokerConfig(_ssl(pki, **extra))
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_tls_protocol_range_follows_ssl_enabled_protocols(pki: Pki) -> None:
    config = BrokerConfig(_ssl(pki, **{"ssl.enabled.protocols": "TLSv1.3"}))
    context = config.listener_security()["SSL"].ssl_context
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3


def test_sasl_defaults_to_gssapi_which_is_refused() -> None:
    with pytest.raises(ConfigError, match="GSSAPI not supported"):
        BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:1"})


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"sasl.enabled.mechanisms": "PLAIN,GSSAPI"}, "GSSAPI not supported"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "plain.sasl.jaas.config is not set"),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": "Other required;",
            },
            "login module must be org.apache.kafka.common.security.plain.PlainLoginModule",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": "x required a=1",
            },
            "must end with ';'",
        ),
    ],
)
def test_bad_sasl_settings_are_refused(extra: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", **extra})
    assert fragment in str(info.value)


def test_plain_users_come_from_the_jaas_entry() -> None:
    config = BrokerConfig(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:1",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="admin" password="x" user_admin="x" user_alice="a";'
            ),
        }
    )
    security = config.listener_security()["SASL_PLAINTEXT"]
    assert security.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert security.plain_users == {"admin": "x", "alice": "a"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "OAUTHBEARER"])
def test_a_listeners_jaas_entry_is_read_so_not_reported_unused(mechanism: str) -> None:
    # `odradek server` warns of the keys in `unused`; the JAAS entry the listener's SASL
    # mechanism reads is used (the example in docs/operations.md was warned about).
    if mechanism == "PLAIN":
        jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="a";'
    else:
        jaas = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    key = f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config"
    config = BrokerConfig(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:1",
            "sasl.enabled.mechanisms": mechanism,
            key: jaas,
        }
    )
    assert config.listener_security()["SASL_PLAINTEXT"].mechanisms == (mechanism,)
    assert key not in config.unused
