"""Record batch v2 (magic 2): building batches and decoding their records.

A batch is the 61-byte header documented in :mod:`odradek.records.header`, followed
by ``recordsCount`` records, compressed as one stream when attributes bits 0-2 name
a codec. Each record (all integers zigzag varints, see :mod:`odradek.records.varint`)::

    length          varint    bytes of the record after this field
    attributes      int8      unused, 0
    timestampDelta  varlong   timestamp - batch baseTimestamp
    offsetDelta     varint    offset - batch baseOffset
    keyLength       varint    -1 for a null key
    key             bytes
    valueLength     varint    -1 for a null value (a tombstone)
    value           bytes
    headersCount    varint
    headers         [headerKeyLength varint, headerKey utf-8,
                     headerValueLength varint (-1 = null), headerValue bytes] ...

Timestamps: in a CreateTime batch each record's timestamp is baseTimestamp + delta;
in a LogAppendTime batch (attributes bit 3) every record's timestamp is the batch's
maxTimestamp, the broker's append time, as Java's ``DefaultRecordBatch`` reports it.

kio (``kio.records``) reads and writes this format too, but it has no codecs,
trusts length fields, rounds timestamps to whole seconds, builds a frozen dataclass
per header and goes through ``io.BytesIO`` for each record. This module goes
beyond it in four ways: compression, hostile input (every length is checked
against the bytes that remain before anything is sliced or allocated, and only
:class:`CorruptRecordError` escapes), millisecond timestamps, and speed (records
are encoded into one list joined once, varints of common sizes come from a table,
and records are decoded by :mod:`odradek.records.fast_decode`'s record loop, in C
when the extension is built).

Header keys are decoded as UTF-8 with ``surrogateescape`` and encoded the same way,
so keys that are not valid UTF-8 (librdkafka allows any bytes) survive a decode /
re-encode unchanged instead of failing the whole batch.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from odradek.records.compression import Compression, compress, decompress
from odradek.records.errors import CorruptRecordError
from odradek.records.fast_decode import decode_records_into
from odradek.records.header import (
    ATTRIBUTES_POS,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_POS,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    check_crc,
    parse_header,
    peek_batch_size,
)
from odradek.records.varint import (
    _CACHE,
    _CACHE_MAX,
    _CACHE_MIN,
    encode_varint,
    encode_varlong,
)

__all__ = [
    "EncodedRecords",
    "build_encoded_batch",
    "DecodedBatch",
    "DecodedRecord",
    "Record",
    "build_batch",
    "decode_batch",
    "decode_batches",
    "rebuild_batch",
]

Header = tuple[str, bytes | None]

# The header fields from batchLength on; CRC written as 0 first, patched after.
_HEADER_TAIL = struct.Struct(">iibIhiqqqhii")
_CRC = struct.Struct(">I")
_BASE_OFFSET = struct.Struct(">q")

_NULL = b"\x01"  # varint -1
_NO_HEADERS = b"\x00"  # varint 0
_ZERO_ATTRIBUTES = b"\x00"
_MAX_RECORDS = 2**31 - 1


@dataclass(slots=True)
class Record:
    """A record as a producer hands it in. ``timestamp_ms=None`` means "now"."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class EncodedRecords:
    """Records already encoded as a batch's uncompressed records section.

    For producers that build records in bulk (the Spark sink encodes whole Arrow columns at
    once, :mod:`odradek.spark.encoding`) instead of one :class:`Record` at a time. Record ``i``
    of ``section`` must have offset delta ``i``; every timestamp delta is relative to
    ``base_timestamp``. ``len()`` is the record count, as for a list of records.
    """

    section: bytes
    count: int
    base_timestamp: int
    max_timestamp: int

    def __len__(self) -> int:
        return self.count


