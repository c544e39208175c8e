"""The record batch codecs: gzip, snappy, lz4 and zstd, as Kafka frames them.

A compressed batch keeps its 61-byte header in the clear; only the records section
(everything after ``recordsCount``) is compressed, as one stream. Codec ids live in
bits 0-2 of the batch attributes. How each codec frames its stream on the wire:

``gzip`` (1)
    RFC 1952 gzip; concatenated members are read as one stream.
``snappy`` (2)
    Written in the *xerial* framing that the Java client's ``SnappyOutputStream``
    produces, so every reader that understands Java-produced batches understands
    ours::

        magic    8 bytes  82 'S' 'N' 'A' 'P' 'P' 'Y' 00
        version  int32 BE (1)      compatible version  int32 BE (1)
        blocks   [int32 BE length][raw snappy block] ... (each block <= 32 KiB raw)

    librdkafka writes plain raw snappy (a varint uncompressed length, then the
    data); both forms are read. A stream that does not start with the magic is raw.
``lz4`` (3)
    The LZ4 *frame* format (magic 04 22 4d 18) with independent 64 KiB blocks:
    Java's ``KafkaLZ4BlockInputStream`` cannot read linked blocks. (Only the
    pre-v2 message formats had the broken header checksum; it is not handled here.)
``zstd`` (4)
    A standard zstd frame (magic 28 b5 2f fd).

All four come from ``cramjam`` (Rust). What this module adds on top:

* every decompression failure becomes :class:`CorruptRecordError`;
* ``max_size`` bounds how many bytes decompression may produce. The output goes
  into a buffer of bounded size, so a decompression bomb fails after writing at
  most ``max_size + 1`` bytes instead of exhausting memory; raw snappy declares its
  size up front, so it is refused before any work, and a declared size beyond
  snappy's maximum expansion ratio is refused even without ``max_size``.

Levels follow Kafka's ``compression.<codec>.level`` ranges (KIP-390): gzip 1-9
(or -1 for the default), lz4 1-17, zstd -131072..22. ``None`` picks the codec's
default: gzip 6 and zstd 3 as in Kafka, and lz4's fast mode (level 1, librdkafka's
default) rather than the HC level 9 that Java clients use since Kafka 3.8 - a
Python producer needs the speed more than the last 15% of ratio. Snappy and none
have no levels; a level passed for them is ignored.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam

from odradek.records.errors import CorruptRecordError, UncompressedSizeError

__all__ = ["Compression", "compress", "decompress"]


class Compression(enum.IntEnum):
    """Codec ids as stored in bits 0-2 of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        """Parse Kafka's ``compression.type`` names: none, gzip, snappy, lz4, zstd."""
        try:
            return _BY_NAME[name.strip().lower()]
        except (KeyError, AttributeError):
            raise ValueError(
                f"unknown compression type {name!r}; expected one of {', '.join(_BY_NAME)}"
            ) from None

    @property
    def kafka_name(self) -> str:
        """The lower-case name Kafka configs use for this codec."""
        return self.name.lower()


_BY_NAME: dict[str, Compression] = {c.name.lower(): c for c in Compression}

# Kafka's level ranges (CompressionType / KIP-390), inclusive.
_LEVEL_RANGES: dict[Compression, tuple[int, int]] = {
    Compression.GZIP: (1, 9),
    Compression.LZ4: (1, 17),
    Compression.ZSTD: (-131072, 22),
}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_VERSION = 1
_XERIAL_COMPAT_VERSION = 1
# snappy-java's default block size, which Kafka's Java producer uses.
XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")

# Raw snappy cannot expand by more than ~21x (a 3-byte copy tag yields at most 64
# bytes); a stream declaring more than this is lying about its size.
_SNAPPY_MAX_RATIO = 32
_SNAPPY_SLACK = 64

# lz4's fast mode (what librdkafka uses by default). cramjam's own default is HC
# level 4, about five times slower for ~15% smaller batches.
_LZ4_FAST = 1

# First output buffer for a bounded decompression: a few times the input, grown 4x
# per retry up to the bound. Retries only happen on highly compressible data.
_MIN_GUESS = 64 * 1024
_GUESS_RATIO = 4
_BUFFER_FULL = "failed to write whole buffer"  # cramjam's message when the output is full


def _check_level(codec: Compression, level: int | None) -> int | None:
    if level is None:
        return None
    bounds = _LEVEL_RANGES.get(codec)
    if bounds is None:
        return None  # none and snappy have no levels
    if codec is Compression.GZIP and level == -1:
        return None  # Kafka's "default" for gzip
    low, high = bounds
    if not low <= level <= high:
        raise ValueError(f"{codec.kafka_name} compression level {level} is outside [{low}, {high}]")
    return level


def compress(
    codec: Compression, data: bytes | bytearray | memoryview, level: int | None = None
) -> bytes:
    """Compress ``data`` as one Kafka records stream in ``codec``'s framing."""
    codec = Compression(codec)
    level = _check_level(codec, level)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec is Compression.SNAPPY:
        return _xerial_compress(data)
    if codec is Compression.LZ4:
        # cramjam.lz4.compress links blocks; Java's reader decodes each block on its
        # own, so the frame must declare (and use) independent blocks.
        compressor = cramjam.lz4.Compressor(
            level=_LZ4_FAST if level is None else level, block_linked=False
        )
        compressor.compress(data)
        return bytes(compressor.finish())
    return bytes(cramjam.zstd.compress(data, level=level))


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_COMPAT_VERSION)]
    pack_length = _BLOCK_LENGTH.pack
    compress_raw = cramjam.snappy.compress_raw
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(pack_length(len(block)))
        parts.append(block)
    return b"".join(parts)


