"""Codecs: round trips, Kafka framing, interop with aiokafka's codecs, bad input, bombs."""

from __future__ import annotations

import os
import random
import resource
import struct

import cramjam
import pytest
from aiokafka import codec as aiokafka_codec
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    Compression,
    compress,
    decompress,
)
from odradek.records.errors import CorruptRecordError

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c is not Compression.NONE]
LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _sample(size: int) -> bytes:
    return (os.urandom(size // 2) + b"kafka " * (size // 6 + 1))[:size]


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("none", Compression.NONE),
        ("gzip", Compression.GZIP),
        ("snappy", Compression.SNAPPY),
        ("lz4", Compression.LZ4),
        ("zstd", Compression.ZSTD),
        (" LZ4 ", Compression.LZ4),
    ],
)
def test_from_name(name: str, codec: Compression) -> None:
    assert Compression.from_name(name) is codec
    assert codec.kafka_name == name.strip().lower()


@pytest.mark.parametrize("name", ["", "producer", "uncompressed", "brotli", "gz"])
def test_from_name_rejects_unknown(name: str) -> None:
    with pytest.raises(ValueError, match="unknown compression type"):
        Compression.from_name(name)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 100, XERIAL_BLOCK_SIZE, XERIAL_BLOCK_SIZE + 1, 300_000])
def test_round_trip(codec: Compression, size: int) -> None:
    data = _sample(size)
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(bytearray(packed)), max_size=size) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_aiokafka_reads_ours_and_we_read_aiokafkas(codec: Compression) -> None:
    data = _sample(200_000)
    decoders = {
        Compression.GZIP: (aiokafka_codec.gzip_decode, aiokafka_codec.gzip_encode),
        Compression.SNAPPY: (aiokafka_codec.snappy_decode, aiokafka_codec.snappy_encode),
        Compression.LZ4: (aiokafka_codec.lz4_decode, aiokafka_codec.lz4_encode),
        Compression.ZSTD: (aiokafka_codec.zstd_decode, aiokafka_codec.zstd_encode),
    }
    their_decode, their_encode = decoders[codec]
    assert bytes(their_decode(compress(codec, data))) == data
    assert decompress(codec, bytes(their_encode(data))) == data


def test_snappy_writes_xerial_frames_of_32k_blocks() -> None:
    data = _sample(3 * XERIAL_BLOCK_SIZE + 10)
    packed = compress(Compression.SNAPPY, data)
    magic, version, compat = struct.unpack_from(">8sii", packed)
    assert (magic, version, compat) == (XERIAL_MAGIC, 1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(b) for b in blocks] == [XERIAL_BLOCK_SIZE] * 3 + [10]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_streams_as_librdkafka_writes_them() -> None:
    data = _sample(100_000)
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_lz4_writes_independent_blocks_as_java_requires() -> None:
    packed = compress(Compression.LZ4, _sample(200_000))
    assert packed[:4] == LZ4_MAGIC
    flags, block_descriptor = packed[4], packed[5]
    assert flags >> 6 == 1  # frame format version 01
    assert flags & 0x20  # block independence
    assert (block_descriptor >> 4) & 0x7 == 4  # 64 KiB maximum block size


@pytest.mark.parametrize(
    ("codec", "level"),
    [
        (Compression.GZIP, 1),
        (Compression.GZIP, 9),
        (Compression.GZIP, -1),
        (Compression.LZ4, 1),
        (Compression.LZ4, 17),
        (Compression.ZSTD, -5),
        (Compression.ZSTD, 22),
        (Compression.SNAPPY, 5),
        (Compression.NONE, 3),
    ],
)
def test_levels_in_kafka_ranges(codec: Compression, level: int) -> None:
    data = _sample(50_000)
    assert decompress(codec, compress(codec, data, level)) == data


@pytest.mark.parametrize(
    ("codec", "level"),
    [(Compression.GZIP, 0), (Compression.GZIP, 10), (Compression.LZ4, 18), (Compression.ZSTD, 23)],
)
def test_levels_outside_kafka_ranges(codec: Compression, level: int) -> None:
    with pytest.raises(ValueError, match="level"):
        compress(codec, b"x", level)


def test_higher_levels_compress_better() -> None:
    data = _sample(200_000)
    assert len(compress(Compression.ZSTD, data, 19)) < len(compress(Compression.ZSTD, data, 1))


