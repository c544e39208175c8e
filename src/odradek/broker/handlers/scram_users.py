"""SaslHandshake/SaslAuthenticate outside authentication, and SCRAM user management
(DescribeUserScramCredentials 50, AlterUserScramCredentials 51, KIP-554).

A SASL connection's handshake is handled by :mod:`odradek.broker.security.sasl` before any
handler runs; one that reaches a handler came on a listener without SASL or after
authentication, and gets ILLEGAL_SASL_STATE as from Kafka. Credentials are kept salted
and hashed in the metadata store, never as passwords.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.broker.requests import RequestContext, ResponseValues
from odradek.broker.security import scram
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.server import KafkaServer

# Kafka's ScramMechanism type bytes.
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_IDS = {name: key for key, name in MECHANISM_IDS.items()}


async def handle_sasl_handshake(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    return ResponseValues({"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []})


async def handle_sasl_authenticate(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    return ResponseValues(
        {
            "error_code": ErrorCode.illegal_sasl_state,
            "error_message": "SaslAuthenticate outside SASL authentication",
            "auth_bytes": b"",
        }
    )


def _store(server: KafkaServer) -> Any:
    # The metadata store, or ZooKeeper in a cluster (zk_user_store).
    store = getattr(server, "scram_store", server.metadata)
    return store if hasattr(store, "user_scram_credentials") else None


async def handle_describe_user_scram_credentials(
    server: KafkaServer, ctx: RequestContext, request: Any
) -> Any:
    store = _store(server)
    users = store.user_scram_credentials() if store is not None else {}
    wanted = [u.name for u in request.users] if request.users else sorted(users)
    seen: dict[str, int] = {}
    for name in wanted:
        seen[name] = seen.get(name, 0) + 1
    results = []
    for name in dict.fromkeys(wanted):
        if seen[name] > 1:
            results.append(_describe_error(name, ErrorCode.duplicate_resource, "listed twice"))
        elif name not in users:
            results.append(
                _describe_error(
                    name,
                    ErrorCode.resource_not_found,
                    f"Attempt to describe a user credential that does not exist: {name}",
                )
            )
        else:
            infos = [
                {
                    "mechanism": _IDS[mechanism],
                    "iterations": scram.ScramCredential.from_text(text).iterations,
                }
                for mechanism, text in sorted(users[name].items())
            ]
            results.append({"user": name, "error_code": ErrorCode.none, "credential_infos": infos})
    return ResponseValues({"error_code": ErrorCode.none, "results": results})


def _describe_error(name: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"user": name, "error_code": code, "error_message": message, "credential_infos": []}


def _check(name: str, mechanism_id: int, iterations: int | None) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    mechanism = MECHANISM_IDS.get(mechanism_id)
    if mechanism is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if iterations is not None:
        low = scram.MECHANISMS[mechanism][1]
        if iterations < low:
            return ErrorCode.unacceptable_credential, f"Too few iterations: {iterations}"
        if iterations > scram.MAX_ITERATIONS:
            return ErrorCode.unacceptable_credential, f"Too many iterations: {iterations}"
    return None


async def handle_alter_user_scram_credentials(
    server: KafkaServer, ctx: RequestContext, request: Any
) -> Any:
    store = _store(server)
    users = store.user_scram_credentials() if store is not None else {}
    changes = [(d.name, d.mechanism, None, None, None) for d in request.deletions] + [
        (u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
        for u in request.upsertions
    ]
    counts: dict[tuple[str, int], int] = {}
    for name, mechanism_id, *_ in changes:
        counts[(name, mechanism_id)] = counts.get((name, mechanism_id), 0) + 1
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for name, mechanism_id, iterations, _salt, salted in changes:
        if name in errors:
            continue
        problem = _check(name, mechanism_id, iterations)
        if problem is None and counts[(name, mechanism_id)] > 1:
            problem = (
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            )
        if problem is None and store is None:
            problem = (
                ErrorCode.unsupported_version,
                "SCRAM credentials are kept by the embedded broker only",
            )
        if (
            problem is None
            and iterations is None
            and MECHANISM_IDS[mechanism_id] not in users.get(name, {})
        ):
            problem = (
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
        if problem is None and iterations is not None and not salted:
            problem = (ErrorCode.unacceptable_credential, "Salted password must not be empty")
        if problem is not None:
            errors[name] = problem
    changed: dict[str, dict[str, str]] = {}
    for name, mechanism_id, iterations, salt, salted in changes:
        if name in errors:
            continue
        mechanisms = changed.setdefault(name, dict(users.get(name, {})))
        mechanism = MECHANISM_IDS[mechanism_id]
        if iterations is None:
            mechanisms.pop(mechanism, None)
        else:
            credential = scram.credential_from_salted_password(mechanism, salt, salted, iterations)
            mechanisms[mechanism] = credential.to_text()
    for name, mechanisms in changed.items():
        store.set_user_scram_credentials(name, mechanisms)
    results = [
        {"user": name, "error_code": errors[name][0], "error_message": errors[name][1]}
        if name in errors
        else {"user": name, "error_code": ErrorCode.none}
        for name in dict.fromkeys(c[0] for c in changes)
    ]
    return ResponseValues({"results": results})