def decompress(
    codec: Compression, data: bytes | bytearray | memoryview, max_size: int | None = None
) -> bytes:
    """Decompress one records stream. Raises CorruptRecordError for any bad input.

    With ``max_size``, output larger than ``max_size`` bytes is refused (as a
    CorruptRecordError) without ever holding more than ``max_size + 1`` bytes of it.
    """
    try:
        codec = Compression(codec)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec id {codec}") from None
    if max_size is not None and max_size < 0:
        raise ValueError(f"max_size must be >= 0, got {max_size}")
    if codec is Compression.NONE:
        if max_size is not None and len(data) > max_size:
            raise UncompressedSizeError(f"{len(data)} bytes exceed the {max_size}-byte limit")
        return bytes(data)
    if codec is Compression.SNAPPY:
        if bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
            return _xerial_decompress(data, max_size)
        return _raw_snappy_decompress(data, max_size, 0)
    if codec is Compression.GZIP:
        return _gzip_decompress(data, max_size)
    module = _MODULES[codec]
    if max_size is None:
        try:
            return bytes(module.decompress(data))
        except cramjam.DecompressionError as exc:
            raise CorruptRecordError(f"{codec.kafka_name} stream is corrupt: {exc}") from None
    return _bounded_decompress(codec, module, data, max_size)


_MODULES = {
    Compression.LZ4: cramjam.lz4,
    Compression.ZSTD: cramjam.zstd,
}


def _bounded_decompress(
    codec: Compression, module: object, data: bytes | bytearray | memoryview, max_size: int
) -> bytes:
    limit = max_size + 1
    size = min(limit, max(_MIN_GUESS, len(data) * _GUESS_RATIO))
    while True:
        out = bytearray(size)
        try:
            written = module.decompress_into(data, out)  # type: ignore[attr-defined]
        except cramjam.DecompressionError as exc:
            if _BUFFER_FULL in str(exc):
                if size < limit:
                    size = min(limit, size * _GUESS_RATIO)
                    continue
                raise UncompressedSizeError(
                    f"{codec.kafka_name} stream decompresses to more than {max_size} bytes"
                ) from None
            raise CorruptRecordError(f"{codec.kafka_name} stream is corrupt: {exc}") from None
        if written > max_size:
            raise UncompressedSizeError(
                f"{codec.kafka_name} stream decompresses to more than {max_size} bytes"
            )
        del out[written:]
        return bytes(out)


_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around deflate


def _gzip_decompress(data: bytes | bytearray | memoryview, max_size: int | None) -> bytes:
    """gzip through the standard library's zlib, about twice as fast as cramjam's here.

    ``max_length`` makes it a bounded stream: zlib stops producing output at the bound
    instead of inflating the rest. Concatenated members are read one after another.
    """
    limit = -1 if max_size is None else max_size + 1
    parts: list[bytes] = []
    produced = 0
    rest = bytes(data)
    try:
        while True:
            stream = zlib.decompressobj(_GZIP_WBITS)
            out = stream.decompress(rest, 0 if limit < 0 else limit - produced)
            produced += len(out)
            if max_size is not None and produced > max_size:
                raise UncompressedSizeError(
                    f"gzip stream decompresses to more than {max_size} bytes"
                )
            parts.append(out)
            if not stream.eof:
                if stream.unconsumed_tail:  # output stopped at the bound, input remains
                    raise UncompressedSizeError(
                        f"gzip stream decompresses to more than {max_size} bytes"
                    )
                raise CorruptRecordError("gzip stream is truncated")
            rest = stream.unused_data
            if not rest:
                break
    except zlib.error as exc:
        raise CorruptRecordError(f"gzip stream is corrupt: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _raw_snappy_decompress(
    data: bytes | bytearray | memoryview, max_size: int | None, already: int
) -> bytes:
    """One raw snappy stream; ``already`` counts output produced by earlier blocks."""
    try:
        declared = cramjam.snappy.decompress_raw_len(data)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"snappy stream is corrupt: {exc}") from None
    if declared > len(data) * _SNAPPY_MAX_RATIO + _SNAPPY_SLACK:
        raise CorruptRecordError(
            f"snappy stream of {len(data)} bytes declares an impossible {declared} bytes"
        )
    if max_size is not None and already + declared > max_size:
        raise UncompressedSizeError(f"snappy stream decompresses to more than {max_size} bytes")
    try:
        return bytes(cramjam.snappy.decompress_raw(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"snappy stream is corrupt: {exc}") from None


def _xerial_decompress(data: bytes | bytearray | memoryview, max_size: int | None) -> bytes:
    view = memoryview(data)
    end = len(view)
    if end < _XERIAL_HEADER.size:
        raise CorruptRecordError(f"xerial snappy header truncated: {end} bytes")
    pos = _XERIAL_HEADER.size
    parts: list[bytes] = []
    produced = 0
    while pos < end:
        if end - pos < _BLOCK_LENGTH.size:
            raise CorruptRecordError(f"xerial snappy block length truncated at byte {pos}")
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"xerial snappy block at byte {pos} claims {length} bytes, {end - pos} remain"
            )
        block = _raw_snappy_decompress(view[pos : pos + length], max_size, produced)
        produced += len(block)
        parts.append(block)
        pos += length
    return b"".join(parts)
