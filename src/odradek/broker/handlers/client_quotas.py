"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546.

Entities are ``user`` and ``client-id`` (a null name is ``<default>``); the ``ip`` entity
(connection rates) is not served. Quotas live in the metadata store and are applied to the
broker's :class:`~odradek.broker.client_quotas.ClientQuotaManager` as soon as they change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.broker.client_quotas import (
    CLIENT_ID,
    QUOTA_KEYS,
    USER,
    entity_key,
    validate_value,
)
from odradek.broker.requests import RequestContext, ResponseValues
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.server import KafkaServer

ENTITY_TYPES = (USER, CLIENT_ID)
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _filter_error(components: Any) -> str | None:
    seen: set[str] = set()
    for component in components:
        kind = str(component.entity_type)
        if kind not in ENTITY_TYPES:
            return f"Custom entity type '{kind}' not supported"
        if kind in seen:
            return f"Duplicate {kind} filter component entity type"
        seen.add(kind)
        match_type = int(component.match_type)
        if match_type == MATCH_EXACT and component.match is None:
            return f"Exact match for entity type {kind} needs a name"
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return f"Unexpected match type: {match_type}"
    return None


def _matches(entity: dict[str, str | None], components: Any, strict: bool) -> bool:
    wanted = {str(c.entity_type): c for c in components}
    if strict and set(entity) != set(wanted):
        return False
    for kind, component in wanted.items():
        if kind not in entity:
            return False
        name = entity[kind]
        match_type = int(component.match_type)
        if match_type == MATCH_EXACT and name != component.match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
        if match_type == MATCH_SPECIFIED and name is None:
            return False
    return True


async def handle_describe_client_quotas(
    server: KafkaServer, ctx: RequestContext, request: Any
) -> Any:
    problem = _filter_error(request.components)
    if problem is not None:
        return ResponseValues(
            {
                "throttle_time": 0,
                "error_code": ErrorCode.invalid_request,
                "error_message": problem,
                "entries": None,
            }
        )
    entries = [
        {
            "entity": [
                {"entity_type": kind, "entity_name": name} for kind, name in entity.items()
            ],
            "values": [{"key": k, "value": float(v)} for k, v in sorted(values.items())],
        }
        for entity, values in await server.client_quota_store.entities()
        if _matches(entity, request.components, bool(request.strict))
    ]
    values = {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None}
    return ResponseValues({**values, "entries": entries})


def _entity_error(entity: Any) -> str | None:
    kinds = [str(e.entity_type) for e in entity]
    if not kinds:
        return "Invalid empty client quota entity"
    for kind in kinds:
        if kind not in ENTITY_TYPES:
            return f"Unhandled client quota entity type: {kind}"
    if len(set(kinds)) != len(kinds):
        return "Duplicate entity type in client quota entity"
    for e in entity:
        if e.entity_name is not None and not str(e.entity_name):
            return f"Empty {e.entity_type} name in client quota entity"
    return None


async def handle_alter_client_quotas(
    server: KafkaServer, ctx: RequestContext, request: Any
) -> Any:
    store = server.client_quota_store
    current = {entity_key(e): v for e, v in await store.entities()}
    results = []
    for entry in request.entries:
        entity = {str(e.entity_type): e.entity_name for e in entry.entity}
        problem = _entity_error(entry.entity)
        values = dict(current.get(entity_key(entity), {})) if problem is None else {}
        keys_seen: set[str] = set()
        for op in entry.ops if problem is None else ():
            key = str(op.key)
            if key in keys_seen:
                problem = f"Duplicate quota key {key} for one entity"
                break
            keys_seen.add(key)
            if op.remove:
                if key not in QUOTA_KEYS:
                    problem = f"Invalid configuration key {key}"
                    break
                values.pop(key, None)
                continue
            problem = validate_value(key, float(op.value))
            if problem is not None:
                break
            values[key] = float(op.value)
        if problem is None and not request.validate_only:
            await store.set(entity, values)
            current[entity_key(entity)] = values
        results.append(
            {
                "error_code": ErrorCode.invalid_request if problem else ErrorCode.none,
                "error_message": problem,
                "entity": [
                    {"entity_type": str(e.entity_type), "entity_name": e.entity_name}
                    for e in entry.entity
                ],
            }
        )
    return ResponseValues({"throttle_time": 0, "entries": results})
