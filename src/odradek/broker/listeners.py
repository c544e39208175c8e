"""Parsing and validating ``listeners`` and ``advertised.listeners`` as Kafka does.

A listener is ``NAME://host:port``; NAME is a listener name whose security protocol comes
from ``listener.security.protocol.map`` (``NAME:PROTOCOL`` pairs). Names that are
themselves protocol names (``PLAINTEXT``, ``SSL``, ...) map to that protocol by default,
as in Kafka. Rules, with Kafka's checks:

* every listener has a distinct name, and a distinct port (port 0 excepted, and one IPv4
  plus one IPv6 literal may share a port);
* a name without an entry in the map is refused;
* ``advertised.listeners`` names only listeners that exist, never ``0.0.0.0``, and may
  repeat ports (a load balancer in front);
* every protocol is served: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT and SASL_SSL; their
  settings are checked by :mod:`odradek.broker.security.settings`.

Errors are ``ConfigError`` with one line naming the key.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_PROTOCOL_MAP",
    "Endpoint",
    "parse_advertised",
    "parse_listeners",
    "parse_protocol_map",
]

# Kafka's default listener.security.protocol.map.
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's EndPoint pattern: NAME://host:port, an IPv6 host in brackets.
_ENDPOINT = re.compile(r"([^:/]+)://(\[[^\]]*\]|[^:\[\]]*):(-?\d+)")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: its name (upper case, as Kafka normalises it), host, port, protocol."""

    name: str
    host: str
    port: int
    protocol: str


def _error(key: str, raw: str, problem: str) -> Exception:
    from odradek.broker.config import ConfigError

    return ConfigError(f"invalid value {raw!r} for {key}: {problem}")


def parse_protocol_map(raw: str) -> dict[str, str]:
    """``listener.security.protocol.map`` as ``{LISTENER_NAME: PROTOCOL}``."""
    key = "listener.security.protocol.map"
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in _PROTOCOLS:
            raise _error(
                key,
                raw,
                f"expected NAME:PROTOCOL pairs with PROTOCOL one of "
                f"{', '.join(_PROTOCOLS)}, got {item!r}",
            )
        if name in mapping:
            raise _error(key, raw, f"listener name {name} is mapped twice")
        mapping[name] = protocol
    return mapping


def _parse_list(key: str, raw: str, protocols: dict[str, str]) -> list[Endpoint]:
    endpoints = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        match = _ENDPOINT.fullmatch(item)
        if not match:
            raise _error(
                key, raw, f"expected PLAINTEXT://host:port or NAME://host:port, got {item!r}"
            )
        name = match.group(1).strip().upper()
        port = int(match.group(3))
        if not 0 <= port <= 65535:
            raise _error(key, raw, f"port {port} out of range")
        protocol = protocols.get(name)
        if protocol is None:
            raise _error(
                key,
                raw,
                f"no security protocol defined for listener {name} "
                f"(add {name}:PLAINTEXT to listener.security.protocol.map)",
            )
        host = match.group(2).strip("[]")
        endpoints.append(Endpoint(name, host, port, protocol))
    if not endpoints:
        raise _error(key, raw, "expected at least one NAME://host:port")
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise _error(key, raw, "each listener must have a different name")
    return endpoints


def _is_ip(host: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(host).version == version
    except ValueError:
        return False


def _check_ports(key: str, raw: str, endpoints: list[Endpoint]) -> None:
    by_port: dict[int, list[Endpoint]] = {}
    for endpoint in endpoints:
        if endpoint.port != 0:  # port 0 picks a free port: never a clash
            by_port.setdefault(endpoint.port, []).append(endpoint)
    for port, sharing in by_port.items():
        if len(sharing) == 1:
            continue
        first, second = (e.host for e in sharing[:2])
        mixed = (_is_ip(first, 4) and _is_ip(second, 6)) or (_is_ip(first, 6) and _is_ip(second, 4))
        if len(sharing) > 2 or not mixed:
            raise _error(
                key,
                raw,
                f"each listener must have a different port unless exactly "
                f"one has an IPv4 address and the other an IPv6 address "
                f"(port {port})",
            )


def parse_listeners(raw: str, protocols: dict[str, str]) -> list[Endpoint]:
    """The ``listeners`` value, validated."""
    endpoints = _parse_list("listeners", raw, protocols)
    _check_ports("listeners", raw, endpoints)
    return endpoints


def parse_advertised(
    raw: str, protocols: dict[str, str], listeners: list[Endpoint]
) -> list[Endpoint]:
    """``advertised.listeners``, validated against ``listeners``; empty means the same.

    A listener left out of a non-empty ``advertised.listeners`` is advertised as it is
    bound (Kafka would leave it out of Metadata answered on it; a lone broker stays
    reachable this way).
    """
    if not raw.strip():
        return list(listeners)
    key = "advertised.listeners"
    advertised = _parse_list(key, raw, protocols)
    bound = {e.name for e in listeners}
    for endpoint in advertised:
        if endpoint.name not in bound:
            raise _error(
                key,
                raw,
                f"listener {endpoint.name} is not in listeners ({', '.join(sorted(bound))})",
            )
        if endpoint.host in ("0.0.0.0", "::"):
            raise _error(key, raw, f"cannot advertise the non-routable address {endpoint.host}")
    named = {e.name: e for e in advertised}
    return [named.get(e.name, e) for e in listeners]
