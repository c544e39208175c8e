"""The SASL authentication of one connection, as Kafka's SaslServerAuthenticator runs it.

Before authentication completes a connection may send only ApiVersions (answered as
usual), SaslHandshake (17) and then the mechanism's tokens: raw size-prefixed tokens
after a v0 handshake, SaslAuthenticate (36) requests after a v1 handshake (KIP-152).
Anything else, a second handshake, a token larger than 512 KiB (Kafka's limit before
authentication) or a failed exchange closes the connection; a failed SaslAuthenticate is
answered with SASL_AUTHENTICATION_FAILED first, an unknown mechanism with
UNSUPPORTED_SASL_MECHANISM and the enabled list. Passwords and tokens are never logged.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` > 0 a successful
SaslAuthenticate tells the client its session lifetime; the client authenticates again on
the same connection (SaslHandshake, SaslAuthenticate) before it ends, with the same
mechanism and as the same principal. A request other than SaslHandshake after the session
expired closes the connection, as Kafka does with clients that do not re-authenticate.
"""

from __future__ import annotations

import hmac
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from odradek.broker.security import oauthbearer, scram
from odradek.broker.security.settings import ListenerSecurity
from odradek.protocol.build import build_response
from odradek.protocol.codec import decode_request, encode_response
from odradek.protocol.errors import DecodeError, ErrorCode
from odradek.protocol.headers import RequestHeader

__all__ = ["MAX_TOKEN_BYTES", "SaslGate", "SaslVerdict"]

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
API_VERSIONS = 18
MAX_TOKEN_BYTES = 524_288  # SaslServerAuthenticator.MAX_RECEIVE_SIZE
log = logging.getLogger(__name__)

CredentialLookup = Callable[[str, str], scram.ScramCredential | None]


class _Failed(Exception):
    """Authentication failed; the message is safe to log. ``client_message``: what the
    client is told instead of the generic line (OAUTHBEARER's RFC 7628 JSON error)."""

    def __init__(self, message: str, client_message: str | None = None) -> None:
        super().__init__(message)
        self.client_message = client_message


@dataclass(slots=True)
class SaslVerdict:
    """What the network layer does with a frame: ``passthrough`` (handle it as usual),
    else send ``response`` (if any) and, when ``close`` is set, close after it."""

    passthrough: bool = False
    response: bytes | None = None
    close: str | None = None


