"""Principals: ``User:ANONYMOUS``, SASL user names, and TLS client certificate names.

A client certificate's subject is written as Java's ``X500Principal.getName()`` writes it
(RFC 2253: most specific RDN first, ``CN=alice,OU=eng,O=acme,C=US``), then mapped by
``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper): ``DEFAULT`` keeps the
distinguished name, ``RULE:pattern/replacement/[LU]`` rewrites a name the pattern matches
in full; the first rule that matches wins, no match is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ANONYMOUS", "MappingRule", "dn_of_peercert", "map_principal", "parse_rules"]

ANONYMOUS = "User:ANONYMOUS"

# RFC 2253 short names Java uses; other attributes keep their long names.
_SHORT = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def dn_of_peercert(cert: dict) -> str:
    """RFC 2253 name of ``ssl.SSLSocket.getpeercert()``'s subject."""
    rdns = cert.get("subject", ())
    parts = []
    for rdn in reversed(rdns):
        parts.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(parts)


@dataclass(frozen=True, slots=True)
class MappingRule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.default:
            return name
        assert self.pattern is not None
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        # Java's $1 group references.
        out = re.sub(r"\$(\d)", lambda m: match.group(int(m.group(1))) or "", self.replacement)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


_RULE = re.compile(r"\s*RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)\s*(?:,|$)")


def parse_rules(text: str) -> list[MappingRule]:
    """``ssl.principal.mapping.rules``; raises ``ValueError`` naming the bad part."""
    rules: list[MappingRule] = []
    position = 0
    text = text.strip()
    while position < len(text):
        rest = text[position:]
        stripped = rest.lstrip()
        if stripped.startswith("DEFAULT"):
            rules.append(MappingRule(True))
            position += len(rest) - len(stripped) + len("DEFAULT")
            tail = text[position:].lstrip()
            if tail.startswith(","):
                position = len(text) - len(tail) + 1
            elif tail:
                raise ValueError(f"unexpected {tail!r} after DEFAULT")
            continue
        match = _RULE.match(text, position)
        if match is None:
            raise ValueError(f"expected DEFAULT or RULE:pattern/replacement/[LU], got {rest!r}")
        try:
            pattern = re.compile(match.group(1).replace("\\/", "/"))
        except re.error as exc:
            raise ValueError(f"bad pattern {match.group(1)!r}: {exc}") from None
        rules.append(
            MappingRule(False, pattern, match.group(2).replace("\\/", "/"), match.group(3))
        )
        position = match.end()
    return rules or [MappingRule(True)]


def map_principal(dn: str, rules: list[MappingRule]) -> str:
    """``User:<name>`` for a certificate's distinguished name; ``ValueError`` if no rule
    matches (Kafka fails the connection's authentication then)."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return f"User:{name}"
    raise ValueError(f"no ssl.principal.mapping.rules rule matches {dn!r}")
