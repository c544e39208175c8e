"""The inter-broker listener, and how this broker connects to that listener elsewhere.

Every broker-to-broker connection (the controller's LeaderAndIsr / UpdateMetadata /
StopReplica channel, replica fetchers, transaction markers, controlled shutdown) goes to
the peer's inter-broker listener and is secured as that listener demands, with Kafka's
keys and checks (KafkaConfig):

* ``inter.broker.listener.name``, or ``security.inter.broker.protocol`` (default PLAINTEXT:
  the listener named after the protocol); setting both is refused;
* in a cluster the listener must be one this broker has;
* over SASL, ``sasl.mechanism.inter.broker.protocol`` (Kafka's default GSSAPI is not
  served here, so it must be set) must be supported and enabled on the listener; the
  credentials are the ``username`` and ``password`` options of the listener's JAAS entry
  for that mechanism, ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (Kafka's
  place), else ``sasl.jaas.config`` (which Kafka ignores on a broker; odradek accepts it);
* over TLS, the listener's ``ssl.*`` keys as a client: the trust store verifies the peer,
  the key store is presented (mutual TLS), ``ssl.endpoint.identification.algorithm``
  checks the host name.

Each problem stops the broker at start-up with one line (``ConfigError``). At run time a
refusal by the peer is an :class:`~odradek.cluster.peer.AuthenticationError` with one line.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_handshake.v1 import request as handshake_v1

from odradek import timeouts
from odradek.broker.listeners import Endpoint
from odradek.broker.security import scram
from odradek.broker.security.jaas import JaasError, parse_jaas
from odradek.broker.security.settings import SUPPORTED_MECHANISMS
from odradek.broker.security.tls import build_client_context
from odradek.cluster.controller.channel import exchange
from odradek.cluster.peer import AuthenticationError, PeerLink

__all__ = ["InterBrokerSecurity", "inter_broker_security"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Renew a SASL session at 85% of its lifetime, as Kafka's clients re-authenticate
# between 85% and 95% of it: never a request on a session the peer considers over.
_RENEW_FRACTION = 0.85


@dataclass(frozen=True)
class InterBrokerSecurity:
    listener: str
    protocol: str
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    def describe(self) -> str:
        what = f"listener {self.listener} ({self.protocol}"
        if self.mechanism:
            what += f", {self.mechanism} as User:{self.username}"
        return what + ")"

    async def connect(self, host: str, port: int, timeout_s: float, client_id: str) -> PeerLink:
        """An open, authenticated link to another broker's inter-broker listener."""
        try:
            reader, writer = await timeouts.wait_for(
                asyncio.open_connection(
                    host,
                    port,
                    ssl=self.ssl_context,
                    server_hostname=host if self.ssl_context is not None else None,
                ),
                timeout_s,
            )
        except ssl.SSLError as exc:
            raise AuthenticationError(
                f"TLS handshake with {host}:{port} on listener {self.listener} failed: "
                f"{exc.reason or exc}"
            ) from None
        link = PeerLink(reader, writer)
        if self.mechanism is None:
            return link
        try:
            lifetime_ms = await timeouts.wait_for(self._authenticate(link, client_id), timeout_s)
        except ssl.SSLError as exc:  # TLS 1.3 reports a refused client certificate late
            link.close()
            raise AuthenticationError(
                f"TLS with {host}:{port} on listener {self.listener} failed: {exc.reason or exc}"
            ) from None
        except AuthenticationError as exc:
            link.close()
            raise AuthenticationError(f"{host}:{port}: {exc}") from None
        except BaseException:
            link.close()
            raise
        if lifetime_ms > 0:
            link.renew_at = time.monotonic() + lifetime_ms / 1000 * _RENEW_FRACTION
        return link

    async def _authenticate(self, link: PeerLink, client_id: str) -> int:
        """SaslHandshake v1 then SaslAuthenticate v2 rounds; the session lifetime (ms)."""
        assert self.mechanism is not None
        handshake = await exchange(
            link.reader,
            link.writer,
            SASL_HANDSHAKE,
            1,
            handshake_v1.SaslHandshakeRequest(mechanism=self.mechanism),
            1,
            client_id,
        )
        if handshake.error_code != ErrorCode.none:
            raise AuthenticationError(
                f"listener {self.listener} refused SASL mechanism {self.mechanism}: "
                f"{handshake.error_code.name.upper()} (enabled there: "
                f"{', '.join(handshake.mechanisms) or 'none'})"
            )
        rounds = iter(range(2, 10))

        async def round_trip(token: bytes) -> Any:
            response = await exchange(
                link.reader,
                link.writer,
                SASL_AUTHENTICATE,
                2,
                authenticate_v2.SaslAuthenticateRequest(auth_bytes=token),
                next(rounds),
                client_id,
            )
            if response.error_code != ErrorCode.none:
                raise AuthenticationError(
                    f"authentication as User:{self.username} with {self.mechanism} on "
                    f"listener {self.listener} failed: {response.error_code.name.upper()}"
                    + (f" ({response.error_message})" if response.error_message else "")
                )
            return response

        if self.mechanism == "PLAIN":
            token = f"\0{self.username}\0{self.password}".encode()
            return _millis((await round_trip(token)).session_lifetime)
        client = scram.ScramClient(self.mechanism, self.username, self.password)
        try:
            server_first = await round_trip(client.first())
            final = await round_trip(client.final(bytes(server_first.auth_bytes)))
            client.verify(bytes(final.auth_bytes))
        except scram.ScramError as exc:
            raise AuthenticationError(
                f"SCRAM with listener {self.listener} failed: {exc}"
            ) from None
        return _millis(final.session_lifetime)


