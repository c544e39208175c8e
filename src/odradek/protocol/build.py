"""Build kio entities of any version from plain dicts.

kio generates one frozen dataclass per (API, version), each with only the fields that
version has, and typed leaves (``ErrorCode``, ``timedelta`` for ``*_ms`` durations,
``UUID``). Handlers would otherwise need a branch per version. Instead a handler
describes its answer once as nested dicts and lists, and :func:`build` fits it to the
requested version's class: fields the version lacks are dropped, fields the dict lacks
get a neutral default, and leaf values are converted to the types kio's writers expect.

Reading works the other way with plain ``getattr(entity, name, default)``.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from odradek.protocol import interbroker

_ZERO_UUID = uuid.UUID(int=0)


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    kind: str  # "entities", "entity", "list", "scalar"
    target: Any  # nested class, or the scalar type
    optional: bool
    has_default: bool


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        optional = False
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            optional = len(args) < len(typing.get_args(hint))
            hint = args[0]
            origin = typing.get_origin(hint)
        has_default = (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        if origin is tuple:
            inner = typing.get_args(hint)[0]
            kind = "entities" if dataclasses.is_dataclass(inner) else "list"
            plans.append(_FieldPlan(field.name, kind, inner, optional, has_default))
        elif dataclasses.is_dataclass(hint):
            plans.append(_FieldPlan(field.name, "entity", hint, optional, has_default))
        else:
            plans.append(_FieldPlan(field.name, "scalar", hint, optional, has_default))
    return tuple(plans)


def _convert_scalar(value: Any, target: Any) -> Any:
    if value is None:
        return None
    if isinstance(target, type):
        if issubclass(target, ErrorCode):
            return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
        if issubclass(target, datetime.timedelta):
            if isinstance(value, datetime.timedelta):
                return value
            return datetime.timedelta(milliseconds=int(value))
        if issubclass(target, datetime.datetime):
            if isinstance(value, datetime.datetime):
                return value
            return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)
        if issubclass(target, uuid.UUID):
            return value if isinstance(value, uuid.UUID) else uuid.UUID(value)
    return value


def _default(plan: _FieldPlan) -> Any:
    if plan.optional:
        return None
    if plan.kind in ("entities", "list"):
        return ()
    if plan.kind == "entity":
        return build(plan.target, {})
    target = plan.target
    if isinstance(target, type):
        if issubclass(target, ErrorCode):
            return ErrorCode.none
        if issubclass(target, bool):
            return False
        if issubclass(target, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(target, uuid.UUID):
            return _ZERO_UUID
        if issubclass(target, int):
            return 0
        if issubclass(target, str):
            return ""
        if issubclass(target, bytes):
            return b""
    return None


@cache
def _names_in_any_version(cls: type) -> frozenset[str]:
    """Field names that the class of this name has in any version of its API.

    A key outside this set is a typo (kio drops Kafka's ``_ms`` suffix from durations, for
    one), and silently dropping it would send a default instead: fail loudly instead.
    """
    from kio.schema.index import api_key_map, schema_name_map

    api_key = getattr(cls, "__api_key__", None)
    names: set[str] = {f.name for f in dataclasses.fields(cls)}
    if api_key is not None and int(api_key) in interbroker.INTERBROKER_VERSIONS:
        return frozenset(names | _interbroker_names(cls, int(api_key)))
    if api_key is None or int(api_key) not in api_key_map:
        return frozenset(names)
    entity_type = EntityType.response if "response" in cls.__module__ else EntityType.request
    for version in schema_name_map[api_key_map[int(api_key)]]:
        try:
            module = load_payload_module(int(api_key), version, entity_type)
        except Exception:  # a version kio lists without this entity type
            continue
        other = getattr(module, cls.__name__, None)
        if other is not None and dataclasses.is_dataclass(other):
            names.update(f.name for f in dataclasses.fields(other))
    return frozenset(names)


def _interbroker_names(cls: type, api_key: int) -> set[str]:
    low, high = interbroker.INTERBROKER_VERSIONS[api_key]
    entity_type = getattr(cls, "__type__", None)
    names: set[str] = set()
    for version in range(low, high + 1):
        if entity_type is EntityType.request:
            other = interbroker.request_class(api_key, version)
        elif entity_type is EntityType.response:
            other = interbroker.response_class(api_key, version)
        else:  # a nested struct: any version's field names of the same struct name
            return _interbroker_nested_names(cls, api_key)
        names.update(f.name for f in dataclasses.fields(other))
    return names


def _interbroker_nested_names(cls: type, api_key: int) -> set[str]:
    low, high = interbroker.INTERBROKER_VERSIONS[api_key]
    names: set[str] = set()
    for version in range(low, high + 1):
        for top in (interbroker.request_class, interbroker.response_class):
            for nested in _nested_classes(top(api_key, version)):
                if nested.__name__ == cls.__name__:
                    names.update(f.name for f in dataclasses.fields(nested))
    return names


def _nested_classes(cls: type) -> list[type]:
    found = []
    for plan in _plan(cls):
        if plan.kind in ("entities", "entity"):
            found.append(plan.target)
            found.extend(_nested_classes(plan.target))
    return found


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """An instance of kio entity ``cls`` filled from ``values`` (see module docstring)."""
    kwargs: dict[str, Any] = {}
    known = _names_in_any_version(cls)
    for key in values:
        if key not in known:
            raise KeyError(f"{cls.__name__} has no field {key!r} in any version")
    for plan in _plan(cls):
        if plan.name not in values:
            if not plan.has_default:
                kwargs[plan.name] = _default(plan)
            continue
        value = values[plan.name]
        if value is None and plan.kind != "scalar":
            kwargs[plan.name] = None if plan.optional else _default(plan)
        elif plan.kind == "entities":
            kwargs[plan.name] = tuple(
                item if isinstance(item, plan.target) else build(plan.target, item)
                for item in value
            )
        elif plan.kind == "entity":
            kwargs[plan.name] = (
                value if isinstance(value, plan.target) else build(plan.target, value)
            )
        elif plan.kind == "list":
            kwargs[plan.name] = tuple(_convert_scalar(v, plan.target) for v in value)
        else:
            kwargs[plan.name] = _convert_scalar(value, plan.target)
    return cls(**kwargs)


@cache
def _top_level_class(api_key: int, api_version: int, entity_type: EntityType) -> type:
    if api_key in interbroker.INTERBROKER_VERSIONS:
        if entity_type is EntityType.request:
            return interbroker.request_class(api_key, api_version)
        return interbroker.response_class(api_key, api_version)
    module = load_payload_module(api_key, api_version, entity_type)
    for name in dir(module):
        obj = getattr(module, name)
        if (
            isinstance(obj, type)
            and dataclasses.is_dataclass(obj)
            and getattr(obj, "__type__", None) is entity_type
        ):
            return obj
    raise LookupError(f"kio has no {entity_type.name} class for api {api_key} v{api_version}")


def response_class(api_key: int, api_version: int) -> type:
    """The top-level kio response class for (api_key, api_version)."""
    return _top_level_class(api_key, api_version, EntityType.response)


def request_class(api_key: int, api_version: int) -> type:
    """The top-level kio request class for (api_key, api_version)."""
    return _top_level_class(api_key, api_version, EntityType.request)


def build_response(api_key: int, api_version: int, values: Mapping[str, Any]) -> Any:
    return build(response_class(api_key, api_version), values)


def build_request(api_key: int, api_version: int, values: Mapping[str, Any]) -> Any:
    return build(request_class(api_key, api_version), values)
