"""The Metadata response (API 3), encoded by hand, one topic entry at a time.

Building kio dataclasses for every partition and encoding them cost about 100 ms of Python
per 10,000 partitions, paid by the first Metadata request after any change. Here a topic
entry is encoded straight from its fields into bytes the broker keeps until that topic
changes; an answer is its top-level fields around the concatenated entries it names.
``tests/protocol/test_metadata_encoder.py`` checks the bytes against kio's encoder for
every version.

Layout (``[]`` = array; ``vN+`` = only from that version; flexible versions, v9+, write
compact strings and arrays (unsigned varint of length + 1, 0 = null) and end every struct
with tagged fields, always empty here)::

    throttle_time_ms                 int32   v3+
    brokers []
      node_id int32, host string, port int32, rack nullable string v1+
    cluster_id                       nullable string v2+
    controller_id                    int32   v1+
    topics []
      error_code                     int16
      name                           string (nullable v12+)
      topic_id                       uuid    v10+
      is_internal                    bool    v1+
      partitions []
        error_code int16, partition_index int32, leader_id int32,
        leader_epoch int32 v7+, replica_nodes [int32], isr_nodes [int32],
        offline_replicas [int32] v5+
      topic_authorized_operations    int32   v8+
    cluster_authorized_operations    int32   v8..v10
    error_code                       int16   v13+
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from odradek.protocol.primitives import uvarint

__all__ = [
    "MAX_VERSION",
    "NOT_REQUESTED",
    "PartitionRow",
    "encode_metadata_body",
    "encode_topic",
    "topic_layout",
    "with_authorized_operations",
]

MAX_VERSION = 13
FIRST_FLEXIBLE = 9
NOT_REQUESTED = -(2**31)  # authorized operations not asked for (KIP-430)

# (error_code, partition_index, leader_id, leader_epoch, replicas, isr, offline_replicas)
PartitionRow = tuple[int, int, int, int, Sequence[int], Sequence[int], Sequence[int]]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">hi")  # error code, partition index
_ZERO_UUID = bytes(16)
_EMPTY_TAGS = b"\x00"

# Versions whose topic entries encode to the same bytes share the lowest one as their
# layout: v1 adds is_internal, v5 offline_replicas, v7 leader_epoch, v8 the authorized
# operations, v9 the flexible encoding, v10 the topic id (v12's nullable name changes
# nothing for a named topic).
_LAYOUTS = (0, 1, 1, 1, 1, 5, 5, 7, 8, 9, 10, 10, 10, 10)
_VERSIONS = range(MAX_VERSION + 1)


# Encoded partition tails (all after error code and index) by layout, then by leader,
# epoch, replicas, ISR and offline replicas: shared by every topic, bounded. Benign if
# two threads fill one at once (both write the same bytes).
_TAILS: dict[int, dict[tuple[int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]], bytes]]
_TAILS = {layout: {} for layout in set(_LAYOUTS)}
MAX_KEPT_TAILS = 16_384  # about 5 MB at most


def topic_layout(version: int) -> int:
    """The lowest version whose topic entries are byte for byte those of ``version``."""
    return _LAYOUTS[version]


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return uvarint(0) if flexible else _INT16.pack(-1)
    data = value.encode()
    return (uvarint(len(data) + 1) if flexible else _INT16.pack(len(data))) + data


def _array_length(count: int, flexible: bool) -> bytes:
    return uvarint(count + 1) if flexible else _INT32.pack(count)


def _int32s(values: Sequence[int], flexible: bool) -> bytes:
    count = len(values)
    return _array_length(count, flexible) + struct.pack(f">{count}i", *values)


def _partition_tail(
    version: int, leader: int, epoch: int, replicas: Sequence[int], isr: Sequence[int],
    offline: Sequence[int],
) -> bytes:  # fmt: skip
    """A partition entry after its error code and index."""
    flexible = version >= FIRST_FLEXIBLE
    parts = [_INT32.pack(leader)]
    if version >= 7:
        parts.append(_INT32.pack(epoch))
    parts.append(_int32s(replicas, flexible))
    parts.append(_int32s(isr, flexible))
    if version >= 5:
        parts.append(_int32s(offline, flexible))
    if flexible:
        parts.append(_EMPTY_TAGS)
    return b"".join(parts)


def encode_topic(
    version: int,
    error_code: int,
    name: str | None,
    topic_id: uuid.UUID | None,
    is_internal: bool,
    partitions: Iterable[PartitionRow],
    authorized_operations: int = NOT_REQUESTED,
) -> bytes:
    """One element of the topics array, as ``version`` writes it (a None ``topic_id`` is
    the zero UUID)."""
    flexible = version >= FIRST_FLEXIBLE
    head = [_INT16.pack(error_code), _string(name, flexible)]
    if version not in _VERSIONS:
        raise ValueError(f"Metadata v{version} is not encoded here (v0-v{MAX_VERSION})")
    if version >= 10:
        head.append(topic_id.bytes if topic_id is not None else _ZERO_UUID)
    if version >= 1:
        head.append(b"\x01" if is_internal else b"\x00")
    # Partitions mostly differ only in their index (same leader, epoch and replicas, in
    # this topic and in others): their tails are encoded once per distinct value and
    # layout, and a partition like the one before it (compared as given, lists or
    # tuples, without building a key) reuses its.
    tails = _TAILS[_LAYOUTS[version]]
    pack_head = _PARTITION_HEAD.pack
    body: list[bytes] = []
    append = body.append
    tail = b""
    last: tuple[Any, ...] = (None,) * 5
    for error, index, leader, epoch, replicas, isr, offline in partitions:
        if (leader, epoch, replicas, isr, offline) != last:
            last = (leader, epoch, replicas, isr, offline)
            key = (leader, epoch, tuple(replicas), tuple(isr), tuple(offline))
            found = tails.get(key)
            if found is None:
                if len(tails) >= MAX_KEPT_TAILS:
                    tails.clear()  # bounded: many brokers make many distinct tails
                found = tails[key] = _partition_tail(version, leader, epoch, *key[2:])
            tail = found
        append(pack_head(error, index))
        append(tail)
    count = len(body) // 2
    head.append(uvarint(count + 1) if flexible else _INT32.pack(count))
    head.extend(body)
    if version >= 8:
        head.append(_INT32.pack(authorized_operations))
    if flexible:
        head.append(_EMPTY_TAGS)
    return b"".join(head)


def with_authorized_operations(version: int, entry: bytes, operations: int) -> bytes:
    """``entry`` (made by :func:`encode_topic` for ``version``) saying
    ``topic_authorized_operations``: the field is its last but the tagged fields, so a
    kept entry serves every principal with one copy of its bytes."""
    if version < 8:
        return entry
    if version >= FIRST_FLEXIBLE:
        return b"".join((memoryview(entry)[:-5], _INT32.pack(operations), _EMPTY_TAGS))
    return b"".join((memoryview(entry)[:-4], _INT32.pack(operations)))


def encode_metadata_body(
    version: int,
    *,
    brokers: Iterable[tuple[int, str, int, str | None]],
    cluster_id: str | None,
    controller_id: int,
    topics: Sequence[bytes],
    throttle_ms: int = 0,
    cluster_authorized_operations: int = NOT_REQUESTED,
    error_code: int = 0,
) -> bytes:
    """The response body (all after the response header): ``topics`` are entries made by
    :func:`encode_topic` for the same ``version``, in the order to answer them."""
    flexible = version >= FIRST_FLEXIBLE
    parts: list[bytes] = []
    if version >= 3:
        parts.append(_INT32.pack(throttle_ms))
    encoded_brokers = []
    for node_id, host, port, rack in brokers:
        entry = [_INT32.pack(node_id), _string(host, flexible), _INT32.pack(port)]
        if version >= 1:
            entry.append(_string(rack, flexible))
        if flexible:
            entry.append(_EMPTY_TAGS)
        encoded_brokers.append(b"".join(entry))
    parts.append(_array_length(len(encoded_brokers), flexible))
    parts.extend(encoded_brokers)
    if version >= 2:
        parts.append(_string(cluster_id, flexible))
    if version >= 1:
        parts.append(_INT32.pack(controller_id))
    parts.append(_array_length(len(topics), flexible))
    parts.extend(topics)
    if 8 <= version <= 10:
        parts.append(_INT32.pack(cluster_authorized_operations))
    if version >= 13:
        parts.append(_INT16.pack(error_code))
    if flexible:
        parts.append(_EMPTY_TAGS)
    return b"".join(parts)
