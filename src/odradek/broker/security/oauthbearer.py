"""SASL OAUTHBEARER (RFC 7628, KIP-255) with Kafka's unsecured JWS validator, for tests.

The client's first message is ``n,[a=<authzid>],`` (the GS2 header), then ``\\x01``-separated
``key=value`` pairs, one of them ``auth=Bearer <token>``, and a final ``\\x01``. The token
is an unsecured JWS (``alg: none``, empty signature): base64url header and claims, as
Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler`` accepts them. Its JAAS options:

* ``unsecuredValidatorPrincipalClaimName`` (default ``sub``): the claim naming the
  principal (``User:<value>``);
* ``unsecuredValidatorScopeClaimName`` (default ``scope``) and
  ``unsecuredValidatorRequiredScope`` (space-separated): every required scope must be in
  the token's scope claim (a JSON list, or one string that is one scope);
* ``unsecuredValidatorAllowableClockSkewMs`` (default 0) for ``exp`` and ``iat``.

``exp`` is required; an expired token, one issued in the future or not before its expiry,
is invalid. An invalid token is answered as RFC 7628 says: a JSON error
(``{"status":"invalid_token"}``, or ``insufficient_scope`` with the required scope) as the
server challenge; the client acknowledges with ``\\x01`` and the exchange fails. A first
message that does not parse fails at once. The token's expiry bounds the session
(KIP-368): the session lifetime is ``min(connections.max.reauth.ms, exp - now)``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["MECHANISM", "OAuthBearerError", "OAuthBearerServer", "UnsecuredValidator"]

MECHANISM = "OAUTHBEARER"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_SEP = "\x01"
_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>(?:[^=,\x01]|=2C|=3D)+))?,\x01"  # GS2 header, then kvsep
    r"(?P<pairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01"  # key=value kvsep ... kvsep
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


class OAuthBearerError(Exception):
    """The exchange failed; the message is safe to log (never the token itself).
    ``json``: the message is the RFC 7628 error the client acknowledged (Kafka tells the
    client that one, and a generic line for anything else)."""

    def __init__(self, message: str, json: bool = False) -> None:
        super().__init__(message)
        self.json = json


class InvalidToken(Exception):
    """The token did not validate: RFC 7628's status (and required scope) go back."""

    def __init__(self, description: str, scope: str | None = None) -> None:
        super().__init__(description)
        self.scope = scope

    def json(self) -> bytes:
        body: dict[str, str] = {
            "status": "insufficient_scope" if self.scope is not None else "invalid_token"
        }
        if self.scope is not None:
            body["scope"] = self.scope
        return json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class UnsecuredValidator:
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> UnsecuredValidator:
        """From the JAAS options; ``ValueError`` for a clock skew that is not a number."""
        skew = (options.get("unsecuredValidatorAllowableClockSkewMs") or "0").strip()
        if not skew.lstrip("-").isdigit() or int(skew) < 0:
            raise ValueError(
                f"unsecuredValidatorAllowableClockSkewMs must be a number >= 0, not {skew!r}"
            )
        return cls(
            (options.get("unsecuredValidatorPrincipalClaimName") or "").strip() or "sub",
            (options.get("unsecuredValidatorScopeClaimName") or "").strip() or "scope",
            tuple((options.get("unsecuredValidatorRequiredScope") or "").split()),
            int(skew),
        )

    def validate(self, token: str, now_ms: float) -> tuple[str, int]:
        """The principal name and expiry (ms since the epoch) of a valid token."""
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("Unsecured JWS compact serializations must have 3 parts")
        header, claims = _decode(parts[0]), _decode(parts[1])
        if header.get("alg") != "none":
            raise InvalidToken("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise InvalidToken("Unsecured JWS must not contain a digital signature")
        exp = claims.get("exp")
        if not _is_number(exp):
            raise InvalidToken("No expiration time in JWT")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"Required claim missing or not a string: {self.principal_claim}")
        exp_ms = round(float(exp) * 1000)
        iat = claims.get("iat")
        if iat is not None:
            if not _is_number(iat):
                raise InvalidToken("The iat claim had the incorrect type")
            iat_ms = round(float(iat) * 1000)
            if iat_ms > now_ms + self.clock_skew_ms:
                raise InvalidToken("The Issued At value is after now plus the allowed skew")
            if iat_ms >= exp_ms:
                raise InvalidToken("The Issued At value is not before the Expiration Time")
        if now_ms - self.clock_skew_ms >= exp_ms:
            raise InvalidToken("The token has expired")
        scope = self._scope(claims.get(self.scope_claim))
        missing = [s for s in self.required_scope if s not in scope]
        if missing:
            raise InvalidToken(
                f"The provided scope was missing required scope {missing[0]!r}",
                scope=" ".join(self.required_scope),
            )
        return principal, exp_ms

    @staticmethod
    def _scope(value: object) -> set[str]:
        if isinstance(value, str):
            return {value.strip()} if value.strip() else set()  # one string is one scope
        if isinstance(value, list):
            return {str(v) for v in value}
        return set()


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _decode(part: str) -> dict[str, object]:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError):
        raise InvalidToken("malformed Base64 URL encoded value or JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken("malformed JSON")
    return value


def parse_client_first(message: bytes) -> tuple[str, str]:
    """(authorization id, token) of RFC 7628's client first message."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message") from None
    match = _FIRST.fullmatch(text)
    if match is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message")
    pairs = dict(
        pair.split("=", 1) for pair in match.group("pairs").split(_SEP) if pair
    )
    auth = pairs.get("auth")
    if auth is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    found = _AUTH.fullmatch(auth)
    if found is None or found.group("scheme").lower() != "bearer":
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: invalid 'auth'")
    authzid = (match.group("authzid") or "").replace("=2C", ",").replace("=3D", "=")
    return authzid, found.group("token")


class OAuthBearerServer:
    """One connection's OAUTHBEARER exchange, driven like ``scram.ScramServer``."""

    def __init__(
        self, validator: UnsecuredValidator, clock: Callable[[], float] = time.time
    ) -> None:
        self._validator = validator
        self._clock = clock
        self._error: bytes | None = None  # the JSON error sent, awaiting the client's ack
        self.complete = False
        self.user = ""
        self.expires_at_ms = 0  # the token's exp

    def evaluate(self, message: bytes) -> bytes:
        if self._error is not None and message == _SEP.encode():
            raise OAuthBearerError(self._error.decode(), json=True)
        self._error = None
        authzid, token = parse_client_first(message)
        try:
            principal, exp_ms = self._validator.validate(token, self._clock() * 1000)
        except InvalidToken as exc:
            self._error = exc.json()
            return self._error
        if authzid and authzid != principal:
            raise OAuthBearerError(
                "the authorization id differs from the token's principal name"
            )
        self.complete = True
        self.user = principal
        self.expires_at_ms = exp_ms
        return b""

    def lifetime_ms(self) -> int:
        """Milliseconds the token remains valid (0 when already expired)."""
        return max(0, round(self.expires_at_ms - self._clock() * 1000))
