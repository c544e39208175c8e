"""Partitions for a whole column of keys at once: Kafka's murmur2 partitioner, vectorised.

The sink must place a keyed row where the Java client would (``toPositive(murmur2(key)) %
partitions``, see :func:`odradek.client.partitioner.partition_for_key`), for every row it
writes. Hashing key by key in Python costs about 4 µs a key; here keys of equal length are
hashed together with numpy's wrapping uint32 arithmetic, which is exact for murmur2:

    h = seed ^ len
    for each little-endian 4-byte block k:  k *= m; k ^= k >> 24; k *= m; h *= m; h ^= k
    tail (len % 4 bytes):  h ^= b2 << 16; h ^= b1 << 8; h ^= b0; h *= m   (Java's fall-through)
    h ^= h >> 13; h *= m; h ^= h >> 15

with seed 0x9747b28c and m 0x5bd1e995, all modulo 2**32.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)


def _murmur2_rows(data: np.ndarray) -> np.ndarray:
    """murmur2 (as uint32) of each row of a 2-D uint8 array whose rows are the keys."""
    count, length = data.shape
    h = np.full(count, _SEED ^ np.uint32(length), dtype=np.uint32)
    full = length - length % 4
    if full:
        blocks = np.ascontiguousarray(data[:, :full]).view("<u4")
        for j in range(blocks.shape[1]):
            k = blocks[:, j] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            h *= _M
            h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[:, full + 2].astype(np.uint32) << np.uint32(16)
    if tail >= 2:
        h ^= data[:, full + 1].astype(np.uint32) << np.uint32(8)
    if tail >= 1:
        h ^= data[:, full].astype(np.uint32)
        h *= _M
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return h


def partitions_for_keys(keys: pa.Array, num_partitions: int) -> np.ndarray:
    """Partition of every key (int64), -1 where the key is null."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    if not (pa.types.is_binary(keys.type) or pa.types.is_string(keys.type)):
        raise TypeError(f"keys must be binary or string, not {keys.type}")
    keys = keys.cast(pa.binary())
    count = len(keys)
    result = np.full(count, -1, dtype=np.int64)
    if count == 0:
        return result
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[
        keys.offset : keys.offset + count + 1
    ]
    lengths = np.diff(offsets).astype(np.int64)
    valid = ~np.asarray(keys.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    lengths[~valid] = -1
    for length in np.unique(lengths[valid]):
        rows = np.flatnonzero(lengths == length)
        group = keys.take(pa.array(rows)) if len(rows) != count else keys
        group_offsets = np.frombuffer(group.buffers()[1], dtype=np.int32)
        begin = int(group_offsets[group.offset])
        data_buffer = group.buffers()[2]
        raw = (
            np.frombuffer(data_buffer, dtype=np.uint8)[begin : begin + len(rows) * int(length)]
            if data_buffer is not None
            else np.zeros(0, dtype=np.uint8)
        )
        hashes = _murmur2_rows(raw.reshape(len(rows), int(length)))
        result[rows] = (hashes & np.uint32(0x7FFFFFFF)).astype(np.int64) % num_partitions
    return result
