"""TLS and SASL for odradek's client, configured with the Java client's property names.

:class:`ClientSecurity` is read from a client properties file (``--command-config`` of the
CLI, as Kafka's tools take one) or built directly:

* ``security.protocol``: ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``;
* ``sasl.mechanism``: ``PLAIN`` (default), ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, with the
  user and password from ``sasl.jaas.config`` (``... required username="u" password="p";``)
  or librdkafka's ``sasl.username`` / ``sasl.password``;
* ``ssl.truststore.location`` (or ``ssl.ca.location``): PEM CA certificates to trust
  (without it, the system's); ``ssl.keystore.location`` (or ``ssl.certificate.location``
  and ``ssl.key.location``) with ``ssl.key.password``: a PEM client certificate and key for
  mutual TLS; ``ssl.endpoint.identification.algorithm`` empty turns host name checks off
  (Kafka's default is ``https``: checked); ``ssl.truststore.type`` / ``ssl.keystore.type``
  may only say ``PEM`` (the files are read as PEM; JKS and PKCS12 stores are refused).

:data:`SECURITY_KEYS` lists every key read here; any other key of a properties file has no
effect on the connection (the CLI warns about those, config_names.py).

A connection authenticates as Kafka's clients do (KIP-152): ApiVersions, then SaslHandshake
v1 naming the mechanism, then SaslAuthenticate requests carrying the mechanism's tokens.
A refused login is :class:`~odradek.client.errors.KafkaError` SASL_AUTHENTICATION_FAILED
with the broker's message. Passwords are never put in messages or logs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = {"PLAIN": None, "SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
# Every key from_properties reads (test_command_config checks it against the code).
SECURITY_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.ca.location",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)


class SecurityConfigError(ValueError):
    """A client security setting that cannot be used (one line, for the CLI)."""


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    username: str = ""
    password: str = field(default="", repr=False)
    ssl_context: ssl.SSLContext | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """From Java client properties; unknown keys are left to the caller."""
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(
                f"security.protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}"
            )
        mechanism = props.get("sasl.mechanism", "PLAIN").strip().upper()
        if mechanism not in MECHANISMS:
            raise SecurityConfigError(
                f"sasl.mechanism must be one of {', '.join(MECHANISMS)}, not {mechanism!r}"
            )
        username = props.get("sasl.username", "")
        password = props.get("sasl.password", "")
        jaas = props.get("sasl.jaas.config")
        if jaas:
            options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(jaas)}
            username = options.get("username", username)
            password = options.get("password", password)
        if protocol.startswith("SASL_") and not username:
            raise SecurityConfigError(
                "SASL needs a user: sasl.jaas.config with username=... password=..."
            )
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = _ssl_context(props)
        return cls(protocol, mechanism, username, password, context)

    def exchange(self) -> SaslExchange:
        """A new exchange for one connection's authentication."""
        return SaslExchange(self.sasl_mechanism, self.username, self.password)


def _ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        kind = props.get(key, "PEM").strip().upper()
        if kind != "PEM":
            raise SecurityConfigError(f"{key}={kind}: odradek reads PEM files only")
    cafile = props.get("ssl.truststore.location") or props.get("ssl.ca.location") or None
    try:
        context = ssl.create_default_context(cafile=cafile)
        certificate = props.get("ssl.keystore.location") or props.get("ssl.certificate.location")
        if certificate:
            key = props.get("ssl.key.location") or certificate
            context.load_cert_chain(certificate, key, props.get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(f"TLS settings: {exc}") from None
    if props.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
        context.check_hostname = False
    return context


class SaslExchange:
    """The client side of one SASL exchange: ``respond(challenge)`` until ``done``."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._algorithm = MECHANISMS[mechanism]
        self._step = 0
        self._nonce = secrets.token_urlsafe(18)
        self._client_first_bare = ""
        self._server_signature = b""
        self.done = False

    def respond(self, challenge: bytes) -> bytes | None:
        """The next token to send (None: nothing more to send)."""
        if self._algorithm is None:  # PLAIN: one message, authzid empty
            self.done = True
            if self._step:
                return None
            self._step = 1
            return b"\0" + self._username.encode() + b"\0" + self._password.encode()
        return self._scram(challenge)

    def _scram(self, challenge: bytes) -> bytes | None:
        algorithm = self._algorithm
        assert algorithm is not None
        if self._step == 0:
            self._step = 1
            name = self._username.replace("=", "=3D").replace(",", "=2C")
            self._client_first_bare = f"n={name},r={self._nonce}"
            return b"n,," + self._client_first_bare.encode()
        if self._step == 1:
            self._step = 2
            server_first = challenge.decode()
            attributes = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
            nonce, salt, iterations = attributes["r"], attributes["s"], int(attributes["i"])
            if not nonce.startswith(self._nonce):
                raise ValueError("SCRAM: the server's nonce does not extend ours")
            salted = hashlib.pbkdf2_hmac(
                algorithm, self._password.encode(), base64.b64decode(salt), iterations
            )
            client_key = hmac.new(salted, b"Client Key", algorithm).digest()
            stored_key = hashlib.new(algorithm, client_key).digest()
            without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
            auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
            signature = hmac.new(stored_key, auth_message, algorithm).digest()
            proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
            server_key = hmac.new(salted, b"Server Key", algorithm).digest()
            self._server_signature = hmac.new(server_key, auth_message, algorithm).digest()
            return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        # server-final: check that the broker knew the password too
        self.done = True
        text = challenge.decode()
        if not text.startswith("v=") or not hmac.compare_digest(
            base64.b64decode(text[2:]), self._server_signature
        ):
            raise ValueError("SCRAM: the broker's signature does not match")
        return None
