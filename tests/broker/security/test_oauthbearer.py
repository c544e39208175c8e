"""OAUTHBEARER (RFC 7628, KIP-255): client first message, unsecured JWS validation, the
SASL gate's exchange and session lifetime bounded by the token's expiry (KIP-368)."""

from __future__ import annotations

import base64
import json
import time

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.security.oauthbearer import (
    OAuthBearerError,
    OAuthBearerServer,
    UnsecuredValidator,
    parse_client_first,
)
from odradek.broker.security.sasl import SaslGate
from odradek.broker.security.settings import ListenerSecurity
from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response, encode_request
from odradek.protocol.versions import SUPPORTED

NOW = 1_800_000_000.0  # seconds since the epoch


def jws(claims: dict, header: dict | None = None, signature: str = "") -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header or {'alg': 'none'})}.{part(claims)}.{signature}"


def first(token: str, authzid: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01\x01".encode()


def test_client_first_message() -> None:
    assert parse_client_first(first("a.b.", "al=2Cice")) == ("al,ice", "a.b.")
    extension = b"n,,\x01traceId=123\x01auth=bearer a.b.\x01\x01"
    assert parse_client_first(extension) == ("", "a.b.")
    bad_messages = [
        b"",
        b"n,,\x01auth=Bearer a.b.\x01",
        b"y,,\x01auth=Bearer x\x01\x01",
        b"n,,\x01auth=Basic x\x01\x01",
        b"n,,\x01other=1\x01\x01",
        b"\xff\xfe",
    ]
    for bad in bad_messages:
        with pytest.raises(OAuthBearerError):
            parse_client_first(bad)


def test_validator_follows_kafkas_unsecured_rules() -> None:
    validator = UnsecuredValidator()
    now_ms = NOW * 1000
    good = {"sub": "alice", "iat": NOW - 10, "exp": NOW + 60}
    assert validator.validate(jws(good), now_ms) == ("alice", round((NOW + 60) * 1000))
    refused = [
        "garbage",
        "a.b.c",
        jws(good, {"alg": "HS256"}),
        jws(good, signature="sig"),
        jws({"sub": "alice", "iat": NOW - 10}),  # no exp
        jws({**good, "exp": NOW - 1}),  # expired
        jws({**good, "iat": NOW + 30}),  # issued in the future
        jws({"exp": NOW + 60}),  # no principal
        jws({**good, "sub": 5}),
    ]
    for token in refused:
        with pytest.raises(Exception) as info:
            validator.validate(token, now_ms)
        assert type(info.value).__name__ == "InvalidToken"
    # The allowed clock skew keeps a just-expired token valid.
    skewed = UnsecuredValidator(clock_skew_ms=5000)
    assert skewed.validate(jws({**good, "exp": NOW - 1}), now_ms)[0] == "alice"
    # Another principal claim, and scopes.
    by_name = UnsecuredValidator.from_options(
        {
            "unsecuredValidatorPrincipalClaimName": "name",
            "unsecuredValidatorRequiredScope": "read write",
        }
    )
    scoped = {"name": "bob", "exp": NOW + 60, "scope": ["read", "write", "x"]}
    assert by_name.validate(jws(scoped), now_ms)[0] == "bob"
    with pytest.raises(Exception) as missing:
        by_name.validate(jws({**scoped, "scope": ["read"]}), now_ms)
    assert json.loads(missing.value.json()) == {  # type: ignore[attr-defined]
        "status": "insufficient_scope",
        "scope": "read write",
    }
    with pytest.raises(ValueError, match="ClockSkew"):
        UnsecuredValidator.from_options({"unsecuredValidatorAllowableClockSkewMs": "-1"})


def test_server_answers_rfc7628_error_then_fails_on_the_ack() -> None:
    server = OAuthBearerServer(UnsecuredValidator(), clock=lambda: NOW)
    reply = server.evaluate(first(jws({"sub": "alice", "exp": NOW - 5})))
    assert json.loads(reply) == {"status": "invalid_token"} and not server.complete
    with pytest.raises(OAuthBearerError) as info:
        server.evaluate(b"\x01")
    assert info.value.json and json.loads(str(info.value)) == {"status": "invalid_token"}
    # A different authorization id than the token's principal is refused at once.
    with pytest.raises(OAuthBearerError):
        server.evaluate(first(jws({"sub": "alice", "exp": NOW + 5}), "bob"))
    assert server.evaluate(first(jws({"sub": "alice", "exp": NOW + 5}))) == b""
    assert server.complete and server.user == "alice" and server.lifetime_ms() == 5000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _call(gate: SaslGate, api_key: int, version: int, values: dict) -> object:
    frame = encode_request(version, 1, "t", build_request(api_key, version, values))[4:]
    verdict = gate.intercept(frame)
    assert verdict.response is not None
    return decode_response(api_key, version, verdict.response[4:])[1], verdict.close


def test_gate_session_lifetime_is_bounded_by_the_token() -> None:
    now = time.time()  # tokens are checked against the wall clock
    clock = Clock()
    security = ListenerSecurity(
        "L", "SASL_PLAINTEXT", mechanisms=("OAUTHBEARER",), reauth_ms=60_000,
        oauth_validator=UnsecuredValidator(),
    )  # fmt: skip
    gate = SaslGate(security, lambda *_: None, dict(SUPPORTED), "peer", clock=clock)
    _call(gate, 17, 1, {"mechanism": "OAUTHBEARER"})
    answer, close = _call(gate, 36, 1, {"auth_bytes": first(jws({"sub": "al", "exp": now + 9}))})
    assert close is None and gate.authenticated and gate.principal == "User:al"
    # min(connections.max.reauth.ms = 60 s, the token's 9 s)
    assert 8 <= answer.session_lifetime.total_seconds() <= 9  # type: ignore[attr-defined]
    clock.now += 10
    assert gate.needs(b"\x00\x03")  # expired: the next request must re-authenticate

    # A bad token: the JSON challenge, then SASL_AUTHENTICATION_FAILED and a close.
    bad = SaslGate(security, lambda *_: None, dict(SUPPORTED), "peer", clock=clock)
    _call(bad, 17, 1, {"mechanism": "OAUTHBEARER"})
    challenge, close = _call(bad, 36, 1, {"auth_bytes": first("not-a-token")})
    assert close is None and json.loads(challenge.auth_bytes) == {"status": "invalid_token"}  # type: ignore[attr-defined]
    failed, close = _call(bad, 36, 1, {"auth_bytes": b"\x01"})
    assert failed.error_code == 58 and close is not None  # type: ignore[attr-defined]
    assert "invalid_token" in failed.error_message  # type: ignore[attr-defined]


def test_broker_config_reads_the_validator_options() -> None:
    jaas = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredValidatorRequiredScope="produce" unsecuredValidatorAllowableClockSkewMs="10";'
    )
    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "OAUTHBEARER"}
    config = BrokerConfig(
        {**base, "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": jaas}
    )
    validator = config.listener_security()["SASL_PLAINTEXT"].oauth_validator
    assert validator == UnsecuredValidator("sub", "scope", ("produce",), 10)
    with pytest.raises(ConfigError, match="ClockSkew"):
        BrokerConfig(
            {
                **base,
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": jaas.replace(
                    '"10"', '"ten"'
                ),
            }
        )
