"""Specimen requests of every API and version, encoded with every field's position known.

Used by the nullability tests (tests/protocol/test_nullability.py) and by the fuzzer
(bench/fuzz_broker.py). ``specimen(cls)`` builds an entity in which every array holds one
element, every string and bytes field is non-empty and every nullable field is non-null,
so every field is present on the wire. ``encode(entity, overrides)`` writes it exactly as
kio's writer does (a test checks that), except that any field, addressed by its ``path``
from the top entity (field names and array indices), can be replaced by raw bytes, and
unknown tagged fields can be added to any flexible entity. Replacing a whole field rather
than patching bytes keeps every enclosing tagged-field size consistent.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._serialize import get_writer
from kio.serial.writers import write_int8, write_unsigned_varint

from odradek.protocol.build import request_class
from odradek.protocol.headers import encode_request_header

Path = tuple[str | int, ...]


@dataclasses.dataclass(frozen=True)
class Site:
    """One field of an encoded entity."""

    path: Path
    kafka_type: str
    shape: str  # "array" (of entities or leaves), "entity", or "leaf"
    nullable: bool  # per this version's schema (nullableVersions)
    flexible: bool  # compact encodings (lengths as unsigned varints, + 1)
    tagged: bool


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    kafka_type: str
    shape: str
    inner: Any  # entity class for "array"/"entity" of entities, else None
    nullable: bool
    tag: int | None
    default: Any


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], True
    return annotation, False


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    result = []
    for field in dataclasses.fields(cls):
        annotation, nullable = _strip_optional(hints[field.name])
        tag = field.metadata.get("tag")
        kafka_type = field.metadata.get("kafka_type", "entity")
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif tag is not None:
            default = get_tagged_field_default(field)
        else:
            default = dataclasses.MISSING
        if typing.get_origin(annotation) is tuple:
            element, _ = _strip_optional(typing.get_args(annotation)[0])
            inner = element if dataclasses.is_dataclass(element) else None
            result.append(_Field(field.name, kafka_type, "array", inner, nullable, tag, default))
        elif dataclasses.is_dataclass(annotation):
            result.append(
                _Field(field.name, kafka_type, "entity", annotation, nullable, tag, default)
            )
        else:
            result.append(_Field(field.name, kafka_type, "leaf", None, nullable, tag, default))
    return tuple(result)


_LEAF_SAMPLES: dict[str, Any] = {
    "int8": 1,
    "int16": 1,
    "int32": 1,
    "int64": 1,
    "uint8": 1,
    "uint16": 1,
    "uint32": 1,
    "uint64": 1,
    "float64": 1.5,
    "bool": True,
    "string": "s",
    "bytes": b"b",
    "records": b"r",
    "uuid": uuid.UUID(int=1),
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(milliseconds=1),
    "timedelta_i64": datetime.timedelta(milliseconds=1),
    "datetime_i64": datetime.datetime.fromtimestamp(1, tz=datetime.UTC),
}


def leaf_sample(kafka_type: str) -> Any:
    return _LEAF_SAMPLES[kafka_type]


def specimen(cls: type, elements: int = 1) -> Any:
    """An instance of ``cls`` with every field present and non-null (see module doc)."""
    values = {}
    for f in _fields(cls):
        if f.shape == "array":
            values[f.name] = tuple(
                specimen(f.inner, elements) if f.inner else leaf_sample(f.kafka_type)
                for _ in range(elements)
            )
        elif f.shape == "entity":
            values[f.name] = specimen(f.inner, elements)
        else:
            values[f.name] = leaf_sample(f.kafka_type)
    return cls(**values)


def request_specimen(api_key: int, api_version: int, elements: int = 1) -> Any:
    return specimen(request_class(api_key, api_version), elements)


def _leaf_writer(kafka_type: str, flexible: bool, nullable: bool) -> Any:
    return get_writer(kafka_type, flexible, nullable)


def _length(value: int, flexible: bool, legacy_width: int) -> bytes:
    """A length prefix: compact (uvarint of length + 1, 0 for null) or legacy (signed)."""
    if flexible:
        buffer = io.BytesIO()
        write_unsigned_varint(buffer, value + 1)
        return buffer.getvalue()
    return value.to_bytes(legacy_width, "big", signed=True)


def null_encoding(site: Site) -> bytes:
    """The bytes of ``null`` for this field (only meaningful where a null can be written)."""
    if site.shape == "entity":
        return b"\xff"  # nullable struct marker -1 (KIP-893)
    return length_encoding(site, -1)


def length_encoding(site: Site, length: int) -> bytes:
    """A length prefix of ``length`` in this field's format (negative: legacy only)."""
    width = 2 if site.kafka_type == "string" and site.shape == "leaf" else 4
    if site.flexible and length < -1:
        length = -1
    return _length(length, site.flexible, width)


