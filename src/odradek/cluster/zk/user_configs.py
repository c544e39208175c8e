"""Client quotas and SCRAM credentials in ZooKeeper, where ZooKeeper-mode Kafka keeps them.

``/config/users/<user>`` holds a user's quotas *and* its SCRAM credentials
(``{"version":1,"config":{"producer_byte_rate":"1024","SCRAM-SHA-256":"salt=...,
stored_key=...,server_key=...,iterations=4096"}}``), ``/config/users/<user>/clients/<id>``
a (user, client id) pair's quotas, ``/config/clients/<id>`` a client id's; ``<default>``
is the default entity. Names are sanitized as Kafka's ``Sanitizer`` does (URL-encoded).
Every write is followed by a ``/config/changes`` notification naming the entity (e.g.
``users/alice/clients/app``) so every broker re-reads it. Calls block (kazoo).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, unquote

from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import decode_config_entity
from odradek.cluster.zk.paths import CONFIG_TYPE_CLIENT, CONFIG_TYPE_USER, config_entity

DEFAULT = "<default>"
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

Entity = dict[str, str | None]  # {"user": name | None (<default>), "client-id": ...}
Quotas = list[tuple[Entity, dict[str, float]]]


def sanitize(name: str | None) -> str:
    return DEFAULT if name is None else quote(name, safe="").replace("*", "%2A")


def desanitize(name: str) -> str | None:
    return None if name == DEFAULT else unquote(name)


def _location(entity: Entity) -> tuple[str, str]:
    """(entity type, name path under it) of a quota entity."""
    if "user" in entity:
        name = sanitize(entity["user"])
        if "client-id" in entity:
            name += f"/clients/{sanitize(entity['client-id'])}"
        return CONFIG_TYPE_USER, name
    return CONFIG_TYPE_CLIENT, sanitize(entity["client-id"])


def _config(zk: ZkClient, entity_type: str, name: str) -> dict[str, str]:
    """An entity's config; ``{}`` for a znode without data (the parent ``users/<u>`` that
    ZooKeeper made for a ``users/<u>/clients/<c>`` entity)."""
    path = config_entity(entity_type, name)
    found = zk._get(path)
    if found is None or not found[0]:
        return {}
    return decode_config_entity(found[0], f"config {path}")


def read_all(zk: ZkClient) -> tuple[Quotas, dict[str, dict[str, str]]]:
    """Every quota entity with its values, and every user's SCRAM credentials."""
    quotas: Quotas = []
    scram: dict[str, dict[str, str]] = {}

    def add(entity: Entity, config: Mapping[str, str]) -> None:
        values = {k: float(v) for k, v in config.items() if k not in SCRAM_KEYS}
        if values:
            quotas.append((entity, values))

    for user in zk._children(f"/config/{CONFIG_TYPE_USER}"):
        config = _config(zk, CONFIG_TYPE_USER, user)
        name = desanitize(user)
        add({"user": name}, config)
        credentials = {k: v for k, v in config.items() if k in SCRAM_KEYS}
        if credentials and name is not None:
            scram[name] = credentials
        for client in zk._children(f"/config/{CONFIG_TYPE_USER}/{user}/clients"):
            pair = _config(zk, CONFIG_TYPE_USER, f"{user}/clients/{client}")
            add({"user": name, "client-id": desanitize(client)}, pair)
    for client in zk._children(f"/config/{CONFIG_TYPE_CLIENT}"):
        add({"client-id": desanitize(client)}, _config(zk, CONFIG_TYPE_CLIENT, client))
    return quotas, scram


def write_quotas(zk: ZkClient, entity: Entity, values: Mapping[str, float]) -> None:
    """Replace the entity's quota keys (SCRAM credentials in the same znode stay)."""
    entity_type, name = _location(entity)
    config = {k: v for k, v in _config(zk, entity_type, name).items() if k in SCRAM_KEYS}
    # Kafka writes LONG quotas without a fraction ("1024"), DOUBLE ones as Java prints them.
    config.update({k: str(int(v)) if v == int(v) else str(v) for k, v in values.items()})
    zk.change_entity_config(entity_type, name, config)


def write_scram(zk: ZkClient, user: str, mechanisms: Mapping[str, str]) -> None:
    """Replace the user's SCRAM credentials (its quotas stay)."""
    name = sanitize(user)
    config = {
        k: v for k, v in _config(zk, CONFIG_TYPE_USER, name).items() if k not in SCRAM_KEYS
    }
    config.update(mechanisms)
    zk.change_entity_config(CONFIG_TYPE_USER, name, config)
