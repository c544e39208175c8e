"""Per-listener security settings, resolved as Kafka resolves them.

A listener's value of a key is ``listener.name.<listener>.<key>`` (listener name in lower
case) when set, else the broker-wide ``<key>``; a SASL mechanism's JAAS entry is
``listener.name.<listener>.<mechanism>.sasl.jaas.config``. Everything is checked when the
configuration is read, so a listener that cannot work stops the broker with one line.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek.broker.security import oauthbearer, principal, scram
from odradek.broker.security.jaas import JaasError, parse_jaas
from odradek.broker.security.tls import build_server_context

__all__ = ["SUPPORTED_MECHANISMS", "ListenerSecurity", "is_security_key", "listener_security"]

SUPPORTED_MECHANISMS = ("PLAIN", *scram.MECHANISMS, oauthbearer.MECHANISM)
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_PREFIXES = ("ssl.", "sasl.")


def is_security_key(name: str) -> bool:
    """Keys this package reads (so they are not reported as accepted-but-unused)."""
    if name.endswith("connections.max.reauth.ms"):
        return True
    if name.startswith("listener.name."):
        name = name.split(".", 3)[3] if name.count(".") >= 3 else ""
        if name.split(".", 1)[0].lower() in (
            "plain", "scram-sha-256", "scram-sha-512", "oauthbearer"
        ):  # fmt: skip
            name = name.split(".", 1)[1]
    return name.startswith(_PREFIXES) and not name.startswith(
        ("sasl.kerberos.", "sasl.oauthbearer.", "sasl.login.", "sasl.server.callback")
    )


@dataclass(slots=True)
class ListenerSecurity:
    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    principal_rules: list[principal.MappingRule] = field(default_factory=list)
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    reauth_ms: int = 0  # connections.max.reauth.ms (KIP-368); 0: sessions never expire
    # OAUTHBEARER's unsecured JWS validator (KIP-255), from its JAAS options.
    oauth_validator: oauthbearer.UnsecuredValidator | None = None

    @property
    def uses_tls(self) -> bool:
        return self.ssl_context is not None

    @property
    def uses_sasl(self) -> bool:
        return bool(self.mechanisms)


def _error(message: str) -> Exception:
    from odradek.broker.config import ConfigError

    return ConfigError(message)


def listener_security(
    listener: str, protocol: str, props: Mapping[str, str], used: set[str] | None = None
) -> ListenerSecurity:
    """Settings of one listener from the raw security keys; ``ConfigError`` if unusable.
    The names of the keys it read are added to ``used``."""
    prefix = f"listener.name.{listener.lower()}."
    used = used if used is not None else set()

    def get(key: str) -> str | None:
        for name in (prefix + key, key):
            if name in props:
                used.add(name)
                return props[name]
        return None

    def _listener_only(mechanism_prefix: str) -> str | None:
        # A mechanism's JAAS entry has no unprefixed fallback on a broker's listener.
        name = mechanism_prefix + "sasl.jaas.config"
        if name in props:
            used.add(name)
        return props.get(name)

    security = ListenerSecurity(listener, protocol)
    if protocol in ("SSL", "SASL_SSL"):
        try:
            security.ssl_context = build_server_context(get)
            security.principal_rules = principal.parse_rules(
                get("ssl.principal.mapping.rules") or "DEFAULT"
            )
        except ValueError as exc:
            raise _error(f"listener {listener} ({protocol}): {exc}") from None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        raw = get("sasl.enabled.mechanisms")
        raw = "GSSAPI" if raw is None else raw  # Kafka's default
        mechanisms = tuple(m.strip().upper() for m in raw.split(",") if m.strip())
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not mechanisms:
            raise _error(
                f"sasl.enabled.mechanisms for listener {listener}: "
                f"{', '.join(unsupported) or '(none)'} not supported "
                f"(supported: {', '.join(SUPPORTED_MECHANISMS)})"
            )
        security.mechanisms = mechanisms
        reauth = (get("connections.max.reauth.ms") or "0").strip()
        if not reauth.lstrip("-").isdigit() or int(reauth) < 0:
            raise _error(f"connections.max.reauth.ms: expected a number >= 0, got {reauth!r}")
        security.reauth_ms = int(reauth)
        if "PLAIN" in mechanisms:
            security.plain_users = _plain_users(listener, _listener_only(f"{prefix}plain."))
        if oauthbearer.MECHANISM in mechanisms:
            security.oauth_validator = _oauth_validator(
                listener, _listener_only(f"{prefix}oauthbearer.")
            )
    return security


def _oauth_validator(listener: str, jaas: str | None) -> oauthbearer.UnsecuredValidator:
    """The unsecured validator's options from the listener's OAUTHBEARER JAAS entry (its
    defaults when there is none)."""
    if jaas is None:
        return oauthbearer.UnsecuredValidator()
    key = f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config"
    try:
        entry = parse_jaas(jaas)
    except JaasError as exc:
        raise _error(f"{key}: {exc}") from None
    if entry.login_module != oauthbearer.LOGIN_MODULE:
        raise _error(
            f"{key}: login module must be {oauthbearer.LOGIN_MODULE}, got {entry.login_module}"
        )
    try:
        return oauthbearer.UnsecuredValidator.from_options(entry.options)
    except ValueError as exc:
        raise _error(f"{key}: {exc}") from None


def _plain_users(listener: str, jaas: str | None) -> dict[str, str]:
    key = f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
    if jaas is None:
        raise _error(
            f"listener {listener} enables SASL PLAIN but {key} is not set "
            f'(e.g. {_PLAIN_MODULE} required user_alice="alice-secret";)'
        )
    try:
        entry = parse_jaas(jaas)
    except JaasError as exc:
        raise _error(f"{key}: {exc}") from None
    if entry.login_module != _PLAIN_MODULE:
        raise _error(f"{key}: login module must be {_PLAIN_MODULE}, got {entry.login_module}")
    return {
        name[len("user_") :]: password
        for name, password in entry.options.items()
        if name.startswith("user_")
    }
