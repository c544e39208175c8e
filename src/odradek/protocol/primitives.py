"""The few Kafka protocol primitives odradek encodes by hand (headers, Fetch responses).

* unsigned varint: 7 bits per byte, least significant group first, high bit = "more";
* compact string / bytes / array length: unsigned varint of ``length + 1`` (0 = null);
* tagged fields: unsigned varint count, then per field ``uvarint tag``, ``uvarint size``
  and ``size`` bytes.

Everything else goes through kio.
"""

from __future__ import annotations

__all__ = [
    "MAX_UVARINT_BYTES",
    "read_uvarint",
    "skip_tagged_fields",
    "uvarint",
]

MAX_UVARINT_BYTES = 5  # an int32-sized unsigned varint never needs more

# Encodings of 0..127 are one byte; precompute them, they are by far the most common.
_SMALL = [bytes((value,)) for value in range(128)]


def uvarint(value: int) -> bytes:
    """Encode a non-negative int as an unsigned varint."""
    if value < 128:
        if value < 0:
            raise ValueError(f"unsigned varint cannot encode {value}")
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buffer: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``offset``; return ``(value, new_offset)``.

    Raises ``ValueError`` on a truncated buffer or a varint longer than 5 bytes.
    """
    value = 0
    shift = 0
    end = len(buffer)
    for index in range(MAX_UVARINT_BYTES):
        position = offset + index
        if position >= end:
            raise ValueError("truncated unsigned varint")
        byte = buffer[position]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position + 1
        shift += 7
    raise ValueError("unsigned varint longer than 5 bytes")


def skip_tagged_fields(buffer: bytes | bytearray | memoryview, offset: int) -> int:
    """Skip a tagged-field section at ``offset``; return the offset after it.

    Headers carry no tagged fields odradek understands (KIP-482 allows unknown ones), so
    they are skipped, checking only that they fit in the buffer.
    """
    count, offset = read_uvarint(buffer, offset)
    for _ in range(count):
        _tag, offset = read_uvarint(buffer, offset)
        size, offset = read_uvarint(buffer, offset)
        offset += size
        if offset > len(buffer):
            raise ValueError("tagged field runs past the end of the buffer")
    return offset
