"""Error responses for any request, built from kio's schema (Kafka's ``getErrorResponse``).

When a handler fails, the client still needs a well-formed response of the right API and
version, and it needs the error where it looks for it: Produce and Fetch clients read
per-partition error codes, Metadata clients per-topic ones, group clients the top-level
one. ``error_response`` therefore:

* sets every ``error_code`` field, at every level, to the given code;
* mirrors the request's topics / partitions / groups / resources into the response
  arrays (``Produce.topic_data[].partition_data[]`` -> ``responses[].partition_responses[]``,
  ``DeleteGroups.groups_names[]`` -> ``results[].group_id`` ...), copying only identity
  fields (names, partition indexes, resource types, member ids);
* fills every other required field with Kafka's "unknown" value: -1 for signed integers
  (offsets, ids, epochs, ports), 0 for unsigned ones and throttle times, ``""`` or null for
  strings, empty arrays, zero UUID.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Sequence
from functools import cache
from typing import Any

from odradek.protocol import schemas
from odradek.protocol.errors import ErrorCode
from odradek.protocol.versions import API_VERSIONS, build_api_versions_response

__all__ = ["error_response"]

# Scalar fields that identify an element and are copied from the request element.
_IDENTITY_FIELDS = frozenset(
    {
        "name",
        "topic",
        "topic_id",
        "group_id",
        "key",
        "key_type",
        "resource_name",
        "resource_type",
        "partition_index",
        "partition",
        "index",
        "member_id",
        "group_instance_id",
        "transactional_id",
    }
)
# A response identity field may come from a request field of another name.
_FIELD_SYNONYMS: dict[str, tuple[str, ...]] = {
    "name": ("name", "topic"),
    "topic": ("topic", "name"),
    "partition_index": ("partition_index", "partition", "index"),
    "index": ("index", "partition_index", "partition"),
    "partition": ("partition", "partition_index", "index"),
}
# Response array field -> request array fields it mirrors, most likely first.
_ARRAY_SOURCES: dict[str, tuple[str, ...]] = {
    "responses": ("topic_data", "topics", "topic_names", "resources"),
    "partition_responses": ("partition_data", "partitions"),
    "partitions": ("partitions", "partition_data", "partition_indexes"),
    "topics": ("topics",),
    "results": ("topics", "groups_names", "resources", "creations"),
    "filter_results": ("filters",),
    "groups": ("groups",),
    "coordinators": ("coordinator_keys",),
    "members": ("members",),
    "results_by_topic_v3_and_below": ("topics", "v3_and_below_topics"),
    "results_by_partition": ("partitions",),
}
# Where a request array holds plain values, which response field receives them.
_PRIMITIVE_KEY_FIELDS = (
    "name",
    "topic",
    "group_id",
    "key",
    "resource_name",
    "partition_index",
    "index",
    "partition",
)
_UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})


def error_response(api_key: int, api_version: int, request: object, error_code: int) -> object:
    """A kio response entity of ``api_key``/``api_version`` reporting ``error_code``.

    ``request`` is the decoded request (used to mirror topics, partitions, groups); pass
    ``None`` when it is not available.
    """
    code = ErrorCode(error_code)
    if api_key == API_VERSIONS:
        return build_api_versions_response(api_version, {}, error_code=code)
    response_type = schemas.response_type(api_key, api_version)
    return _build(response_type, request, code)


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldInfo:
    field: dataclasses.Field[Any]
    kafka_type: str | None
    optional: bool
    is_array: bool
    element: Any  # entity class, primitive class, or None
    has_default: bool
    tagged: bool


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return args[0], True
    return annotation, False


@cache
def _describe(entity_type: type) -> tuple[_FieldInfo, ...]:
    hints = typing.get_type_hints(entity_type)
    described = []
    for field in dataclasses.fields(entity_type):
        annotation, optional = _strip_optional(hints[field.name])
        is_array = typing.get_origin(annotation) is tuple
        element = typing.get_args(annotation)[0] if is_array else annotation
        if is_array:
            element, _ = _strip_optional(element)
        has_default = (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        described.append(
            _FieldInfo(
                field=field,
                kafka_type=field.metadata.get("kafka_type"),
                optional=optional,
                is_array=is_array,
                element=element,
                has_default=has_default,
                tagged="tag" in field.metadata,
            )
        )
    return tuple(described)


def _is_entity(value: Any) -> bool:
    return dataclasses.is_dataclass(value)


def _unknown_value(info: _FieldInfo, code: ErrorCode) -> Any:
    kafka_type = info.kafka_type
    if kafka_type == "error_code":
        return code
    if info.optional and kafka_type in ("string", "bytes", "records", "datetime_i64", "uuid"):
        return None
    if kafka_type in ("int8", "int16", "int32", "int64"):
        return -1
    if kafka_type in _UNSIGNED:
        return 0
    if kafka_type == "bool":
        return False
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "float64":
        return 0.0
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
    raise TypeError(f"no unknown-value rule for kafka type {kafka_type!r}")


def _source_value(source: object, name: str) -> Any:
    for candidate in _FIELD_SYNONYMS.get(name, (name,)):
        if source is not None and hasattr(source, candidate):
            value = getattr(source, candidate)
            if value is not None and not isinstance(value, tuple):
                return value
    return None


def _source_array(source: object, name: str) -> Sequence[Any] | None:
    if source is None:
        return None
    for candidate in _ARRAY_SOURCES.get(name, (name,)):
        value = getattr(source, candidate, None)
        if isinstance(value, tuple):
            return value
    return None


def _from_primitive(entity_type: type, value: Any, code: ErrorCode) -> Any:
    """An element of a response array mirrored from a plain value (a name or index)."""
    infos = _describe(entity_type)
    key_field = None
    for wanted in _PRIMITIVE_KEY_FIELDS:
        for info in infos:
            if info.field.name == wanted and not info.is_array:
                key_field = wanted
                break
        if key_field is not None:
            break
    seeded = {key_field: value} if key_field is not None else {}
    return _build(entity_type, None, code, seeded)


def _build(
    entity_type: type, source: object, code: ErrorCode, seeded: dict[str, Any] | None = None
) -> Any:
    kwargs: dict[str, Any] = {}
    for info in _describe(entity_type):
        name = info.field.name
        if info.tagged:
            continue  # tagged fields are optional by definition; keep their defaults
        if seeded and name in seeded:
            kwargs[name] = seeded[name]
            continue
        if info.kafka_type == "error_code":
            kwargs[name] = code
            continue
        if info.is_array:
            if _is_entity(info.element):
                items = _source_array(source, name)
                if items:
                    kwargs[name] = tuple(
                        _build(info.element, item, code)
                        if _is_entity(item)
                        else _from_primitive(info.element, item, code)
                        for item in items
                    )
                    continue
            if not info.has_default:
                kwargs[name] = ()
            continue
        if name in _IDENTITY_FIELDS:
            value = _source_value(source, name)
            if value is not None and (info.kafka_type != "uuid" or isinstance(value, uuid.UUID)):
                kwargs[name] = value
                continue
        if info.has_default:
            continue
        if _is_entity(info.element):
            kwargs[name] = None if info.optional else _build(info.element, None, code)
            continue
        kwargs[name] = _unknown_value(info, code)
    return entity_type(**kwargs)
