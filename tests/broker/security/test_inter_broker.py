"""The inter-broker listener and credentials as read from Kafka's keys; what is refused at
start-up (one line each); the SCRAM client against odradek's SCRAM server; a link to a
real SASL_SSL listener opened the way other brokers open it."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.security import scram
from odradek.cluster.peer import AuthenticationError
from tests.helpers.certs import Pki, make_pki

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
ZK = {"zookeeper.connect": "127.0.0.1:2181"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _internal(protocol: str = "SASL_PLAINTEXT", **extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:1,INTERNAL://127.0.0.1:2",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,INTERNAL:{protocol}",
        "inter.broker.listener.name": "internal",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": (
            f'{PLAIN_MODULE} required username="broker" password="plain-pw" '
            'user_broker="plain-pw";'
        ),
        **extra,
    }


def _scram_jaas(user: str = "broker", password: str = "pw") -> str:
    return f'{SCRAM_MODULE} required username="{user}" password="{password}";'


def _refused(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_default_is_the_plaintext_listener() -> None:
    security = BrokerConfig(ZK).inter_broker
    assert (security.listener, security.protocol, security.mechanism) == (
        "PLAINTEXT",
        "PLAINTEXT",
        None,
    )


def test_security_inter_broker_protocol_names_the_listener_of_that_name() -> None:
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": _scram_jaas(),
    }
    config = BrokerConfig(props)
    assert config.inter_broker.listener == "SASL_PLAINTEXT"
    assert config.inter_broker.mechanism == "SCRAM-SHA-256"
    # Read, so not in the start-up list of keys without effect.
    assert "security.inter.broker.protocol" not in config.unused
    assert "sasl.mechanism.inter.broker.protocol" not in config.unused


def test_credentials_from_the_listener_and_mechanism_jaas_entry() -> None:
    props = _internal(
        **{
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": _scram_jaas("b", "s3"),
        }
    )
    security = BrokerConfig(props).inter_broker
    assert (security.listener, security.mechanism, security.username, security.password) == (
        "INTERNAL",
        "SCRAM-SHA-512",
        "b",
        "s3",
    )
    assert "s3" not in repr(security)  # never in a log line


def test_plain_uses_the_username_of_the_servers_own_entry() -> None:
    props = _internal(**{"sasl.mechanism.inter.broker.protocol": "PLAIN"})
    security = BrokerConfig(props).inter_broker
    assert (security.username, security.password) == ("broker", "plain-pw")


def test_plain_sasl_jaas_config_is_the_fallback() -> None:
    props = _internal(
        **{
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.jaas.config": _scram_jaas("g"),
        }
    )
    assert BrokerConfig(props).inter_broker.username == "g"


def test_both_keys_are_refused() -> None:
    message = _refused(
        {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"}
    )
    assert message == (
        "Only one of inter.broker.listener.name and security.inter.broker.protocol "
        "should be set."
    )


def test_unknown_listener_name_is_refused() -> None:
    message = _refused({"inter.broker.listener.name": "NOPE"})
    assert "Listener with name NOPE defined in inter.broker.listener.name not found" in message


def test_a_cluster_needs_its_inter_broker_listener() -> None:
    props = {
        **ZK,
        "listeners": "SASL_PLAINTEXT://127.0.0.1:1",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": f"{PLAIN_MODULE} required;",
    }
    message = _refused(props)
    assert message.startswith(
        "inter.broker.listener.name must be a listener name defined in advertised.listeners"
    )
    # A lone broker never connects to another: the same listeners are fine without ZooKeeper.
    del props["zookeeper.connect"]
    assert BrokerConfig(props).inter_broker is None


def test_gssapi_default_mechanism_is_refused() -> None:
    message = _refused(_internal())
    assert message.startswith("sasl.mechanism.inter.broker.protocol=GSSAPI is not supported")
    assert "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in message


def test_mechanism_must_be_enabled_on_the_listener() -> None:
    props = _internal(**{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"})
    assert "must be included in sasl.enabled.mechanisms" in _refused(props)


@pytest.mark.parametrize(
    ("jaas", "fragment"),
    [
        (None, "listener.name.internal.scram-sha-512.sasl.jaas.config is not set"),
        (f'{PLAIN_MODULE} required username="b" password="p";', "login module must be"),
        (f'{SCRAM_MODULE} required password="p";', "username and password options"),
        (f"{SCRAM_MODULE} required username=b", "must end with ';'"),
    ],
)
def test_bad_credentials_entry_is_refused(jaas: str | None, fragment: str) -> None:
    props = _internal(**{"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"})
    if jaas is not None:
        props["listener.name.internal.scram-sha-512.sasl.jaas.config"] = jaas
    assert fragment in _refused(props)


def test_tls_client_context_from_the_listener_keys(pki: Pki) -> None:
    props = _internal(
        "SSL",
        **{
            "listener.name.internal.ssl.keystore.type": "PEM",
            "listener.name.internal.ssl.keystore.location": str(pki.server),
            "listener.name.internal.ssl.truststore.type": "PEM",
            "listener.name.internal.ssl.truststore.location": str(pki.ca),
            "listener.name.internal.ssl.client.auth": "required",
        },
    )
    context = BrokerConfig(props).inter_broker.ssl_context
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    props["ssl.endpoint.identification.algorithm"] = ""
    assert not BrokerConfig(props).inter_broker.ssl_context.check_hostname
    props["ssl.endpoint.identification.algorithm"] = "ldap"
    assert "ssl.endpoint.identification.algorithm" in _refused(props)


def _exchange(client: scram.ScramClient, server: scram.ScramServer) -> None:
    server_first = server.evaluate(client.first())
    server_final = server.evaluate(client.final(server_first))
    client.verify(server_final)


def test_scram_client_authenticates_to_the_scram_server() -> None:
    for mechanism in scram.MECHANISMS:
        stored = scram.credential_from_password(mechanism, "pa,ss=word", 4096)
        server = scram.ScramServer(
            mechanism, lambda user, _m, c=stored: c if user == "u,=1" else None
        )
        client = scram.ScramClient(mechanism, "u,=1", "pa,ss=word")
        _exchange(client, server)
        assert server.complete and server.user == "u,=1"


def test_scram_client_with_a_wrong_password_is_refused() -> None:
    stored = scram.credential_from_password("SCRAM-SHA-512", "right")
    server = scram.ScramServer("SCRAM-SHA-512", lambda _u, _m: stored)
    with pytest.raises(scram.ScramError, match="Invalid client credentials"):
        _exchange(scram.ScramClient("SCRAM-SHA-512", "u", "wrong"), server)


def test_scram_client_detects_a_forged_server_signature() -> None:
    client = scram.ScramClient("SCRAM-SHA-256", "u", "pw")
    server = scram.ScramServer(
        "SCRAM-SHA-256", lambda _u, _m: scram.credential_from_password("SCRAM-SHA-256", "pw")
    )
    client.final(server.evaluate(client.first()))
    with pytest.raises(scram.ScramError, match="server signature"):
        client.verify(b"v=" + b"A" * 44)
    with pytest.raises(scram.ScramError, match="server error: invalid-proof"):
        client.verify(b"e=invalid-proof")


def test_links_to_real_sasl_ssl_and_mutual_tls_listeners(pki: Pki, tmp_path) -> None:
    """What every inter-broker channel does: TLS with the listener's CA, then PLAIN; a
    wrong password is an AuthenticationError with the broker's error, in one line. Over
    an SSL listener with ssl.client.auth=required the broker's key store is presented
    (its certificate names the principal), and a peer certificate the trust store does
    not vouch for fails the link."""
    from tests.helpers.broker import BrokerProcess, free_port, wait_for_port

    internal, mtls = free_port(), free_port()
    settings = _internal(
        "SASL_SSL",
        **{
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.connections.max.reauth.ms": "60000",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca),
            "listener.name.mtls.ssl.client.auth": "required",
        },
    )
    settings["listener.security.protocol.map"] += ",MTLS:SSL"
    broker = BrokerProcess(tmp_path / "data", overrides=settings)
    listeners = (
        f"PLAINTEXT://127.0.0.1:{broker.port},INTERNAL://127.0.0.1:{internal},"
        f"MTLS://127.0.0.1:{mtls}"
    )
    broker.overrides["listeners"] = listeners
    broker.start()
    try:
        wait_for_port(mtls, 30, broker.proc)
        good = BrokerConfig({**settings, "listeners": listeners}).inter_broker
        as_mtls = {**settings, "listeners": listeners, "inter.broker.listener.name": "MTLS"}
        mutual = BrokerConfig(as_mtls).inter_broker
        stranger = BrokerConfig(
            {**as_mtls, "ssl.truststore.location": str(pki.other_ca_client_cert)}
        ).inter_broker
        wrong_jaas = (
            f'{PLAIN_MODULE} required username="broker" password="nope" user_broker="x";'
        )
        bad = BrokerConfig(
            {**settings, "listeners": listeners,
             "listener.name.internal.plain.sasl.jaas.config": wrong_jaas}
        ).inter_broker  # fmt: skip

        async def attempts() -> str:
            started = time.monotonic()
            link = await good.connect("127.0.0.1", internal, 10, "test")
            assert link.writer.get_extra_info("ssl_object") is not None
            # KIP-368: renewed at 85% of the session the listener grants, before it ends.
            assert started + 50 <= link.renew_at <= time.monotonic() + 51 and not link.stale
            link.close()
            with pytest.raises(AuthenticationError) as info:
                await bad.connect("127.0.0.1", internal, 10, "test")
            link = await mutual.connect("127.0.0.1", mtls, 10, "test")
            link.close()
            with pytest.raises(AuthenticationError) as untrusted:
                await stranger.connect("127.0.0.1", mtls, 10, "test")
            assert "TLS handshake" in str(untrusted.value)
            assert "CERTIFICATE_VERIFY_FAILED" in str(untrusted.value)
            return str(info.value)

        message = asyncio.run(attempts())
        assert "SASL_AUTHENTICATION_FAILED" in message and "\n" not in message
        assert "nope" not in message
        text = broker.log_text()
        assert "authenticated as User:broker with PLAIN on listener INTERNAL" in text
        assert "on listener MTLS: client certificate principal User:CN=localhost" in text
    finally:
        broker.stop()