def _millis(value: Any) -> int:
    """kio gives the session lifetime as a timedelta."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def _error(message: str) -> Exception:
    from odradek.broker.config import ConfigError

    return ConfigError(message)


def inter_broker_security(
    props: Mapping[str, str],
    listeners: Sequence[Endpoint],
    protocol_map: Mapping[str, str],
    *,
    cluster: bool,
    used: set[str] | None = None,
) -> InterBrokerSecurity | None:
    """The inter-broker settings from the raw keys (``props``: every key given), checked;
    None for a lone broker whose (default) inter-broker listener does not exist."""
    used = used if used is not None else set()
    name = (props.get("inter.broker.listener.name") or "").strip()
    raw_protocol = props.get("security.inter.broker.protocol")
    if name and raw_protocol is not None:
        raise _error(
            "Only one of inter.broker.listener.name and security.inter.broker.protocol "
            "should be set."
        )
    if name:
        name = name.upper()
        protocol = protocol_map.get(name)
        if protocol is None:
            raise _error(
                f"Listener with name {name} defined in inter.broker.listener.name not found "
                "in listener.security.protocol.map."
            )
    else:
        protocol = (raw_protocol or "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise _error(
                f"security.inter.broker.protocol: {protocol!r} is not one of "
                f"{', '.join(PROTOCOLS)}"
            )
        if raw_protocol is not None:
            used.add("security.inter.broker.protocol")
        name = protocol
    if name not in {e.name for e in listeners}:
        if not cluster and not props.get("inter.broker.listener.name") and raw_protocol is None:
            return None  # a lone broker never connects to another
        raise _error(
            f"inter.broker.listener.name must be a listener name defined in "
            f"advertised.listeners. The valid options based on currently configured "
            f"listeners are {','.join(e.name for e in listeners)}"
        )
    prefix = f"listener.name.{name.lower()}."

    def get(key: str) -> str | None:
        for full in (prefix + key, key):
            if full in props:
                used.add(full)
                return props[full]
        return None

    ssl_context = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            ssl_context = build_client_context(get)
        except ValueError as exc:
            raise _error(f"inter-broker listener {name} ({protocol}), as a client: {exc}") from None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return InterBrokerSecurity(name, protocol, ssl_context=ssl_context)
    key = "sasl.mechanism.inter.broker.protocol"
    mechanism = (props.get(key) or "GSSAPI").strip().upper()
    used.add(key)
    if mechanism not in SUPPORTED_MECHANISMS:
        raise _error(
            f"{key}={mechanism} is not supported (inter-broker listener {name} uses "
            f"{protocol}; set it to one of {', '.join(SUPPORTED_MECHANISMS)})"
        )
    enabled = [m.strip().upper() for m in (get("sasl.enabled.mechanisms") or "").split(",")]
    if mechanism not in enabled:
        raise _error(
            f"{key} must be included in sasl.enabled.mechanisms when SASL is used for "
            f"inter-broker communication ({mechanism} is not enabled on listener {name})"
        )
    username, password = _credentials(name, mechanism, props, used)
    return InterBrokerSecurity(name, protocol, mechanism, username, password, ssl_context)


def _credentials(
    listener: str, mechanism: str, props: Mapping[str, str], used: set[str]
) -> tuple[str, str]:
    specific = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    key = specific if specific in props else "sasl.jaas.config"
    module = _LOGIN_MODULES[mechanism]
    example = f'{module} required username="broker" password="...";'
    if key not in props:
        raise _error(
            f"inter-broker listener {listener} uses SASL {mechanism} but {specific} is not set "
            f"(e.g. {example})"
        )
    used.add(key)
    try:
        entry = parse_jaas(props[key])
    except JaasError as exc:
        raise _error(f"{key}: {exc}") from None
    if entry.login_module != module:
        raise _error(f"{key}: login module must be {module} for {mechanism}")
    username, password = entry.options.get("username"), entry.options.get("password")
    if not username or password is None:
        raise _error(
            f"{key}: the inter-broker credentials are its username and password options "
            f"(e.g. {example})"
        )
    return username, password
