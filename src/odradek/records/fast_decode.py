"""Client-side fast path: decode a batch's records straight into the caller's record objects.

:func:`odradek.records.batch.decode_batch` builds a :class:`DecodedRecord` per record, which a
consumer then copies into its own record type: two objects per record, and in pure Python the
allocation and the garbage collector's walks over them cost as much as the decoding. Here the
records are built once, as instances of the caller's ``__slots__`` class, filled through the
slot descriptors (no ``__init__`` call, which for a frozen dataclass is one
``object.__setattr__`` per field), and records before ``min_offset`` are skipped before anything
is built for them.

The checks are those of ``batch._decode_records``, in the same order, and only
:class:`CorruptRecordError` escapes for malformed input (the tests feed both decoders the same
inputs). The broker does not use this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from odradek.records.batch import MIN_RECORD_SIZE, _decode_headers
from odradek.records.compression import Compression, decompress
from odradek.records.errors import CorruptRecordError
from odradek.records.header import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    parse_header,
)
from odradek.records.varint import decode_varint, decode_varlong

__all__ = ["NO_HEADERS", "ReadOnlyEmptyList", "decode_batch_into"]

_MIN_RECORD_BODY = MIN_RECORD_SIZE - 1
# The slots every target class must have; the decoder fills them per record.
_PER_RECORD = ("offset", "timestamp_ms", "key", "value", "headers")


class ReadOnlyEmptyList(list):  # type: ignore[type-arg]
    """An empty list that refuses to change: one shared instance stands for "no headers" in
    every decoded record instead of a new list each (half the consumer's tracked objects,
    and so of its garbage collection). Java's consumer makes a fetched record's headers
    read-only too (``RecordHeaders.setReadOnly``)."""

    __slots__ = ()

    def _refuse(self, *_args: object, **_kwargs: object) -> Any:
        raise TypeError("a fetched record's headers are read-only")

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse


NO_HEADERS = ReadOnlyEmptyList()


def decode_batch_into(
    buf: bytes | bytearray | memoryview,
    pos: int,
    cls: type,
    fixed: Mapping[str, Any],
    append: Callable[[Any], Any],
    *,
    min_offset: int = 0,
    max_uncompressed: int | None = None,
    no_headers: list[tuple[str, bytes | None]] | None = None,
) -> tuple[BatchHeader, int]:
    """Decode the batch at ``pos`` (its CRC already checked by the caller) into ``cls`` objects.

    ``cls`` has ``__slots__`` including offset, timestamp_ms, key, value and headers (a list;
    records without headers all get ``no_headers`` when given, a read-only empty list such as
    :data:`NO_HEADERS`, else a fresh list each); ``fixed`` gives the value of each other
    slot, the same for every record (topic, partition...). Each record at or after
    ``min_offset`` is passed to ``append``. Returns the batch header and how many records
    were appended.
    """
    header = parse_header(buf, pos)
    size = header.size
    if len(buf) - pos < size:
        raise CorruptRecordError(
            f"batch at byte {pos} is truncated: batchLength says {size} bytes, "
            f"{len(buf) - pos} present"
        )
    if header.records_count == 0:
        return header, 0
    codec = header.attributes & COMPRESSION_MASK
    section = memoryview(buf)[pos + HEADER_SIZE : pos + size]
    if codec == Compression.NONE:
        data = bytes(section)
    elif codec <= Compression.ZSTD:
        data = decompress(Compression(codec), section, max_uncompressed)
    else:
        raise CorruptRecordError(f"batch at byte {pos} names unknown codec {codec}")
    slots = cls.__dict__
    constant = tuple((slots[name].__set__, value) for name, value in fixed.items())
    set_offset, set_timestamp, set_key, set_value, set_headers = (
        slots[name].__set__ for name in _PER_RECORD
    )
    return header, _decode(
        data, header, pos, cls, constant, set_offset, set_timestamp, set_key, set_value,
        set_headers, append, min_offset, no_headers,
    )  # fmt: skip


def _decode(
    data: bytes,
    header: BatchHeader,
    where: int,
    cls: type,
    constant: tuple[tuple[Callable[[Any, Any], None], Any], ...],
    set_offset: Callable[[Any, Any], None],
    set_timestamp: Callable[[Any, Any], None],
    set_key: Callable[[Any, Any], None],
    set_value: Callable[[Any, Any], None],
    set_headers: Callable[[Any, Any], None],
    append: Callable[[Any], Any],
    min_offset: int,
    no_headers: list[tuple[str, bytes | None]] | None,
) -> int:
    count = header.records_count
    end = len(data)
    if count * MIN_RECORD_SIZE > end:
        raise CorruptRecordError(
            f"batch at byte {where} claims {count} records but its records section "
            f"has only {end} bytes"
        )
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    new = object.__new__
    if len(constant) == 4:  # the consumer's case, unrolled
        (s0, v0), (s1, v1), (s2, v2), (s3, v3) = constant
    else:
        s0 = s1 = s2 = s3 = None
    skipped = 0
    index = 0
    pos = 0
    try:
        for index in range(count):  # noqa: B007 (index names the record in the error below)
            # Varints: one- and two-byte ones inline, the rest via decode_varint.
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                byte = (byte & 0x7F) | (data[pos + 1] << 7)
                length = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                length, pos = decode_varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_BODY or record_end > end:
                raise CorruptRecordError(
                    f"record at byte {pos} of batch at byte {where} has impossible "
                    f"length {length} ({end - pos} bytes remain)"
                )
            pos += 1  # attributes: unused
            byte = data[pos]
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                byte = (byte & 0x7F) | (data[pos + 1] << 7)
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                timestamp_delta, pos = decode_varlong(data, pos)
            byte = data[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                byte = (byte & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                offset_delta, pos = decode_varint(data, pos)
            byte = data[pos]
            if byte == 1:  # varint -1: no key, the usual case
                key_length = -1
                pos += 1
            elif byte < 0x80:
                key_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                byte = (byte & 0x7F) | (data[pos + 1] << 7)
                key_length = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                key_length, pos = decode_varint(data, pos)
            if key_length < 0:
                if key_length != -1:
                    raise CorruptRecordError(f"negative key length {key_length}")
                key = None
            else:
                stop = pos + key_length
                if stop > record_end:
                    raise CorruptRecordError(
                        f"key of {key_length} bytes overruns its record at byte {pos}"
                    )
                key = data[pos:stop]
                pos = stop
            byte = data[pos]
            if byte < 0x80:
                value_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                byte = (byte & 0x7F) | (data[pos + 1] << 7)
                value_length = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                value_length, pos = decode_varint(data, pos)
            if value_length < 0:
                if value_length != -1:
                    raise CorruptRecordError(f"negative value length {value_length}")
                value = None
            else:
                stop = pos + value_length
                if stop > record_end:
                    raise CorruptRecordError(
                        f"value of {value_length} bytes overruns its record at byte {pos}"
                    )
                value = data[pos:stop]
                pos = stop
            if data[pos] == 0:
                headers = [] if no_headers is None else no_headers
                pos += 1
            else:
                headers, pos = _decode_headers(data, pos, record_end)
            if pos != record_end:
                raise CorruptRecordError(
                    f"record of batch at byte {where} declares {length} bytes "
                    f"but its fields take {length + pos - record_end}"
                )
            offset = base_offset + offset_delta
            if offset < min_offset:
                skipped += 1
                continue  # a compressed batch comes whole, even its consumed part
            record = new(cls)
            if s0 is not None:
                s0(record, v0)
                s1(record, v1)  # type: ignore[misc]
                s2(record, v2)  # type: ignore[misc]
                s3(record, v3)  # type: ignore[misc]
            else:
                for setter, fixed_value in constant:
                    setter(record, fixed_value)
            set_offset(record, offset)
            set_timestamp(
                record, base_timestamp + timestamp_delta if append_time is None else append_time
            )
            set_key(record, key)
            set_value(record, value)
            set_headers(record, headers)
            append(record)
    except IndexError:
        raise CorruptRecordError(
            f"records of batch at byte {where} are truncated after {index} records"
        ) from None
    if pos != end:
        raise CorruptRecordError(
            f"batch at byte {where} has {end - pos} bytes left after its {count} records"
        )
    return count - skipped

