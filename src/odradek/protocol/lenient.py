"""The schema-driven reader every incoming request and response is decoded with.

KIP-482 says a receiver ignores tagged fields it does not know, so that clients can send
newer optional data to older brokers. kio 0.6.5's native reader raises
``KeyError('Unknown tagged field tag: N')`` instead, and real clients do send such fields
(librdkafka 2.16 sends one in Metadata v9 requests). ``read_entity`` walks the same kio
dataclass metadata as kio does (``kafka_type``, ``tag``, optional / tuple annotations),
reads leaves with kio's native primitive readers, and steps over unknown tags by their
declared size. It is slower than kio's native entity reader, but that one trusts array
lengths when it reserves memory: a short hostile request can make it abort the process
(see ``odradek.protocol.codec._read_body``). Here an array grows only as its elements
are actually read from the bytes present.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from contextvars import ContextVar
from functools import cache
from typing import Any

from kio._kio_native import (
    get_reader,
    read_compact_array_length,
    read_datetime_i64,
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_legacy_array_length,
    read_unsigned_varint,
)

__all__ = ["read_entity"]

Reader = Callable[[Any, int], tuple[Any, int]]


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return args[0], True
    return annotation, False


def _read_timestamp_ms(buffer: Any, offset: int) -> tuple[Any, int]:
    """A non-nullable ``datetime_i64``: a UTC datetime, or the plain int when negative.

    Kafka writes -1 for "no time" there (DescribeTransactions' transaction_start_time of
    an id with no open transaction); kio's reader refuses negative timestamps, which made
    a whole valid response undecodable."""
    millis, size = read_int64(buffer, offset)
    if millis < 0:
        return millis, size
    return read_datetime_i64(buffer, offset)


def _array_reader(item: Reader, flexible: bool, nullable: bool, name: str) -> Reader:
    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        if flexible:
            count, used = read_compact_array_length(buffer, offset)
        else:
            count, used = read_legacy_array_length(buffer, offset)
            if count < 0:
                count = None  # Kafka reads every negative length as null
        if count is None:
            if not nullable:
                # Kafka's generated readers throw here and the broker closes the
                # connection; a None would reach handlers that expect a sequence.
                raise ValueError(f"non-nullable field {name} was serialized as null")
            return None, used
        position = offset + used
        items = []
        for _ in range(count):
            value, size = item(buffer, position)
            items.append(value)
            position += size
        return tuple(items), position - offset

    return read


def _entity_reader(entity_type: type, nullable: bool) -> Reader:
    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        position = offset
        if nullable:
            marker, used = read_int8(buffer, position)
            position += used
            if marker < 0:
                return None, position - offset
        entity, end = read_entity(entity_type, buffer, position)
        return entity, end - offset

    return read


# Set by decode_request while it decodes a request frame that is a writable buffer: record
# data is then returned as a writable slice of it (no copy), so the broker can assign
# offsets in place. Otherwise (responses, read-only frames) record data is copied to bytes.
writable_source: ContextVar[memoryview | None] = ContextVar("writable_source", default=None)


# The smallest record batch (v2 header, no records); shorter record sets are not batches.
_SMALLEST_BATCH = 61


def _records_reader(flexible: bool, optional: bool, name: str) -> Reader:
    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        if flexible:
            length, used = read_unsigned_varint(buffer, offset)
            length -= 1  # compact bytes: length + 1, 0 is null
        else:
            length, used = read_legacy_array_length(buffer, offset)
        if length < 0:
            if not optional:
                raise ValueError(f"non-nullable field {name} was serialized as null")
            return None, used
        start = offset + used
        end = start + length
        if end > len(buffer):
            raise ValueError(f"record set of {length} bytes runs past the end of the request")
        source = writable_source.get()
        if source is not None and length >= _SMALLEST_BATCH:
            data: bytes | memoryview = source[start:end]
        else:
            # A memoryview costs 184 bytes: a request listing a million partitions with
            # empty or runt record sets (too short to be a batch, refused anyway) would
            # need a million of them. Those are copied (the empty one is shared).
            data = bytes(buffer[start:end]) if length else b""
        return data, used + length

    return read


def _string_reader(kafka_type: str, flexible: bool, nullable: bool, name: str) -> Reader:
    """A string or bytes field, with Kafka's handling of a null length: every negative
    legacy length (kio accepts only -1) or a compact length of 0 is null, and null in a
    field that is not nullable in this version is an error naming the field."""
    reader = get_reader(kafka_type, flexible, nullable)
    length_reader = (
        read_unsigned_varint if flexible else read_int16 if kafka_type == "string" else read_int32
    )
    null = 0 if flexible else -1

    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        length, used = length_reader(buffer, offset)
        if length > null:
            return reader(buffer, offset)
        if not nullable:
            raise ValueError(f"non-nullable field {name} was serialized as null")
        return None, used

    return read


@cache
def _plan(entity_type: type) -> tuple[list[tuple[str, Reader]], dict[int, tuple[str, Reader]]]:
    flexible = bool(entity_type.__flexible__)  # type: ignore[attr-defined]
    hints = typing.get_type_hints(entity_type)
    regular: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    for field in dataclasses.fields(entity_type):
        tag = field.metadata.get("tag")
        # Nullability per version comes from kio's annotations (``X | None`` where Kafka's
        # schema has nullableVersions covering this version), tagged fields included: a
        # tagged field's absence gives its default, but one that is present may be null
        # only if the schema says so.
        annotation, optional = _strip_optional(hints[field.name])
        reader: Reader
        if typing.get_origin(annotation) is tuple:
            element, _ = _strip_optional(typing.get_args(annotation)[0])
            if dataclasses.is_dataclass(element):
                item = _entity_reader(element, nullable=False)  # type: ignore[arg-type]
            elif field.metadata["kafka_type"] in ("string", "bytes"):
                # Elements of a string array are never nullable in Kafka's schemas.
                item = _string_reader(field.metadata["kafka_type"], flexible, False, field.name)
            else:
                item = get_reader(field.metadata["kafka_type"], flexible, False)
            reader = _array_reader(item, flexible, optional, field.name)
        elif dataclasses.is_dataclass(annotation):
            reader = _entity_reader(annotation, nullable=optional)  # type: ignore[arg-type]
        elif field.metadata["kafka_type"] == "records":
            reader = _records_reader(flexible, optional, field.name)
        else:
            kafka_type = field.metadata["kafka_type"]
            if kafka_type in ("string", "bytes"):
                reader = _string_reader(kafka_type, flexible, optional, field.name)
            elif kafka_type == "datetime_i64" and not optional:
                reader = _read_timestamp_ms
            else:
                reader = get_reader(kafka_type, flexible, optional)
        if tag is None:
            regular.append((field.name, reader))
        else:
            tagged[int(tag)] = (field.name, reader)
    return regular, tagged


def read_entity(entity_type: type, buffer: Any, offset: int) -> tuple[Any, int]:
    """Read one ``entity_type`` at ``offset``; return ``(entity, offset after it)``.

    Raises what kio's primitive readers raise on malformed input (``kio.serial.errors``
    ``DecodeError`` subclasses, ``ValueError``).
    """
    regular, tagged = _plan(entity_type)
    values: dict[str, Any] = {}
    position = offset
    for name, reader in regular:
        value, size = reader(buffer, position)
        values[name] = value
        position += size
    if entity_type.__flexible__:  # type: ignore[attr-defined]
        count, size = read_unsigned_varint(buffer, position)
        position += size
        for _ in range(count):
            tag, size = read_unsigned_varint(buffer, position)
            position += size
            length, size = read_unsigned_varint(buffer, position)
            position += size
            if position + length > len(buffer):
                raise ValueError(f"tagged field {tag} runs past the end of the buffer")
            known = tagged.get(tag)
            if known is not None:
                name, reader = known
                values[name], _used = reader(buffer, position)
            position += length
    return entity_type(**values), position
