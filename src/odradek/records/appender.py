"""Client-side fast path: a batch's records section, encoded record by record as they come.

The producer used to keep a :class:`~odradek.records.batch.Record` per record until its batch
was sent, then encode them all: an object per record that lives until the broker answers
(the garbage collector walks it again and again meanwhile). Here each record is encoded the
moment it is appended: its pieces go into the batch's one list of parts (no object per
record), joined once when the batch is sent; only its timestamp is kept (for the record's
metadata). The bytes are exactly those :func:`~odradek.records.batch.build_batch` writes for
the same records (the tests compare them). The broker does not use this module.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.records.batch import EncodedRecords, _encode_headers
from odradek.records.varint import _CACHE, _CACHE_MAX, _CACHE_MIN, encode_varint, encode_varlong

__all__ = ["RecordsAppender"]

_NULL = b"\x01"  # varint -1
_NO_HEADERS = b"\x00"
_ZERO_ATTRIBUTES = b"\x00"


class RecordsAppender:
    """A records section being built: ``append`` encodes one record (offset delta = its
    position); ``len()`` is the record count; :meth:`encoded` hands the section over."""

    __slots__ = ("base_timestamp", "count", "max_timestamp", "parts", "timestamps")

    def __init__(self) -> None:
        # References to the pieces (cached varints, the caller's key and value), joined once
        # by encoded(): a 64 KiB value is copied once, not again at every bytearray growth.
        self.parts: list[bytes] = []
        self.count = 0
        self.base_timestamp = -1
        self.max_timestamp = -1
        self.timestamps: list[int] = []  # per record, for its RecordMetadata

    def __len__(self) -> int:
        return self.count

    def append(
        self,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp_ms: int,
        _cache: list[bytes] = _CACHE,
    ) -> None:
        """Encode one record; its timestamp delta is from the first record's timestamp."""
        count = self.count
        if count:
            delta = timestamp_ms - self.base_timestamp
            if timestamp_ms > self.max_timestamp:
                self.max_timestamp = timestamp_ms
        else:
            self.base_timestamp = self.max_timestamp = timestamp_ms
            delta = 0
        if _CACHE_MIN <= delta <= _CACHE_MAX:
            ts = _cache[delta - _CACHE_MIN]
        else:
            ts = encode_varlong(delta)
        offset = _cache[count - _CACHE_MIN] if count <= _CACHE_MAX else encode_varint(count)
        size = 1 + len(ts) + len(offset)
        if key is None:
            key_length = _NULL
            size += 1
        else:
            n = len(key)
            key_length = _cache[n - _CACHE_MIN] if n <= _CACHE_MAX else encode_varint(n)
            size += n + len(key_length)
        if value is None:
            value_length = _NULL
            size += 1
        else:
            n = len(value)
            value_length = _cache[n - _CACHE_MIN] if n <= _CACHE_MAX else encode_varint(n)
            size += n + len(value_length)
        header_bytes = _encode_headers(headers) if headers else _NO_HEADERS
        size += len(header_bytes)
        self.parts += (
            _cache[size - _CACHE_MIN] if size <= _CACHE_MAX else encode_varint(size),
            _ZERO_ATTRIBUTES,
            ts,
            offset,
            key_length,
            b"" if key is None else key,
            value_length,
            b"" if value is None else value,
            header_bytes,
        )
        self.timestamps.append(timestamp_ms)
        self.count = count + 1

    def encoded(self) -> EncodedRecords:
        """The section so far, for :func:`~odradek.records.batch.build_encoded_batch`."""
        return EncodedRecords(
            section=b"".join(self.parts),
            count=self.count,
            base_timestamp=self.base_timestamp,
            max_timestamp=self.max_timestamp,
        )
