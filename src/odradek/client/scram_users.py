"""SCRAM user credentials for the admin client: DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51), as Kafka's ``Admin.describeUserScramCredentials`` /
``alterUserScramCredentials``. The password never leaves the client: it is salted and
hashed here (PBKDF2, RFC 5802's Hi) and only the salted password is sent.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.client.entities import build_request
from odradek.client.errors import KafkaError

if TYPE_CHECKING:
    from odradek.client.core import KafkaClient

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
# Kafka's ScramMechanism ids and hash functions.
MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
_NAMES = {ident: name for name, (ident, _) in MECHANISMS.items()}


@dataclass(frozen=True)
class Upsertion:
    user: str
    mechanism: str
    password: str
    iterations: int = 4096


async def describe_users(
    client: KafkaClient, users: Sequence[str] | None = None
) -> dict[str, dict[str, int]]:
    """user -> {mechanism: iterations}; every user when ``users`` is None. An unknown user
    raises KafkaError(RESOURCE_NOT_FOUND)."""
    response = await client.request(
        None,
        DESCRIBE_USER_SCRAM_CREDENTIALS,
        lambda v: build_request(
            DESCRIBE_USER_SCRAM_CREDENTIALS,
            v,
            users=None if users is None else [{"name": u} for u in users],
        ),
    )
    if response.error_code:
        raise KafkaError(response.error_code, str(response.error_message or ""))
    out: dict[str, dict[str, int]] = {}
    for result in response.results:
        if result.error_code:
            raise KafkaError(result.error_code, str(result.error_message or result.user))
        out[str(result.user)] = {
            _NAMES.get(int(i.mechanism), str(i.mechanism)): int(i.iterations)
            for i in result.credential_infos
        }
    return out


async def alter_users(
    client: KafkaClient,
    upsertions: Sequence[Upsertion] = (),
    deletions: Sequence[tuple[str, str]] = (),
) -> dict[str, KafkaError | None]:
    """Add/replace and delete credentials; user -> its error, None when it was applied."""
    ups = []
    for item in upsertions:
        ident, algorithm = MECHANISMS[item.mechanism]
        salt = os.urandom(32)
        salted = hashlib.pbkdf2_hmac(algorithm, item.password.encode(), salt, item.iterations)
        ups.append(
            {
                "name": item.user,
                "mechanism": ident,
                "iterations": item.iterations,
                "salt": salt,
                "salted_password": salted,
            }
        )
    dels = [{"name": user, "mechanism": MECHANISMS[m][0]} for user, m in deletions]
    response = await client.request(
        None,
        ALTER_USER_SCRAM_CREDENTIALS,
        lambda v: build_request(ALTER_USER_SCRAM_CREDENTIALS, v, deletions=dels, upsertions=ups),
    )
    return {
        str(r.user): KafkaError(r.error_code, str(r.error_message or r.user))
        if r.error_code
        else None
        for r in response.results
    }
