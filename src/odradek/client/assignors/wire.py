"""The consumer protocol's embedded bytes, encoded and decoded exactly as the Java client does.

JoinGroup member metadata of protocol type ``consumer`` is a *ConsumerProtocolSubscription*
and SyncGroup member assignments are a *ConsumerProtocolAssignment* (Kafka's
``clients/src/main/resources/common/message/ConsumerProtocol*.json``). Both are
non-flexible messages prefixed by an int16 version; versions 0-3 are known::

    Subscription: topics []string, user_data nullable bytes,
                  owned_partitions [](topic string, partitions []int32)  v1+,
                  generation_id int32  v2+, rack_id nullable string  v3+
    Assignment:   assigned_partitions [](topic string, partitions []int32),
                  user_data nullable bytes

A version above 3 is read as version 3 (Kafka: "new versions cannot remove or reorder
existing fields"), and bytes after the known fields are ignored, as in Java. The sticky
assignors put their own bytes in ``user_data``: ``StickyAssignorUserData`` v1 (previous
assignment + generation; v0 lacks the generation; neither has a version prefix) for
``sticky``, a bare int32 generation for ``cooperative-sticky``.

Decoding takes untrusted bytes: every count is checked against the bytes that remain
before anything is allocated, and every failure raises :class:`ConsumerProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from odradek.client.assignors.base import (
    DEFAULT_GENERATION,
    Assignment,
    Subscription,
    TopicPartition,
    java_order,
    partition_order,
)

__all__ = [
    "HIGHEST_VERSION",
    "ConsumerProtocolError",
    "decode_assignment",
    "decode_cooperative_user_data",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_cooperative_user_data",
    "encode_sticky_user_data",
    "encode_subscription",
]

HIGHEST_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """The bytes are not a valid consumer protocol message (Java's ``SchemaException``)."""


# ---------------------------------------------------------------------------- encoding


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ConsumerProtocolError(f"string of {len(raw)} bytes does not fit an int16 length")
    return _I16.pack(len(raw)) + raw


def _nullable_string(text: str | None) -> bytes:
    return _I16.pack(-1) if text is None else _string(text)


def _nullable_bytes(data: bytes | None) -> bytes:
    return _I32.pack(-1) if data is None else _I32.pack(len(data)) + bytes(data)


def _topic_partitions(groups: list[tuple[str, list[int]]]) -> bytes:
    out = [_I32.pack(len(groups))]
    for topic, partitions in groups:
        out.append(_string(topic))
        out.append(_I32.pack(len(partitions)))
        out.extend(_I32.pack(p) for p in partitions)
    return b"".join(out)


def _group_in_order(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    """Group by topic, topics in order of first appearance, partitions in given order."""
    groups: dict[str, list[int]] = {}
    for topic, partition in partitions:
        groups.setdefault(topic, []).append(partition)
    return list(groups.items())


def _check_version(version: int) -> int:
    if version < 0:
        raise ConsumerProtocolError(f"unsupported consumer protocol version {version}")
    return min(version, HIGHEST_VERSION)


def encode_subscription(subscription: Subscription, version: int = HIGHEST_VERSION) -> bytes:
    """JoinGroup member metadata for ``subscription``, as Java's ``serializeSubscription``:
    topics sorted, owned partitions sorted and grouped by topic, fields of later versions
    left out. A version above 3 is written as 3, as Java does."""
    version = _check_version(version)
    topics = sorted(subscription.topics, key=java_order)  # sorted, not deduplicated, as Java
    out = [_I16.pack(version), _I32.pack(len(topics))]
    out.extend(_string(t) for t in topics)
    out.append(_nullable_bytes(subscription.user_data))
    if version >= 1:
        owned = sorted(subscription.owned_partitions, key=partition_order)
        out.append(_topic_partitions(_group_in_order(owned)))
    if version >= 2:
        out.append(_I32.pack(subscription.generation_id))
    if version >= 3:
        out.append(_nullable_string(subscription.rack_id))
    return b"".join(out)


def encode_assignment(assignment: Assignment, version: int = HIGHEST_VERSION) -> bytes:
    """SyncGroup member assignment, as Java's ``serializeAssignment``: partitions grouped by
    topic in order of first appearance. The layout is the same in versions 0-3."""
    version = _check_version(version)
    return (
        _I16.pack(version)
        + _topic_partitions(_group_in_order(assignment.partitions))
        + _nullable_bytes(assignment.user_data)
    )


def encode_sticky_user_data(
    partitions: Iterable[TopicPartition], generation: int | None = None
) -> bytes:
    """``StickyAssignorUserData``: v1 when ``generation`` is given (what Java's ``sticky``
    sends), else v0. No version prefix: the reader tries v1, then v0."""
    body = _topic_partitions(_group_in_order(partitions))
    return body if generation is None else body + _I32.pack(generation)


def encode_cooperative_user_data(generation: int) -> bytes:
    """``cooperative-sticky``'s user data: the member's last generation as an int32."""
    return _I32.pack(generation)


# ---------------------------------------------------------------------------- decoding


class _Reader:
    """Bounds-checked big-endian reads over a bytes-like object."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self.pos = 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def _take(self, size: int, what: str) -> int:
        start = self.pos
        if size > len(self.data) - start:
            raise ConsumerProtocolError(f"truncated {what}: {size} bytes needed at {start}")
        self.pos = start + size
        return start

    def int16(self, what: str) -> int:
        return _I16.unpack_from(self.data, self._take(2, what))[0]

    def int32(self, what: str) -> int:
        return _I32.unpack_from(self.data, self._take(4, what))[0]

    def count(self, what: str, min_element_size: int) -> int:
        """An array length; never more elements than the remaining bytes can hold."""
        n = self.int32(what)
        if n < 0:
            raise ConsumerProtocolError(f"non-nullable {what} was serialized as null")
        if n * min_element_size > self.remaining():
            raise ConsumerProtocolError(
                f"{what} claims {n} elements but only {self.remaining()} bytes remain"
            )
        return n

    def nullable_string(self, what: str) -> str | None:
        n = self.int16(what)
        if n < 0:
            return None
        start = self._take(n, what)
        # Java decodes with replacement of malformed UTF-8, not an error.
        return bytes(self.data[start : start + n]).decode("utf-8", "replace")

    def string(self, what: str) -> str:
        text = self.nullable_string(what)
        if text is None:
            raise ConsumerProtocolError(f"non-nullable {what} was serialized as null")
        return text

    def nullable_bytes(self, what: str) -> bytes | None:
        n = self.int32(what)
        if n < 0:
            return None
        start = self._take(n, what)
        return bytes(self.data[start : start + n])

    def topic_partitions(self, what: str) -> list[TopicPartition]:
        out: list[TopicPartition] = []
        for _ in range(self.count(what, 6)):  # int16 topic length + int32 partition count
            topic = self.string(f"{what} topic")
            for _ in range(self.count(f"{what} partitions", 4)):
                out.append(TopicPartition(topic, self.int32(f"{what} partition")))
        return out


def _version(reader: _Reader) -> int:
    return _check_version(reader.int16("consumer protocol header"))


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """A :class:`Subscription` from JoinGroup member metadata (any version 0 and up).

    An empty rack id becomes None and a missing generation -1, as in Java.
    """
    reader = _Reader(data)
    version = _version(reader)
    topics = [reader.string("subscription topic") for _ in range(reader.count("topics", 2))]
    user_data = reader.nullable_bytes("subscription user data")
    owned: list[TopicPartition] = []
    generation = DEFAULT_GENERATION
    rack: str | None = None
    if version >= 1:
        owned = reader.topic_partitions("owned partitions")
    if version >= 2:
        generation = reader.int32("generation id")
    if version >= 3:
        rack = reader.nullable_string("rack id") or None
    return Subscription(tuple(topics), user_data, tuple(owned), generation, rack)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """An :class:`Assignment` from a SyncGroup member assignment (any version 0 and up)."""
    reader = _Reader(data)
    _version(reader)
    partitions = reader.topic_partitions("assigned partitions")
    return Assignment(partitions, reader.nullable_bytes("assignment user data"))


def decode_sticky_user_data(
    data: bytes | bytearray | memoryview,
) -> tuple[list[TopicPartition], int | None]:
    """(previous assignment, generation or None) from ``sticky`` user data: read as v1,
    and if that fails as v0 (no generation), like Java's ``StickyAssignor``."""
    reader = _Reader(data)
    partitions = reader.topic_partitions("sticky previous assignment")
    if reader.remaining() >= 4:
        return partitions, reader.int32("sticky generation")
    return partitions, None


def decode_cooperative_user_data(data: bytes | bytearray | memoryview) -> int:
    """The generation in ``cooperative-sticky`` user data (trailing bytes ignored)."""
    return _Reader(data).int32("cooperative-sticky generation")
