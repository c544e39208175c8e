"""Decompression bombs: small, valid-CRC record batches whose records inflate hugely.

Each holds one record (key ``b"bomb"``) whose value is ``size`` zero bytes, so below
the broker's bound it is a perfectly valid batch. The compressed stream is built in
1 MiB steps, so making a 1 GiB bomb never holds 1 GiB in the test process.
"""

from __future__ import annotations

import struct
import time
import zlib

import cramjam

from odradek.records.compression import Compression, compress
from odradek.records.header import compute_crc
from odradek.records.varint import encode_varint

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CHUNK = bytes(1 << 20)
KEY = b"bomb"


def _record_head(size: int) -> bytes:
    body = (
        b"\x00\x00\x00"  # attributes, timestampDelta 0, offsetDelta 0
        + encode_varint(len(KEY))
        + KEY
        + encode_varint(size)
    )
    return encode_varint(len(body) + size + 1) + body  # + 1: headersCount after the value


def _stream(codec: Compression, head: bytes, size: int) -> bytes:
    tail = b"\x00"  # headersCount 0
    if codec is Compression.ZSTD:
        compressor = cramjam.zstd.Compressor(level=1)
        compressor.compress(head)
        for _ in range(size >> 20):
            compressor.compress(_CHUNK)
        compressor.compress(bytes(size & 0xFFFFF) + tail)
        return bytes(compressor.finish())
    if codec is Compression.GZIP:
        deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
        parts = [deflate.compress(head)]
        parts += [deflate.compress(_CHUNK) for _ in range(size >> 20)]
        parts.append(deflate.compress(bytes(size & 0xFFFFF) + tail) + deflate.flush())
        return b"".join(parts)
    if codec is Compression.LZ4:
        compressor = cramjam.lz4.Compressor(level=1, block_linked=False)
        compressor.compress(head)
        for _ in range(size >> 20):
            compressor.compress(_CHUNK)
        compressor.compress(bytes(size & 0xFFFFF) + tail)
        return bytes(compressor.finish())
    return compress(codec, head + bytes(size) + tail)


def wrap(codec: Compression, stream: bytes, *, timestamp_ms: int | None = None) -> bytearray:
    """A one-record batch header with a valid CRC around ``stream``."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    out = bytearray(_HEADER.size) + stream
    _HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, int(codec), 0, now, now, -1, -1, -1, 1)
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return out


def bomb_batch(codec: Compression, size: int, *, timestamp_ms: int | None = None) -> bytearray:
    """A batch whose one record carries ``size`` zero bytes, compressed with ``codec``."""
    return wrap(codec, _stream(codec, _record_head(size), size), timestamp_ms=timestamp_ms)


def lying_snappy_batch(declared: int = 1 << 30) -> bytearray:
    """Raw snappy (as librdkafka writes it) declaring ``declared`` bytes in a tiny stream."""
    stream = encode_unsigned(declared) + b"\x00" * 32
    return wrap(Compression.SNAPPY, stream)


def encode_unsigned(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
