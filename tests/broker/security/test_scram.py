"""SCRAM server against RFC 7677's SCRAM-SHA-256 example and the failure paths."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from odradek.broker.security.scram import (
    ScramCredential,
    ScramError,
    ScramServer,
    credential_from_password,
)

SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def _server(password: str = "pencil", mechanism: str = "SCRAM-SHA-256") -> ScramServer:
    credential = credential_from_password(mechanism, password, 4096, SALT)
    users = {("user", mechanism): credential}
    return ScramServer(mechanism, lambda u, m: users.get((u, m)), lambda: SERVER_NONCE)


def test_rfc7677_example_exchange() -> None:
    server = _server()
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.user == "user"


def _proof(password: str, auth_message: bytes) -> str:
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), SALT, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client_key).digest()
    signature = hmac.new(stored, auth_message, "sha256").digest()
    return base64.b64encode(
        bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    ).decode()


def test_wrong_password_is_refused() -> None:
    server = _server()
    first = server.evaluate(b"n,,n=user,r=abc").decode()
    without_proof = f"c=biws,r=abc{SERVER_NONCE}"
    auth = f"n=user,r=abc,{first},{without_proof}".encode()
    with pytest.raises(ScramError, match="Invalid client credentials"):
        server.evaluate(f"{without_proof},p={_proof('not-pencil', auth)}".encode())
    assert not server.complete


@pytest.mark.parametrize(
    "message",
    [
        b"n,,n=nobody,r=abc",  # unknown user
        b"p=tls-unique,,n=user,r=abc",  # channel binding
        b"n,,r=abc",  # no user
        b"garbage",
        b"\xff\xfe",
        b"n,,n=us=ZZer,r=abc",  # bad escape
    ],
)
def test_bad_client_first_messages(message: bytes) -> None:
    with pytest.raises(ScramError):
        _server().evaluate(message)


def test_final_with_a_different_nonce_is_refused() -> None:
    server = _server()
    server.evaluate(b"n,,n=user,r=abc")
    with pytest.raises(ScramError, match="nonce"):
        server.evaluate(b"c=biws,r=other,p=AAAA")


def test_librdkafka_before_2_6_1_repeating_the_client_nonce_is_accepted() -> None:
    # librdkafka < 2.6.1 sends r=<client nonce><client nonce><server nonce>; Kafka 3.9 and
    # odradek accept a nonce that ends with the server's (the fresh part).
    server = _server()
    first = server.evaluate(b"n,,n=user,r=abc").decode()
    without_proof = f"c=biws,r=abcabc{SERVER_NONCE}"
    auth = f"n=user,r=abc,{first},{without_proof}".encode()
    final = server.evaluate(f"{without_proof},p={_proof('pencil', auth)}".encode())
    assert final.startswith(b"v=") and server.complete


def test_credentials_round_trip_through_kafkas_text_form() -> None:
    credential = credential_from_password("SCRAM-SHA-512", "pw", 8192, b"salt")
    text = credential.to_text()
    assert text.startswith("salt=c2FsdA==,stored_key=") and text.endswith(",iterations=8192")
    assert ScramCredential.from_text(text) == credential
    assert "pw" not in text.split(",")[0]
