"""The per-connection SASL gate on its own: the KIP-152 flows and KIP-368 re-authentication
with a controlled clock."""

from __future__ import annotations

import struct

from odradek.broker.security.sasl import SaslGate
from odradek.broker.security.settings import ListenerSecurity
from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response, encode_request
from odradek.protocol.versions import SUPPORTED

METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 3, 17, 36


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _gate(reauth_ms: int = 0, clock: Clock | None = None) -> SaslGate:
    security = ListenerSecurity(
        "SASL_PLAINTEXT",
        "SASL_PLAINTEXT",
        mechanisms=("PLAIN",),
        plain_users={"alice": "a-pw", "bob": "b-pw"},
        reauth_ms=reauth_ms,
    )
    return SaslGate(security, lambda u, m: None, dict(SUPPORTED), "peer", clock or Clock())


def _frame(api_key: int, version: int, values: dict) -> bytes:
    return encode_request(version, 1, "t", build_request(api_key, version, values))[4:]


def _answer(api_key: int, version: int, response: bytes | None) -> object:
    assert response is not None
    size = struct.unpack(">i", response[:4])[0]
    return decode_response(api_key, version, response[4 : 4 + size])[1]


def _login(gate: SaslGate, user: str = "alice", password: str = "a-pw") -> object:
    verdict = gate.intercept(_frame(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    assert verdict.close is None
    token = f"\x00{user}\x00{password}".encode()
    verdict = gate.intercept(_frame(SASL_AUTHENTICATE, 2, {"auth_bytes": token}))
    return verdict


def test_v1_flow_authenticates_and_reports_no_lifetime_without_reauth() -> None:
    gate = _gate()
    verdict = _login(gate)
    assert verdict.close is None and gate.authenticated and gate.principal == "User:alice"
    response = _answer(SASL_AUTHENTICATE, 2, verdict.response)
    assert response.error_code == 0 and response.session_lifetime.total_seconds() == 0
    assert not gate.needs(_frame(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))


def test_session_lifetime_is_reported_and_expiry_closes_without_reauth() -> None:
    clock = Clock()
    gate = _gate(reauth_ms=5000, clock=clock)
    response = _answer(SASL_AUTHENTICATE, 2, _login(gate).response)
    assert response.session_lifetime.total_seconds() == 5
    metadata = _frame(METADATA, 4, {"topics": None, "allow_auto_topic_creation": False})
    assert not gate.needs(metadata)
    clock.now += 5
    assert gate.needs(metadata)
    assert gate.intercept(metadata).close is not None


def test_reauthentication_renews_the_session() -> None:
    clock = Clock()
    gate = _gate(reauth_ms=5000, clock=clock)
    _login(gate)
    clock.now += 4
    handshake = _frame(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert gate.needs(handshake)
    verdict = _login(gate)
    assert verdict.close is None and gate.authenticated
    clock.now += 4  # 8 s after the first login, 4 after the second
    metadata = _frame(METADATA, 4, {"topics": None, "allow_auto_topic_creation": False})
    assert not gate.needs(metadata)


def test_reauthentication_cannot_change_the_principal() -> None:
    gate = _gate(reauth_ms=5000)
    _login(gate)
    verdict = _login(gate, "bob", "b-pw")
    assert verdict.close is not None and "principal" in verdict.close
    assert _answer(SASL_AUTHENTICATE, 2, verdict.response).error_code == 58


def test_wrong_password_and_requests_before_authentication_close() -> None:
    verdict = _login(_gate(), password="nope")
    assert verdict.close is not None
    assert _answer(SASL_AUTHENTICATE, 2, verdict.response).error_code == 58
    assert "nope" not in verdict.close
    metadata = _frame(METADATA, 4, {"topics": None, "allow_auto_topic_creation": False})
    assert _gate().intercept(metadata).close is not None
    assert _gate().intercept(b"\x00").close is not None  # not even a header