def encode(
    entity: Any,
    overrides: Mapping[Path, bytes] | None = None,
    extra_tags: Mapping[Path, Sequence[tuple[int, bytes]]] | None = None,
) -> bytes:
    """``entity`` encoded as kio would, with fields at ``overrides`` paths replaced by raw
    bytes and ``extra_tags`` ((tag, data) pairs) appended to the tagged fields of the
    entity at each path (``()`` is the top entity)."""
    buffer = io.BytesIO()
    _write_entity(buffer, entity, (), overrides or {}, extra_tags or {})
    return buffer.getvalue()


def _write_entity(
    buffer: io.BytesIO,
    entity: Any,
    path: Path,
    overrides: Mapping[Path, bytes],
    extra: Mapping[Path, Sequence[tuple[int, bytes]]],
) -> None:
    cls = type(entity)
    flexible = bool(cls.__flexible__)
    tagged: list[tuple[int, bytes]] = []
    for f in _fields(cls):
        value = getattr(entity, f.name)
        here = (*path, f.name)
        if f.tag is not None and here not in overrides and value == f.default:
            continue  # kio writes a tagged field only when it differs from its default
        target = io.BytesIO() if f.tag is not None else buffer
        if here in overrides:
            target.write(overrides[here])
        else:
            # kio writes tagged fields with non-nullable writers (their absence is null).
            nullable = f.nullable and f.tag is None
            _write_field(target, f, value, here, flexible, nullable, overrides, extra)
        if f.tag is not None:
            tagged.append((f.tag, target.getvalue()))
    if not flexible:
        return
    tagged.sort(key=lambda pair: pair[0])
    tagged.extend(extra.get(path, ()))
    write_unsigned_varint(buffer, len(tagged))
    for tag, data in tagged:
        write_unsigned_varint(buffer, tag)
        write_unsigned_varint(buffer, len(data))
        buffer.write(data)


def _write_field(
    buffer: io.BytesIO,
    f: _Field,
    value: Any,
    path: Path,
    flexible: bool,
    nullable: bool,
    overrides: Mapping[Path, bytes],
    extra: Mapping[Path, Sequence[tuple[int, bytes]]],
) -> None:
    if f.shape == "array":
        if value is None:
            buffer.write(_length(-1, flexible, 4))
            return
        buffer.write(_length(len(value), flexible, 4))
        for index, item in enumerate(value):
            item_path = (*path, index)
            if item_path in overrides:
                buffer.write(overrides[item_path])
            elif f.inner is not None:
                _write_entity(buffer, item, item_path, overrides, extra)
            else:
                _leaf_writer(f.kafka_type, flexible, False)(buffer, item)
    elif f.shape == "entity":
        if nullable:
            if value is None:
                write_int8(buffer, -1)
                return
            write_int8(buffer, 1)
        _write_entity(buffer, value, path, overrides, extra)
    else:
        _leaf_writer(f.kafka_type, flexible, nullable)(buffer, value)


def sites(entity: Any, path: Path = ()) -> list[Site]:
    """Every field of ``entity`` (recursively, through each array element), in wire order."""
    cls = type(entity)
    flexible = bool(cls.__flexible__)
    found = []
    for f in _fields(cls):
        value = getattr(entity, f.name)
        here = (*path, f.name)
        found.append(Site(here, f.kafka_type, f.shape, f.nullable, flexible, f.tag is not None))
        if value is None:
            continue
        if f.shape == "array" and f.inner is not None:
            for index, item in enumerate(value):
                found.extend(sites(item, (*here, index)))
        elif f.shape == "entity":
            found.extend(sites(value, here))
    return found


def entity_paths(entity: Any, path: Path = ()) -> list[Path]:
    """Paths of ``entity`` and every entity nested in it (targets for ``extra_tags``)."""
    result = [path]
    for f in _fields(type(entity)):
        value = getattr(entity, f.name)
        if value is None:
            continue
        if f.shape == "array" and f.inner is not None:
            for index, item in enumerate(value):
                result.extend(entity_paths(item, (*path, f.name, index)))
        elif f.shape == "entity":
            result.extend(entity_paths(value, (*path, f.name)))
    return result


def value_at(entity: Any, path: Path) -> Any:
    for step in path:
        entity = entity[step] if isinstance(step, int) else getattr(entity, step)
    return entity


def request_frame(
    api_key: int,
    api_version: int,
    body: bytes,
    correlation_id: int = 1,
    client_id: str | None = "specimen",
) -> bytes:
    """A request frame without its size prefix: header for this API version + ``body``."""
    return encode_request_header(api_key, api_version, correlation_id, client_id) + body