@dataclass(slots=True)
class DecodedRecord:
    """A record as read from a batch, with its absolute offset and timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    attributes: int = 0


@dataclass(slots=True)
class DecodedBatch:
    """A batch header and its decoded records."""

    header: BatchHeader
    records: list[DecodedRecord]

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    @property
    def size(self) -> int:
        """Bytes the batch occupies on disk and on the wire."""
        return self.header.size

    @property
    def compression(self) -> Compression:
        return Compression(self.header.attributes & COMPRESSION_MASK)

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def is_log_append_time(self) -> bool:
        return self.header.is_log_append_time

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.header.attributes & DELETE_HORIZON_MASK)

    @property
    def producer_id(self) -> int:
        return self.header.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.header.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self.header.base_sequence

    @property
    def partition_leader_epoch(self) -> int:
        return self.header.partition_leader_epoch

    @property
    def max_timestamp(self) -> int:
        return self.header.max_timestamp


# --------------------------------------------------------------------------- encode


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _encode_headers(headers: Sequence[Header]) -> bytes:
    parts = [encode_varint(len(headers))]
    for key, value in headers:
        raw_key = key.encode("utf-8", "surrogateescape") if isinstance(key, str) else bytes(key)
        parts.append(encode_varint(len(raw_key)))
        parts.append(raw_key)
        if value is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def _encode_records(
    records: Sequence[Record] | Sequence[DecodedRecord],
    base_timestamp: int,
    default_timestamp: int,
    base_offset: int | None,
) -> bytes:
    """The records section, uncompressed.

    Offset deltas are the position in ``records`` when ``base_offset`` is None
    (a fresh batch), else each record's own ``offset - base_offset`` (a rebuilt one).
    """
    parts: list[bytes | bytearray | memoryview] = []
    cache = _CACHE
    low = _CACHE_MIN
    high = _CACHE_MAX
    for position, record in enumerate(records):
        timestamp = record.timestamp_ms
        delta = (default_timestamp if timestamp is None else timestamp) - base_timestamp
        ts_bytes = cache[delta - low] if low <= delta <= high else encode_varlong(delta)
        index = position if base_offset is None else record.offset - base_offset  # type: ignore[union-attr]
        offset_bytes = cache[index - low] if low <= index <= high else encode_varint(index)
        key = record.key
        if key is None:
            key = b""
            key_len_bytes = _NULL
            size = 1
        else:
            size = len(key)
            key_len_bytes = cache[size - low] if size <= high else encode_varint(size)
            size += len(key_len_bytes)
        value = record.value
        if value is None:
            value = b""
            value_len_bytes = _NULL
            size += 1
        else:
            value_size = len(value)
            value_len_bytes = (
                cache[value_size - low] if value_size <= high else encode_varint(value_size)
            )
            size += value_size + len(value_len_bytes)
        headers = record.headers
        header_bytes = _encode_headers(headers) if headers else _NO_HEADERS
        size += 1 + len(ts_bytes) + len(offset_bytes) + len(header_bytes)
        parts += (
            cache[size - low] if size <= high else encode_varint(size),
            _ZERO_ATTRIBUTES,
            ts_bytes,
            offset_bytes,
            key_len_bytes,
            key,
            value_len_bytes,
            value,
            header_bytes,
        )
    try:
        return b"".join(parts)
    except TypeError as exc:
        raise TypeError(f"record keys, values and header values must be bytes: {exc}") from None


def _finish(
    records_section: bytes,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytearray:
    """Prepend the header to ``records_section`` (already compressed) and stamp the CRC."""
    out = bytearray(HEADER_SIZE)
    out += records_section
    try:
        _BASE_OFFSET.pack_into(out, 0, base_offset)
        _HEADER_TAIL.pack_into(
            out,
            8,
            len(out) - LOG_OVERHEAD,
            partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
    except struct.error as exc:
        raise ValueError(f"a batch header field is out of range: {exc}") from None
    _CRC.pack_into(out, CRC_POS, crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return out


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    log_append_time: bool = False,
    now_ms: int | None = None,
    compression_level: int | None = None,
) -> bytearray:
    """Encode ``records`` as one batch; record ``i`` gets offset ``base_offset + i``.

    Records without a timestamp get ``now_ms`` (the wall clock if None). With
    ``log_append_time`` the batch is marked LogAppendTime and its maxTimestamp is
    ``now_ms``, which readers then report for every record. Raises ValueError for an
    empty batch, a transactional batch without a producer id, or out-of-range fields.
    """
    count = len(records)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    if count > _MAX_RECORDS:
        raise ValueError(f"{count} records do not fit one batch")
    if transactional and producer_id < 0:
        raise ValueError("a transactional batch needs a producer id")
    compression = Compression(compression)
    if now_ms is None:
        now_ms = _now_ms()
    first_timestamp = records[0].timestamp_ms
    base_timestamp = now_ms if first_timestamp is None else first_timestamp
    max_timestamp = base_timestamp
    for record in records:
        timestamp = record.timestamp_ms
        if timestamp is None:
            timestamp = now_ms
        if timestamp > max_timestamp:
            max_timestamp = timestamp
    attributes = int(compression)
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
        max_timestamp = now_ms
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    section = _encode_records(records, base_timestamp, now_ms, None)
    if compression is not Compression.NONE:
        section = compress(compression, section, compression_level)
    return _finish(
        section,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=count - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=count,
    )


def build_encoded_batch(
    records: EncodedRecords,
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    compression_level: int | None = None,
) -> bytearray:
    """:func:`build_batch` for records already encoded: compress the section, add the header."""
    if records.count <= 0:
        raise ValueError("a record batch needs at least one record")
    if records.count > _MAX_RECORDS:
        raise ValueError(f"{records.count} records do not fit one batch")
    if transactional and producer_id < 0:
        raise ValueError("a transactional batch needs a producer id")
    compression = Compression(compression)
    section = records.section
    if compression is not Compression.NONE:
        section = compress(compression, section, compression_level)
    attributes = int(compression)
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    return _finish(
        section,
        base_offset=base_offset,
        partition_leader_epoch=-1,
        attributes=attributes,
        last_offset_delta=records.count - 1,
        base_timestamp=records.base_timestamp,
        max_timestamp=records.max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=records.count,
    )


def rebuild_batch(
    batch: DecodedBatch,
    records: Sequence[DecodedRecord] | None = None,
    *,
    compression: Compression | None = None,
    compression_level: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytearray:
    """Re-encode ``batch`` with a subset of its records or another codec.

    For the log cleaner (compaction keeps some records) and for a broker that must
    recompress to the topic's ``compression.type``. As Kafka's cleaner does, the
    result keeps the original baseOffset and lastOffsetDelta (so producer state and
    sequence numbers still line up), the producer fields, the leader epoch and the
    timestamp type, transactional and control flags; records keep their offsets and
    timestamps. ``records`` may be empty: Kafka then keeps an empty batch so the
    producer's last sequence survives compaction. ``delete_horizon_ms`` stores a
    delete horizon (KIP-534) in baseTimestamp and sets attributes bit 6.
    """
    header = batch.header
    kept = batch.records if records is None else records
    codec = batch.compression if compression is None else Compression(compression)
    log_append_time = header.is_log_append_time
    for record in kept:
        if not header.base_offset <= record.offset <= header.last_offset:
            raise ValueError(
                f"record offset {record.offset} is outside the batch's "
                f"[{header.base_offset}, {header.last_offset}]"
            )
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    elif kept:
        base_timestamp = kept[0].timestamp_ms
    else:
        base_timestamp = header.base_timestamp
    if log_append_time or not kept:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(record.timestamp_ms for record in kept)
    attributes = (header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)) | int(codec)
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    section = _encode_records(kept, base_timestamp, base_timestamp, header.base_offset)
    if codec is not Compression.NONE and kept:
        section = compress(codec, section, compression_level)
    elif not kept:
        attributes &= ~COMPRESSION_MASK  # nothing to compress; Java writes an empty section
    return _finish(
        section,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=len(kept),
    )


# --------------------------------------------------------------------------- decode


def _decode_records(
    data: bytes | memoryview, header: BatchHeader, where: int
) -> list[DecodedRecord]:
    """Decode ``header.records_count`` records that must fill ``data`` exactly (every
    record: offsets below int64 exist only in corrupt batches)."""
    records: list[DecodedRecord] = []
    decode_records_into(
        data, header, where, DecodedRecord, {}, records.append, min_offset=-(2**63),
        with_attributes=True,
    )  # fmt: skip
    return records


def decode_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    max_uncompressed: int | None = None,
) -> DecodedBatch:
    """Decode the whole batch at ``pos``: header, CRC (unless told not to), records.

    ``max_uncompressed`` bounds the decompressed size of the records section (a
    defence against decompression bombs); None means no bound. Any malformed,
    truncated or corrupt input raises CorruptRecordError and nothing else.
    """
    if pos < 0:
        raise ValueError(f"batch position {pos} is negative")
    header = parse_header(buf, pos)
    size = header.size
    if len(buf) - pos < size:
        raise CorruptRecordError(
            f"batch at byte {pos} is truncated: batchLength says {size} bytes, "
            f"{len(buf) - pos} present"
        )
    if verify_crc:
        check_crc(buf, pos, header)
    if header.records_count == 0:
        # An empty batch (left by compaction to keep producer state) has nothing to
        # decode; like Java's DefaultRecordBatch, do not even look at the section.
        return DecodedBatch(header, [])
    codec = header.attributes & COMPRESSION_MASK
    section = memoryview(buf)[pos + HEADER_SIZE : pos + size]
    if codec == Compression.NONE:
        data: bytes | memoryview = section
    elif codec <= Compression.ZSTD:
        data = decompress(Compression(codec), section, max_uncompressed)
    else:
        raise CorruptRecordError(f"batch at byte {pos} names unknown codec {codec}")
    return DecodedBatch(header, _decode_records(data, header, pos))


def decode_batches(
    buf: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_uncompressed: int | None = None,
) -> Iterator[DecodedBatch]:
    """Decode consecutive batches; stop quietly at a trailing partial batch.

    A fetch response or a log read may end in the middle of a batch; that tail is
    not an error. A whole batch that is malformed raises CorruptRecordError.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        size = peek_batch_size(buf, pos)
        if size is None or end - pos < size:
            return
        yield decode_batch(buf, pos, verify_crc=verify_crc, max_uncompressed=max_uncompressed)
        pos += size
