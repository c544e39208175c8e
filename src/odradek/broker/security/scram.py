"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer runs it.

Credentials are stored salted and hashed, never as passwords: ``salt``, ``stored_key`` =
H(HMAC(SaltedPassword, "Client Key")), ``server_key`` = HMAC(SaltedPassword, "Server Key")
and ``iterations``, written as Kafka writes them in ZooKeeper
(``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "MECHANISMS",
    "MAX_ITERATIONS",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramServer",
    "credential_from_password",
    "credential_from_salted_password",
]

# Mechanism name -> hashlib name and Kafka's minimum iterations.
MECHANISMS = {"SCRAM-SHA-256": ("sha256", 4096), "SCRAM-SHA-512": ("sha512", 4096)}
MAX_ITERATIONS = 16384  # Kafka's upper bound in AlterUserScramCredentials
MECHANISMS_MIN_ITERATIONS = 4096


class ScramError(Exception):
    """The exchange failed; the message is safe to send (it holds no secret)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(","))
        return cls(
            base64.b64decode(fields["salt"]),
            base64.b64decode(fields["stored_key"]),
            base64.b64decode(fields["server_key"]),
            int(fields["iterations"]),
        )


def _hmac(algorithm: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, algorithm).digest()


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    algorithm = MECHANISMS[mechanism][0]
    client_key = _hmac(algorithm, salted_password, b"Client Key")
    stored_key = hashlib.new(algorithm, client_key).digest()
    server_key = _hmac(algorithm, salted_password, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def credential_from_password(
    mechanism: str, password: str, iterations: int = 4096, salt: bytes | None = None
) -> ScramCredential:
    algorithm = MECHANISMS[mechanism][0]
    salt = salt if salt is not None else os.urandom(32)
    salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"invalid SCRAM attribute {part[:20]!r}")
        out[part[0]] = part[2:]
    return out


def _unescape_name(name: str) -> str:
    if re_bad := [p for p in name.split("=")[1:] if not p.startswith(("2C", "3D"))]:
        raise ScramError(f"invalid escape in user name ({len(re_bad)} bad)")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange: ``evaluate`` the client-first then the client-final message."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str, str], ScramCredential | None],
        server_nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.mechanism = mechanism
        self._algorithm = MECHANISMS[mechanism][0]
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._state = "first"
        self.user = ""
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""
        self._gs2 = ""

    @property
    def complete(self) -> bool:
        return self._state == "done"

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if self._state == "first":
            return self._client_first(text)
        if self._state == "final":
            return self._client_final(text)
        raise ScramError("SCRAM exchange already complete")

    def _client_first(self, text: str) -> bytes:
        parts = text.split(",", 2)
        if (
            len(parts) != 3
            or parts[0] not in ("n", "y")
            or (parts[1] and not parts[1].startswith("a="))
        ):
            raise ScramError("invalid SCRAM client-first message (channel binding unsupported)")
        self._gs2 = f"{parts[0]},{parts[1]},"
        bare = parts[2]
        attributes = _attributes(bare)
        if "n" not in attributes or "r" not in attributes or not attributes["r"]:
            raise ScramError("SCRAM client-first message lacks n= or r=")
        self.user = _unescape_name(attributes["n"])
        credential = self._lookup(self.user, self.mechanism)
        if credential is None:
            self._state = "failed"
            raise ScramError("Authentication failed: Invalid user credentials")
        self._credential = credential
        self._first_bare = bare
        self._nonce = attributes["r"] + self._server_nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        self._state = "failed"
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("SCRAM client-final message lacks p=")
        attributes = _attributes(without_proof)
        # Kafka 3.8.1+/3.9 accept a nonce that ends with ours: librdkafka before 2.6.1
        # repeats the client nonce in front of it (librdkafka #4895). Our fresh server
        # part is still required, so an old exchange cannot be replayed.
        if not attributes.get("r", "").endswith(self._nonce):
            raise ScramError("Invalid client nonce in the final client message.")
        expected_binding = base64.b64encode(self._gs2.encode()).decode()
        if attributes.get("c") != expected_binding:
            raise ScramError("Invalid channel binding in the final client message.")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("invalid SCRAM proof encoding") from None
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._algorithm, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self._algorithm, client_key).digest(), credential.stored_key
        ):
            raise ScramError("Invalid client credentials")
        server_signature = _hmac(self._algorithm, credential.server_key, auth_message)
        self._state = "done"
        return b"v=" + base64.b64encode(server_signature)


def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """The client side of one exchange (a broker authenticating to another):
    :meth:`first` gives the client-first message, :meth:`final` answers the server-first
    message, :meth:`verify` checks the server's signature (the server proves it knows
    the credential too)."""

    def __init__(
        self,
        mechanism: str,
        user: str,
        password: str,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self._algorithm = MECHANISMS[mechanism][0]
        self._password = password
        self._first_bare = f"n={_escape_name(user)},r={nonce()}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("SCRAM server-first message is not UTF-8") from None
        attributes = _attributes(text)
        nonce = attributes.get("r", "")
        ours = self._first_bare.split(",r=", 1)[1]
        if not nonce.startswith(ours) or len(nonce) == len(ours):
            raise ScramError("SCRAM server nonce does not extend ours")
        try:
            salt = base64.b64decode(attributes["s"], validate=True)
            iterations = int(attributes["i"])
        except (KeyError, ValueError):
            raise ScramError("SCRAM server-first message lacks s= or i=") from None
        if not MECHANISMS_MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError(f"SCRAM iteration count {iterations} out of range")
        salted = hashlib.pbkdf2_hmac(self._algorithm, self._password.encode(), salt, iterations)
        client_key = _hmac(self._algorithm, salted, b"Client Key")
        stored_key = hashlib.new(self._algorithm, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = _hmac(self._algorithm, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(self._algorithm, salted, b"Server Key")
        self._server_signature = _hmac(self._algorithm, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        if text.startswith("e="):
            raise ScramError(f"SCRAM server error: {text[2:80]}")
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not self._server_signature or not hmac.compare_digest(server_final, expected):
            raise ScramError("SCRAM server signature does not match (not the real broker?)")
