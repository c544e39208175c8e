"""A direct encoder for the Produce response: the one answer sent per produce request.

The generic path (``build_response`` into kio entities, then kio's schema-walking writer)
costs ~60 us for a one-partition answer, more than the append itself; a producer with
``linger.ms=0`` pays it for every record. This writes the same bytes with a few struct
packs for v3..v11 (the versions the broker serves). Answers with fields this does not
write (record_errors, current_leader, node_endpoints) return None: the caller takes the
generic path. ``tests/protocol/test_produce_response.py`` checks every version against
kio's writer byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FIRST_FLEXIBLE", "VERSIONS", "encode_one_partition", "encode_produce_response"]

FIRST_FLEXIBLE = 9  # Produce v9+: compact arrays and strings, tagged fields (KIP-482)
VERSIONS = range(3, 12)  # the Produce versions written here

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_PARTITION = struct.Struct(">ihq")  # index, error_code, base_offset
_INT64 = struct.Struct(">q")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(value: str, flexible: bool) -> bytes:
    raw = value.encode()
    return (_uvarint(len(raw) + 1) if flexible else _INT16.pack(len(raw))) + raw


def _array_length(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else _INT32.pack(count)


def encode_produce_response(
    correlation_id: int,
    api_version: int,
    responses: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    throttle_time_ms: int = 0,
) -> bytes | None:
    """The framed response (size prefix included) to a Produce request, or None.

    ``responses`` lists ``(topic, partitions)``; each partition is the handler's dict:
    ``index``, ``error_code``, ``base_offset``, optional ``log_append_time`` (ms, None
    for -1), ``log_start_offset`` and ``error_message``.
    """
    if api_version not in VERSIONS:
        return None
    if len(responses) == 1 and len(responses[0][1]) == 1:
        entry = responses[0][1][0]
        if (
            entry.get("error_message") is None
            and not entry.get("record_errors")
            and entry.get("current_leader") is None
        ):
            name = responses[0][0]
            return _encode_one(correlation_id, api_version, name, entry, throttle_time_ms)
    flexible = api_version >= FIRST_FLEXIBLE
    out: list[bytes] = [b"", _INT32.pack(correlation_id)]
    if flexible:
        out.append(b"\x00")  # response header v1: no tagged fields
    out.append(_array_length(len(responses), flexible))
    for name, partitions in responses:
        out.append(_string(name, flexible))
        out.append(_array_length(len(partitions), flexible))
        for entry in partitions:
            if entry.get("record_errors") or entry.get("current_leader") is not None:
                return None
            out.append(
                _PARTITION.pack(
                    int(entry["index"]), int(entry.get("error_code", 0)), entry["base_offset"]
                )
            )
            append_time = entry.get("log_append_time")
            out.append(_INT64.pack(-1 if append_time is None else append_time))
            if api_version >= 5:
                out.append(_INT64.pack(entry.get("log_start_offset", -1)))
            if api_version >= 8:
                out.append(b"\x01" if flexible else b"\x00\x00\x00\x00")  # no record errors
                message = entry.get("error_message")
                if message is None:
                    out.append(b"\x00" if flexible else b"\xff\xff")
                else:
                    out.append(_string(message, flexible))
            if flexible:
                out.append(b"\x00")
        if flexible:
            out.append(b"\x00")
    out.append(_INT32.pack(throttle_time_ms))
    if flexible:
        out.append(b"\x00")
    size = sum(len(part) for part in out)
    out[0] = _INT32.pack(size)
    return b"".join(out)


# One topic, one partition, no error message: what a producer with linger.ms=0 gets for
# every record. Everything but the numbers is the same for a topic and version, so the
# whole answer is one cached Struct: size, correlation id, the bytes before the partition's
# numbers, the numbers, the bytes after them, the throttle time (and the response's tagged
# fields in flexible versions), packed in one call.
_ONE_CACHE: dict[tuple[int, str], tuple[struct.Struct, bytes, bytes, bool]] = {}
_ONE_CACHE_MAX = 4096


def _one_parts(api_version: int, name: str) -> tuple[struct.Struct, bytes, bytes, bool]:
    flexible = api_version >= FIRST_FLEXIBLE
    head = (b"\x00" if flexible else b"") + _array_length(1, flexible)
    head += _string(name, flexible) + _array_length(1, flexible)
    # index, error_code, base_offset, log_append_time[, log_start_offset]
    numbers = "ihqq" + ("q" if api_version >= 5 else "")
    tail = b""
    if api_version >= 8:  # no record errors, a null error message
        tail += b"\x01\x00" if flexible else b"\x00\x00\x00\x00\xff\xff"
    if flexible:
        tail += b"\x00\x00"  # the partition's and the topic's tagged fields
    # The response's own tagged fields (flexible) are a zero pad byte after the throttle.
    layout = struct.Struct(f">ii{len(head)}s{numbers}{len(tail)}si{'x' if flexible else ''}")
    return layout, head, tail, api_version >= 5


def _encode_one(
    correlation_id: int,
    api_version: int,
    name: str,
    entry: Mapping[str, Any],
    throttle_time_ms: int,
) -> bytes:
    append_time = entry.get("log_append_time")
    return encode_one_partition(
        correlation_id,
        api_version,
        name,
        int(entry["index"]),
        int(entry.get("error_code", 0)),
        entry["base_offset"],
        -1 if append_time is None else append_time,
        entry.get("log_start_offset", -1),
        throttle_time_ms,
    )


def encode_one_partition(
    correlation_id: int,
    api_version: int,
    name: str,
    index: int,
    error_code: int,
    base_offset: int,
    log_append_time: int,
    log_start_offset: int,
    throttle_time_ms: int,
) -> bytes:
    """encode_produce_response for one topic with one partition and no error message
    (``api_version`` in VERSIONS; -1 for no log append time), from the numbers alone."""
    key = (api_version, name)
    parts = _ONE_CACHE.get(key)
    if parts is None:
        if len(_ONE_CACHE) >= _ONE_CACHE_MAX:
            _ONE_CACHE.clear()
        parts = _ONE_CACHE[key] = _one_parts(api_version, name)
    layout, head, tail, with_log_start = parts
    size = layout.size - 4
    if with_log_start:
        return layout.pack(
            size, correlation_id, head, index, error_code, base_offset, log_append_time,
            log_start_offset, tail, throttle_time_ms,
        )  # fmt: skip
    return layout.pack(
        size, correlation_id, head, index, error_code, base_offset, log_append_time, tail,
        throttle_time_ms,
    )  # fmt: skip
