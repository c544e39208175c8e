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
import typing
from functools import cache
from typing import Any

from odradek.protocol.lenient import _plan

__all__ = ["read_produce_request"]

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
