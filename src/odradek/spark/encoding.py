"""Arrow columns straight into Kafka record sections, with no Python object per record.

The Spark sink receives rows as Arrow batches. Turning each row into a
:class:`odradek.records.batch.Record` and encoding those one by one costs several
microseconds per row in Python, more than the whole rest of the write. This module encodes
whole columns instead: every record of a batch is, in Kafka record v2 layout,

    prefix  = length varint, attributes (0), timestampDelta (0), offsetDelta varint,
              keyLength varint
    key     (bytes as they are in the Arrow column)
    middle  = valueLength varint
    value   (bytes as they are in the Arrow column)
    suffix  = headerCount varint and the headers

The varints of all records are computed at once with numpy (a record's length depends only
on the sizes of its parts), prefixes, middles and suffixes become Arrow binary arrays built
from numpy buffers, and one Arrow ``take`` over the five arrays in record order
(prefix 0, key 0, middle 0, value 0, suffix 0, prefix 1, ...) copies everything, in C++, into
one contiguous buffer: the record sections of every chunk, back to back. Only headers, when a
``headers`` column is present, are encoded per record in Python.

Every record of one call gets the same timestamp (``now_ms``, as a producer stamps records
without a timestamp), so timestamp deltas are all 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from odradek.records.batch import EncodedRecords
from odradek.records.varint import encode_varint

_INT32_LIMIT = 2**31 - 1
_VARINT_MAX = 5  # every varint here is a 32-bit quantity: at most 5 bytes


def _varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints of int32-range ``values``: an (n, 5) byte matrix and each one's size."""
    zigzag = ((values << 1) ^ (values >> 63)).astype(np.uint64)
    matrix = np.zeros((len(values), _VARINT_MAX), dtype=np.uint8)
    sizes = np.ones(len(values), dtype=np.int64)
    rest = zigzag
    for k in range(_VARINT_MAX):
        low = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest = rest >> np.uint64(7)
        more = rest > 0
        matrix[:, k] = low | (more.astype(np.uint8) << 7)
        if k + 1 < _VARINT_MAX:
            sizes += more
    return matrix, sizes


def _varint_size(values: np.ndarray) -> np.ndarray:
    zigzag = ((values << 1) ^ (values >> 63)).astype(np.uint64)
    sizes = np.ones(len(values), dtype=np.int64)
    for shift in (7, 14, 21, 28):
        sizes += zigzag >= np.uint64(1 << shift)
    return sizes


def _packed(parts: list[tuple[np.ndarray, np.ndarray]]) -> pa.BinaryArray:
    """Binary array whose element ``i`` is the first ``size[i]`` bytes of each part's row ``i``."""
    matrix = np.hstack([m for m, _ in parts])
    mask = np.hstack([np.arange(m.shape[1]) < s[:, None] for m, s in parts])
    sizes = sum(s for _, s in parts)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    data = matrix[mask]  # row-major: each row's bytes in order, rows one after another
    return pa.BinaryArray.from_buffers(
        pa.binary(), len(sizes), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _binary_or_empty(column: pa.Array | None, count: int) -> tuple[pa.Array, np.ndarray]:
    """The column with nulls as empty bytes, and the Kafka length of each (-1 for null)."""
    if column is None:
        empty = pa.BinaryArray.from_buffers(
            pa.binary(),
            count,
            [None, pa.py_buffer(np.zeros(count + 1, dtype=np.int32)), pa.py_buffer(b"")],

        )
        return empty, np.full(count, -1, dtype=np.int64)
    lengths = pc.binary_length(column).fill_null(-1).to_numpy(zero_copy_only=False)
    if column.null_count:
        column = column.fill_null(b"")
    return column, lengths.astype(np.int64)


def encode_headers(rows: list[list[tuple[str, bytes | None]]] | None, count: int) -> pa.Array:
    """Each record's ``headerCount`` varint and headers, as a binary array (one per record)."""
    if rows is None:
        return pa.BinaryArray.from_buffers(
            pa.binary(),
            count,
            [
                None,
                pa.py_buffer(np.arange(count + 1, dtype=np.int32)),
                pa.py_buffer(bytes(count)),  # headerCount 0: one zero byte each
            ],
        )
    encoded = []
    for pairs in rows:
        parts = [encode_varint(len(pairs))]
        for key, value in pairs:
            raw_key = key.encode("utf-8", "surrogateescape")
            parts += (encode_varint(len(raw_key)), raw_key)
            if value is None:
                parts.append(b"\x01")
            else:
                parts += (encode_varint(len(value)), value)
        encoded.append(b"".join(parts))
    return pa.array(encoded, pa.binary())


def encode_chunks(
    keys: pa.Array | None,
    values: pa.Array,
    headers: pa.Array,
    chunks: Sequence[np.ndarray],
    now_ms: int,
) -> list[EncodedRecords]:
    """The record section of each chunk of row indices (every row in at most one chunk).

    ``keys`` and ``values`` are binary columns (None: no key column, every key null),
    ``headers`` the output of :func:`encode_headers` for the same rows.
    """
    count = len(values)
    if not chunks:
        return []
    order = np.concatenate(chunks).astype(np.int64)
    offset_delta = np.zeros(count, dtype=np.int64)
    offset_delta[order] = np.concatenate([np.arange(len(c), dtype=np.int64) for c in chunks])
    key_column, key_len = _binary_or_empty(keys, count)
    value_column, value_len = _binary_or_empty(values, count)
    suffix_len = pc.binary_length(headers).to_numpy(zero_copy_only=False).astype(np.int64)

    delta_bytes, delta_size = _varint_matrix(offset_delta)
    key_bytes, key_size = _varint_matrix(key_len)
    value_bytes, value_size = _varint_matrix(value_len)
    body = (
        2  # attributes, timestampDelta 0
        + delta_size
        + key_size
        + np.maximum(key_len, 0)
        + value_size
        + np.maximum(value_len, 0)
        + suffix_len
    )
    length_bytes, length_size = _varint_matrix(body)
    two_zeros = np.zeros((count, 2), dtype=np.uint8)
    prefix = _packed(
        [
            (length_bytes, length_size),
            (two_zeros, np.full(count, 2, dtype=np.int64)),
            (delta_bytes, delta_size),
            (key_bytes, key_size),
        ]
    )
    middle = _packed([(value_bytes, value_size)])
    record_bytes = length_size + body
    if int(record_bytes.sum()) > _INT32_LIMIT:
        raise ValueError("one Arrow batch of the sink holds more than 2 GiB of records")

    pieces = pa.concat_arrays(
        [prefix, key_column.cast(pa.binary()), middle, value_column.cast(pa.binary()), headers]
    )
    take = (order[:, None] + count * np.arange(5, dtype=np.int64)[None, :]).ravel()
    joined = pieces.take(pa.array(take))
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)[
        joined.offset : joined.offset + len(joined) + 1
    ]
    data = joined.buffers()[2]
    result = []
    start = 0
    for chunk in chunks:
        end = start + len(chunk)
        first, last = int(offsets[5 * start]), int(offsets[5 * end])
        result.append(EncodedRecords(data[first:last].to_pybytes(), len(chunk), now_ms, now_ms))
        start = end
    return result