class SaslGate:
    def __init__(
        self,
        security: ListenerSecurity,
        lookup: CredentialLookup,
        api_versions: dict[int, tuple[int, int]],
        peer: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._security = security
        self._clock = clock
        self._max_reauth_ms = security.reauth_ms
        # This session's lifetime (0: it never expires): connections.max.reauth.ms, bounded
        # by the credential's own expiry (an OAUTHBEARER token's exp) once authenticated.
        self.reauth_ms = security.reauth_ms
        self._expires_at = float("inf")
        self._reauthenticating = False
        self._lookup = lookup
        self._versions = api_versions
        self._peer = peer
        self._state = "handshake"  # -> "authenticate" | "raw" -> "done"
        self._mechanism = ""
        self._scram: scram.ScramServer | None = None
        self._oauth: oauthbearer.OAuthBearerServer | None = None
        self.principal = ""

    @property
    def authenticated(self) -> bool:
        return self._state == "done"

    def needs(self, frame: bytes | memoryview) -> bool:
        """Whether an authenticated connection's frame must come here: a SaslHandshake
        starting re-authentication, or any request once the session has expired."""
        if self.reauth_ms <= 0:
            return False
        return self._clock() >= self._expires_at or _api_key(frame) == SASL_HANDSHAKE

    def intercept(self, frame: bytes | memoryview) -> SaslVerdict:
        if self._state == "done":
            if _api_key(frame) != SASL_HANDSHAKE:
                return SaslVerdict(
                    close="SASL session expired and the client did not re-authenticate"
                )
            self._state = "handshake"
            self._reauthenticating = True
        if len(frame) > MAX_TOKEN_BYTES:
            return SaslVerdict(close=f"SASL frame of {len(frame)} bytes before authentication")
        if self._state == "raw":
            try:
                token = self._evaluate(bytes(frame))
            except _Failed as exc:
                return SaslVerdict(close=f"SASL authentication failed: {exc}")
            return SaslVerdict(response=struct.pack(">i", len(token)) + token)
        try:
            header, request = decode_request(frame, self._versions)
        except DecodeError as exc:
            return SaslVerdict(close=f"invalid request during SASL authentication: {exc}")
        api_key = header.api_key
        if api_key == API_VERSIONS and self._state == "handshake":
            return SaslVerdict(passthrough=True)
        if api_key == SASL_HANDSHAKE and self._state == "handshake":
            return self._handshake(header, request)
        if api_key == SASL_AUTHENTICATE and self._state == "authenticate":
            return self._authenticate(header, request)
        return SaslVerdict(
            close=f"unexpected request (api key {api_key}) during SASL authentication"
        )

    def _handshake(self, header: RequestHeader, request: object) -> SaslVerdict:
        mechanism = str(getattr(request, "mechanism", ""))
        enabled = list(self._security.mechanisms)
        if mechanism not in enabled:
            response = self._respond(
                header,
                {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled},
            )
            return SaslVerdict(
                response=response, close=f"unsupported SASL mechanism {mechanism[:40]!r}"
            )
        if self._reauthenticating and mechanism != self._mechanism:
            return SaslVerdict(
                close=f"re-authentication must keep mechanism {self._mechanism}, not "
                f"{mechanism[:40]!r}"
            )
        self._mechanism = mechanism
        if mechanism in scram.MECHANISMS:
            self._scram = scram.ScramServer(mechanism, self._lookup)
        elif mechanism == oauthbearer.MECHANISM:
            validator = self._security.oauth_validator or oauthbearer.UnsecuredValidator()
            self._oauth = oauthbearer.OAuthBearerServer(validator)
        self._state = "raw" if header.api_version == 0 else "authenticate"
        return SaslVerdict(
            response=self._respond(header, {"error_code": ErrorCode.none, "mechanisms": enabled})
        )

    def _authenticate(self, header: RequestHeader, request: object) -> SaslVerdict:
        token = bytes(getattr(request, "auth_bytes", b"") or b"")
        try:
            reply = self._evaluate(token)
        except _Failed as exc:
            message = exc.client_message or (
                f"Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self._mechanism}"
            )
            response = self._respond(
                header,
                {
                    "error_code": ErrorCode.sasl_authentication_failed,
                    "error_message": message,
                    "auth_bytes": b"",
                },
            )
            return SaslVerdict(response=response, close=f"SASL authentication failed: {exc}")
        return SaslVerdict(
            response=self._respond(
                header,
                {
                    "error_code": ErrorCode.none,
                    "auth_bytes": reply,
                    "session_lifetime": self.reauth_ms if self.authenticated else 0,
                },
            )
        )

    def _evaluate(self, token: bytes) -> bytes:
        if self._mechanism == "PLAIN":
            user = self._plain(token)
            self._complete(user)
            return b""
        if self._oauth is not None:
            return self._oauthbearer(self._oauth, token)
        assert self._scram is not None
        try:
            reply = self._scram.evaluate(token)
        except scram.ScramError as exc:
            raise _Failed(f"{exc} (user {self._scram.user[:64]!r})") from None
        if self._scram.complete:
            self._complete(self._scram.user)
        return reply

    def _plain(self, token: bytes) -> str:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise _Failed("invalid PLAIN token")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise _Failed("invalid PLAIN token") from None
        if not user:
            raise _Failed("PLAIN token without a user name")
        if authzid and authzid != user:
            raise _Failed("authorization id differs from the user name")
        expected = self._security.plain_users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise _Failed(f"invalid user name or password (user {user[:64]!r})")
        return user

    def _oauthbearer(self, server: oauthbearer.OAuthBearerServer, token: bytes) -> bytes:
        try:
            reply = server.evaluate(token)
        except oauthbearer.OAuthBearerError as exc:
            # After the client acknowledged our JSON error, Kafka's client is told that JSON.
            raise _Failed(str(exc), str(exc) if exc.json else None) from None
        if server.complete:
            self._complete(server.user, credential_ms=server.lifetime_ms())
        return reply

    def _complete(self, user: str, credential_ms: int | None = None) -> None:
        principal = f"User:{user}"
        if self._reauthenticating and principal != self.principal:
            raise _Failed("Cannot change principals during re-authentication")
        self._state = "done"
        self.principal = principal
        # Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: the configured maximum,
        # the credential's remaining lifetime, or the smaller of the two (at least 1 ms:
        # 0 would mean a session that never expires).
        lifetimes = [ms for ms in (self._max_reauth_ms, credential_ms) if ms]
        if credential_ms is not None and credential_ms <= 0:
            lifetimes.append(1)
        self.reauth_ms = max(1, min(lifetimes)) if lifetimes else 0
        if self.reauth_ms > 0:
            self._expires_at = self._clock() + self.reauth_ms / 1000
        log.info(
            "%s %s as %s with %s on listener %s",
            self._peer,
            "re-authenticated" if self._reauthenticating else "authenticated",
            self.principal,
            self._mechanism,
            self._security.listener,
        )

    @staticmethod
    def _respond(header: RequestHeader, values: dict) -> bytes:
        response = build_response(header.api_key, header.api_version, values)
        return encode_response(header, response)


def _api_key(frame: bytes | memoryview) -> int:
    return int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
