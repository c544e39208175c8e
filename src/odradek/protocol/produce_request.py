"""A fast reader for the commonest Produce request: one topic, one partition.

A producer with ``linger.ms=0`` sends one such request per record batch, so the generic
schema walker (:mod:`odradek.protocol.lenient`), at about 20 us per request, was a fifth
of the broker's CPU for it. This reader handles only that shape, with no tagged fields
(what every client sends), and builds the very same kio entities the walker builds, with
the walker's own leaf readers. Anything else (several topics or partitions, tagged
fields, a short or malformed body) returns None and the caller falls back to the walker,
which decides and words every error, so the result of decoding never differs.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from functools import cache
from typing import Any, NamedTuple

from odradek.protocol.headers import RequestHeader, decode_client_id, parse_request_header
from odradek.protocol.lenient import _plan
from odradek.protocol.produce_response import FIRST_FLEXIBLE
from odradek.protocol.versions import PRODUCE

try:
    from odradek.protocol._lone import read_lone as _c_read_lone
except ImportError:  # not built (no compiler at install time): the Python readers only
    _c_read_lone = None

__all__ = ["LoneProduce", "read_lone_produce", "read_lone_request", "read_produce_request"]

_ONE_ELEMENT_LEGACY = b"\x00\x00\x00\x01"
_ONE_ELEMENT_COMPACT = 2  # compact array length: count + 1


def _element_type(entity_type: type, field: str) -> type:
    annotation = typing.get_type_hints(entity_type)[field]
    return typing.get_args(annotation)[0]  # tuple[Element, ...]


@cache
def _layout(entity_type: type) -> tuple[Any, ...] | None:
    """What the reader needs for one ProduceRequest version; None if its fields are not
    the ones this reader knows (a future kio), so the walker is used."""
    regular, _tagged = _plan(entity_type)
    names = [name for name, _ in regular]
    if names != ["transactional_id", "acks", "timeout", "topic_data"]:
        return None
    topic_type = _element_type(entity_type, "topic_data")
    topic_regular, _ = _plan(topic_type)
    if [name for name, _ in topic_regular] != ["name", "partition_data"]:
        return None
    partition_type = _element_type(topic_type, "partition_data")
    partition_regular, _ = _plan(partition_type)
    if [name for name, _ in partition_regular] != ["index", "records"]:
        return None
    if not all(dataclasses.is_dataclass(t) for t in (topic_type, partition_type)):
        return None
    return (
        bool(entity_type.__flexible__),  # type: ignore[attr-defined]
        [reader for _, reader in regular[:3]],
        topic_type,
        topic_regular[0][1],
        partition_type,
        partition_regular[0][1],
        partition_regular[1][1],
    )


def _after_one_element(buffer: Any, position: int, flexible: bool) -> int:
    """The position after an array length saying "one element", or -1 for any other."""
    if flexible:
        return position + 1 if buffer[position] == _ONE_ELEMENT_COMPACT else -1
    return position + 4 if buffer[position : position + 4] == _ONE_ELEMENT_LEGACY else -1


def read_produce_request(entity_type: type, buffer: Any, offset: int) -> Any | None:
    """The request at ``offset`` if it lists one topic with one partition and carries no
    tagged fields; else None (decode it with the generic reader)."""
    layout = _layout(entity_type)
    if layout is None:
        return None
    flexible, (read_txn, read_acks, read_timeout), topic_type, read_name, partition_type, \
        read_index, read_records = layout  # fmt: skip
    try:
        transactional_id, size = read_txn(buffer, offset)
        position = offset + size
        acks, size = read_acks(buffer, position)
        position += size
        timeout, size = read_timeout(buffer, position)
        position += size
        position = _after_one_element(buffer, position, flexible)
        if position < 0:
            return None
        name, size = read_name(buffer, position)
        position += size
        position = _after_one_element(buffer, position, flexible)
        if position < 0:
            return None
        index, size = read_index(buffer, position)
        position += size
        records, size = read_records(buffer, position)
        position += size
        # Flexible: no tagged fields in the partition, the topic or the request.
        if flexible and buffer[position : position + 3] != b"\x00\x00\x00":
            return None
    except Exception:  # malformed: the generic reader raises the error to answer
        return None
    partition = partition_type(index=index, records=records)
    topic = topic_type(name=name, partition_data=(partition,))
    return entity_type(
        transactional_id=transactional_id, acks=acks, timeout=timeout, topic_data=(topic,)
    )


# -- the lone-produce lane --------------------------------------------------------------

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
# The smallest record batch (a v2 header and no records): shorter is never a lone batch.
_SMALLEST_BATCH = 61
# Topic names as sent -> decoded: a producer names the same topic on every request.
_NAMES: dict[bytes, str] = {}
_NAMES_MAX = 4096


class LoneProduce(NamedTuple):
    """A non-transactional Produce request naming one topic and one partition."""

    acks: int
    timeout_ms: int
    topic: str
    partition: int
    records: memoryview  # a writable slice of the frame: offsets are assigned in place


def _uvarint(buffer: Any, position: int) -> tuple[int, int]:
    """A small unsigned varint (at most 4 bytes) and the position after it."""
    value = 0
    for shift in (0, 7, 14, 21):
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
    raise ValueError("varint too long")


def _length(
    buffer: Any, position: int, flexible: bool, legacy: struct.Struct
) -> tuple[int, int]:
    """A string's or bytes' length (-1 for null) and the position after it: compact
    (varint of length + 1) in flexible versions, else ``legacy`` (int16 or int32)."""
    if flexible:
        length, position = _uvarint(buffer, position)
        return length - 1, position
    return legacy.unpack_from(buffer, position)[0], position + legacy.size


def _topic_name(raw: bytes) -> str:
    """A topic name as sent, decoded (UnicodeDecodeError if not UTF-8), through _NAMES."""
    topic = _NAMES.get(raw)
    if topic is None:
        topic = raw.decode("utf-8")
        if len(_NAMES) >= _NAMES_MAX:
            _NAMES.clear()  # bounded: a client may name many topics
        _NAMES[raw] = topic
    return topic


def read_lone_request(frame: memoryview) -> tuple[RequestHeader, LoneProduce] | None:
    """The header and body of a writable frame holding a Produce request of the lone
    shape (see read_lone_produce), in any version; else None. Never raises for a malformed
    frame. The version is not checked against what the broker supports: the caller does.

    The C reader (``_lone.c``) takes the commonest frames in one call; whatever it
    declines goes through parse_request_header and read_lone_produce, which accept the
    same frames with the same fields, and more (tagged fields in the header)."""
    if _c_read_lone is not None:
        found = _c_read_lone(FIRST_FLEXIBLE, frame)
        if found is not None:
            version, correlation_id, client_raw, acks, timeout_ms, topic_raw, partition, \
                start, end = found  # fmt: skip
            try:
                client_id = None if client_raw is None else decode_client_id(client_raw)
                topic = _topic_name(topic_raw)
            except UnicodeDecodeError:  # the Python readers decline it too
                return None
            return (
                RequestHeader(PRODUCE, version, correlation_id, client_id),
                LoneProduce(acks, timeout_ms, topic, partition, frame[start:end]),
            )
    try:
        header, offset = parse_request_header(frame)
    except Exception:  # DecodeError: the generic path answers it
        return None
    if header.api_key != PRODUCE:
        return None
    lone = read_lone_produce(frame, offset, header.api_version >= FIRST_FLEXIBLE)
    return None if lone is None else (header, lone)


def read_lone_produce(frame: memoryview, offset: int, flexible: bool) -> LoneProduce | None:
    """The body at ``offset`` of a writable Produce frame when it is the commonest shape:
    no transactional id, one topic, one partition, a record set that can be a batch, no
    tagged fields and nothing after it. Else None: the caller decodes the frame the
    generic way, which also words every error (this never raises for a malformed body)."""
    try:
        if flexible:
            if frame[offset] != 0:  # compact nullable string: 0 is null
                return None
            position = offset + 1
        else:
            if _INT16.unpack_from(frame, offset)[0] != -1:
                return None
            position = offset + 2
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, position)
        position = _after_one_element(frame, position + 6, flexible)
        if position < 0:
            return None
        length, position = _length(frame, position, flexible, _INT16)
        if length <= 0:
            return None
        raw = bytes(frame[position : position + length])
        position += length
        topic = _NAMES.get(raw)
        if topic is None:
            if len(raw) != length:
                return None
            topic = _topic_name(raw)
        position = _after_one_element(frame, position, flexible)
        if position < 0:
            return None
        partition = _INT32.unpack_from(frame, position)[0]
        position += 4
        length, position = _length(frame, position, flexible, _INT32)
        if length < _SMALLEST_BATCH:
            return None
        end = position + length
        tail = b"\x00\x00\x00" if flexible else b""  # partition, topic, request tags
        if end + len(tail) != len(frame) or frame[end : end + len(tail)] != tail:
            return None
    except (IndexError, ValueError, struct.error):  # short or not UTF-8: the generic way
        return None
    return LoneProduce(acks, timeout_ms, topic, partition, frame[position:end])
