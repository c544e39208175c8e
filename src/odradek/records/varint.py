"""Zigzag varints and varlongs, the variable-length integers inside record batch v2.

Wire format (the same as protobuf's ``sint32`` / ``sint64``)::

    zigzag:  n >= 0 -> 2n,  n < 0 -> -2n - 1      (small magnitudes stay small)
    bytes:   7 bits per byte, least significant group first; the high bit (0x80)
             is set on every byte except the last

    varint  (int32): 1-5 bytes      varlong (int64): 1-10 bytes

Examples: 0 -> 00, -1 -> 01, 1 -> 02, 63 -> 7e, 64 -> 80 01, -2**31 -> ff ff ff ff 0f.

Decoding is strict where Java's reader is lax: a fifth varint byte (tenth varlong
byte) with the continuation bit set, or with bits that push the value outside int32
(int64), is rejected with :class:`CorruptRecordError` instead of being silently
wrapped. A truncated varint raises the same error; nothing reads past ``len(buf)``.

kio ships C readers for these (``kio._kio_native.read_signed_varint``), but they
accept out-of-range five-byte varints, refuse ``bytearray`` and raise several
exception types; these pure-Python versions keep one error type and a fast path
for the one- and two-byte values that dominate record batches.
"""

from __future__ import annotations

from odradek.records.errors import CorruptRecordError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "encode_varlong",
    "varint_size",
    "varlong_size",
    "zigzag_decode",
    "zigzag_encode",
]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_UINT32_MAX = 2**32 - 1
_UINT64_MAX = 2**64 - 1
_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10

# Encodings of the values the encoder meets most often (lengths of small keys and
# values, offset and timestamp deltas, header counts) are looked up, not computed:
# building a two-byte ``bytes`` in Python costs more than a list index.
_CACHE_MIN = -1024
_CACHE_MAX = 16383


def zigzag_encode(value: int) -> int:
    """Map a signed int to the unsigned zigzag form (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...)."""
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def zigzag_decode(raw: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (raw >> 1) ^ -(raw & 1)


def _encode_unsigned(raw: int) -> bytes:
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


_CACHE: list[bytes] = [
    _encode_unsigned(zigzag_encode(v)) for v in range(_CACHE_MIN, _CACHE_MAX + 1)
]


def encode_varint(value: int) -> bytes:
    """Zigzag varint bytes of an int32. Raises ValueError outside the int32 range."""
    if _CACHE_MIN <= value <= _CACHE_MAX:
        return _CACHE[value - _CACHE_MIN]
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return _encode_unsigned(zigzag_encode(value))


def encode_varlong(value: int) -> bytes:
    """Zigzag varlong bytes of an int64. Raises ValueError outside the int64 range."""
    if _CACHE_MIN <= value <= _CACHE_MAX:
        return _CACHE[value - _CACHE_MIN]
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _encode_unsigned(zigzag_encode(value))


def _unsigned_size(raw: int) -> int:
    return max(1, (raw.bit_length() + 6) // 7)


def varint_size(value: int) -> int:
    """Encoded size in bytes of an int32 varint."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return _unsigned_size(zigzag_encode(value))


def varlong_size(value: int) -> int:
    """Encoded size in bytes of an int64 varlong."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _unsigned_size(zigzag_encode(value))


def _decode_unsigned(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, max_raw: int, what: str
) -> tuple[int, int]:
    end = len(buf)
    if pos < 0:
        raise CorruptRecordError(f"{what} position {pos} is negative")
    raw = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise CorruptRecordError(f"{what} at byte {start} is truncated")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            raise CorruptRecordError(f"{what} at byte {start} is longer than {max_bytes} bytes")
    if raw > max_raw:
        bits = max_raw.bit_length()
        raise CorruptRecordError(f"{what} at byte {start} overflows its {bits} bits")
    return raw, pos


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read the int32 zigzag varint at ``pos``; return ``(value, position after it)``."""
    # Fast path: one byte, the common case for attributes, deltas and short lengths.
    if 0 <= pos < len(buf):
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, _MAX_VARINT_BYTES, _UINT32_MAX, "varint")
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read the int64 zigzag varlong at ``pos``; return ``(value, position after it)``."""
    if 0 <= pos < len(buf):
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, _MAX_VARLONG_BYTES, _UINT64_MAX, "varlong")
    return (raw >> 1) ^ -(raw & 1), pos