@pytest.mark.parametrize("codec", COMPRESSED)
# Random junk, but the same in every process: pytest-xdist workers must collect alike.
@pytest.mark.parametrize("junk", [b"", b"\x00", random.Random(64).randbytes(64), b"\xff" * 200])
def test_junk_is_corrupt(codec: Compression, junk: bytes) -> None:
    if codec is Compression.SNAPPY and junk == b"\x00":
        assert decompress(codec, junk) == b""  # a valid raw snappy stream of nothing
        return
    with pytest.raises(CorruptRecordError):
        decompress(codec, junk)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_every_truncation_is_corrupt_or_a_prefix(codec: Compression) -> None:
    data = _sample(5000)
    packed = compress(codec, data)
    for cut in range(len(packed)):
        try:
            out = decompress(codec, packed[:cut], max_size=len(data))
        except CorruptRecordError:
            continue
        # Some framings end cleanly between blocks (xerial); never with wrong bytes.
        assert data.startswith(out)
        assert codec is Compression.SNAPPY


def test_unknown_codec_id_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="unknown compression codec"):
        decompress(5, b"abc")  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", CODECS)
def test_max_size_is_exact(codec: Compression) -> None:
    data = _sample(70_000)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data
    with pytest.raises(CorruptRecordError, match=r"more than|exceed"):
        decompress(codec, packed, max_size=len(data) - 1)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_bounded_decompression_grows_its_buffer(codec: Compression) -> None:
    # 1000x compressible: the first output guess is far too small.
    data = b"\x00" * 4_000_000
    assert decompress(codec, compress(codec, data), max_size=10_000_000) == data


def _concatenated_bomb(codec: Compression, total: int) -> bytes:
    """A stream that inflates to ``total`` bytes, built without holding them."""
    chunk = 16 * 1024 * 1024
    member = compress(codec, b"\x00" * chunk)
    return member * (total // chunk)


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_a_2gib_bomb_is_refused_without_inflating_it(codec: Compression) -> None:
    bomb = _concatenated_bomb(codec, 2 * 1024**3)
    before = _maxrss_mib()
    with pytest.raises(CorruptRecordError, match="more than 1048576 bytes"):
        decompress(codec, bomb, max_size=1024 * 1024)
    assert _maxrss_mib() - before < 64


def test_raw_snappy_declaring_too_much_is_refused_before_decompressing() -> None:
    # Header claims 4 GiB for a few bytes: impossible for snappy, refused even without max_size.
    lie = b"\xff\xff\xff\xff\x0f" + b"\x00" * 20
    with pytest.raises(CorruptRecordError, match="impossible"):
        decompress(Compression.SNAPPY, lie)
    honest = bytes(cramjam.snappy.compress_raw(b"\x00" * 1_000_000))
    with pytest.raises(CorruptRecordError, match="more than 1000 bytes"):
        decompress(Compression.SNAPPY, honest, max_size=1000)


def test_xerial_blocks_count_towards_max_size() -> None:
    packed = compress(Compression.SNAPPY, b"\x00" * (10 * XERIAL_BLOCK_SIZE))
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(Compression.SNAPPY, packed, max_size=5 * XERIAL_BLOCK_SIZE)


@pytest.mark.parametrize(
    "stream",
    [
        XERIAL_MAGIC,  # header cut short
        XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00",  # block length cut short
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, 2**31 - 1) + b"abc",  # block overruns
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, -5) + b"abc",  # negative block length
    ],
)
def test_broken_xerial_framing_is_corrupt(stream: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, stream)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(COMPRESSED), st.binary(max_size=400))
def test_random_bytes_only_raise_corrupt(codec: Compression, junk: bytes) -> None:
    for stream in (junk, _FRAME_PREFIX[codec] + junk):
        try:
            decompress(codec, stream, max_size=100_000)
        except CorruptRecordError:
            pass


_FRAME_PREFIX = {
    Compression.GZIP: b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff",
    Compression.SNAPPY: XERIAL_MAGIC + struct.pack(">ii", 1, 1),
    Compression.LZ4: LZ4_MAGIC + b"\x60\x40\x82",
    Compression.ZSTD: b"\x28\xb5\x2f\xfd",
}
