"""``odradek configs`` for ``users`` and ``clients``: client quotas, as kafka-configs.sh.

The entity is a user, a client id, or both (``--entity-type users --entity-name alice``,
``--user alice --client app``, ``--user-defaults``, ``--client-defaults``). ``--alter``
sends one AlterClientQuotas; ``--describe`` one strict DescribeClientQuotas and prints
ConfigCommand's lines::

    Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0
    Quota configs for the default client-id are consumer_byte_rate=2048.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.cli.errors import CliError

if TYPE_CHECKING:
    from odradek.client.admin import Admin

# kafka-configs' entity type -> the quota entity type on the wire.
QUOTA_TYPES = {"users": "user", "clients": "client-id"}
_WIRE_TO_WORD = {"user": "user-principal", "client-id": "client-id"}


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise CliError(f"Invalid value {text!r} for quota {key}: not a number") from None


def _entity_text(entity: dict[str, str | None]) -> str:
    parts = []
    for kind in ("user", "client-id"):
        if kind in entity:
            name = entity[kind]
            word = _WIRE_TO_WORD[kind]
            parts.append(f"the default {word}" if name is None else f"{word} '{name}'")
    return ", ".join(parts)


def _value(value: float) -> str:
    return repr(float(value))  # Java prints doubles as 1024.0


async def describe(admin: Admin, entity: dict[str, str | None]) -> list[str]:
    """Entities named with ``""`` match any name of their type (kafka-configs with an
    entity type and no name)."""
    components = [
        (kind, 2 if name == "" else 1 if name is None else 0, name or None)
        for kind, name in entity.items()
    ]
    found = await admin.describe_client_quotas(components, strict=True)
    out = []
    for matched, values in sorted(found, key=lambda item: sorted(map(str, item[0].items()))):
        quotas = ", ".join(f"{k}={_value(v)}" for k, v in sorted(values.items()))
        out.append(f"Quota configs for {_entity_text(matched)} are {quotas}")
    return out


async def alter(
    admin: Admin,
    entity: dict[str, str | None],
    added: dict[str, str],
    deleted: list[str],
) -> list[str]:
    if any(name == "" for name in entity.values()):
        raise CliError("an entity name must be specified with --alter (or --entity-default)")
    ops: dict[str, float | None] = {k: _number(k, v) for k, v in added.items()}
    ops.update(dict.fromkeys(deleted))
    try:
        await admin.alter_client_quotas(entity, ops)
    except Exception as exc:  # KafkaError: the broker's one-line reason
        raise CliError(f"Error while executing config command: {exc}") from None
    if len(entity) == 1:
        ((kind, name),) = entity.items()
        word = "user" if kind == "user" else "client"
        if name is None:
            return [f"Completed updating default config for {word}s in the cluster."]
        return [f"Completed updating config for {word} {name}."]
    return [f"Completed updating config for {_entity_text(entity)}."]
