"""Decoding a batch's records straight into the caller's record objects.

One record loop for every reader: :func:`odradek.records.batch.decode_batch` (the broker,
tools) decodes into :class:`~odradek.records.batch.DecodedRecord`, the consumer
(:func:`decode_batch_into`) into its own ``ConsumerRecord`` without an intermediate object.
The records are built as instances of the caller's ``__slots__`` class, filled through the
slot descriptors (no ``__init__`` call, which for a frozen dataclass is one
``object.__setattr__`` per field), and records before ``min_offset`` are checked but not
built.

The loop runs in C (``decode_records`` in ``_walk.c``, built by ``pip install -e .``) or,
without a compiler, in pure Python (:func:`_decode` below). Both accept exactly the same
sections and build the same records; for malformed input only :class:`CorruptRecordError`
escapes (the tests feed both the same valid, mutated and truncated batches). The C loop
also leaves records that hold only atomic values and ``no_headers`` untracked by the
garbage collector (they cannot be in a cycle), which the consumer's buffers of small
records feel most.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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

try:
    from odradek.records._walk import decode_records as _c_decode
except ImportError:  # no C compiler at install time: the pure-Python loop below
    _c_decode = None

__all__ = [
    "MIN_RECORD_SIZE",
    "NO_HEADERS",
    "ReadOnlyEmptyList",
    "decode_batch_into",
    "decode_records_into",
]

Header = tuple[str, bytes | None]

# The smallest possible record: length, attributes, timestampDelta, offsetDelta,
# keyLength, valueLength and headersCount, one byte each.
MIN_RECORD_SIZE = 7
_MIN_RECORD_BODY = MIN_RECORD_SIZE - 1
_MIN_HEADER_SIZE = 2  # keyLength + valueLength
# The slots every target class must have; the decoder fills them per record.
_PER_RECORD = ("offset", "timestamp_ms", "key", "value", "headers")
_MAX_CONSTANTS = 16  # decode_records' limit on slots with one value for all records


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
        data: bytes | memoryview = section
    elif codec <= Compression.ZSTD:
        data = decompress(Compression(codec), section, max_uncompressed)
    else:
        raise CorruptRecordError(f"batch at byte {pos} names unknown codec {codec}")
    return header, decode_records_into(
        data, header, pos, cls, fixed, append, min_offset=min_offset, no_headers=no_headers
    )


_LAYOUTS: dict[tuple[type, bool], tuple[Any, ...]] = {}


def _layout(cls: type, with_attributes: bool) -> tuple[Any, ...]:
    """The member descriptors of the per-record slots of ``cls`` (attributes: None if not
    kept), looked up once per class."""
    key = (cls, with_attributes)
    layout = _LAYOUTS.get(key)
    if layout is None:
        names = _PER_RECORD + (("attributes",) if with_attributes else ())
        found = tuple(getattr(cls, name) for name in names)
        layout = _LAYOUTS[key] = found if with_attributes else (*found, None)
    return layout


def decode_records_into(
    data: bytes | bytearray | memoryview,
    header: BatchHeader,
    where: int,
    cls: type,
    fixed: Mapping[str, Any],
    append: Callable[[Any], Any],
    *,
    min_offset: int = 0,
    no_headers: list[tuple[str, bytes | None]] | None = None,
    with_attributes: bool = False,
) -> int:
    """Decode ``header.records_count`` records that must fill ``data`` (the uncompressed
    records section of the batch at byte ``where``) into ``cls`` objects; see
    :func:`decode_batch_into`. ``with_attributes`` fills an ``attributes`` slot with each
    record's attributes byte too. Returns how many records were appended."""
    count = header.records_count
    if count * MIN_RECORD_SIZE > len(data):
        raise CorruptRecordError(
            f"batch at byte {where} claims {count} records but its records section "
            f"has only {len(data)} bytes"
        )
    slots = _layout(cls, with_attributes)
    constants = tuple((getattr(cls, name), value) for name, value in fixed.items())
    append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    if _c_decode is not None and len(constants) <= _MAX_CONSTANTS:
        found = _c_decode(
            data, count, header.base_offset, header.base_timestamp, append_time, cls, slots,
            constants, append, min_offset, no_headers,
        )  # fmt: skip
        if type(found) is str:
            raise CorruptRecordError(f"batch at byte {where}: {found}")
        return found  # type: ignore[no-any-return]
    setters = tuple(None if slot is None else slot.__set__ for slot in slots)
    return _decode(
        data if type(data) is bytes else bytes(data), header, where, cls,
        tuple((slot.__set__, value) for slot, value in constants), *setters, append_time,
        append, min_offset, no_headers,
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
    set_attributes: Callable[[Any, Any], None] | None,
    append_time: int | None,
    append: Callable[[Any], Any],
    min_offset: int,
    no_headers: list[tuple[str, bytes | None]] | None,
) -> int:
    """The pure-Python record loop (the C one's reference and fallback)."""
    count = header.records_count
    end = len(data)
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
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
            attributes_at = pos
            pos += 1
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
            if set_attributes is not None:
                set_attributes(record, data[attributes_at])
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


def _decode_headers(data: bytes, pos: int, record_end: int) -> tuple[list[Header], int]:
    count, pos = decode_varint(data, pos)
    if count < 0 or count * _MIN_HEADER_SIZE > record_end - pos:
        raise CorruptRecordError(f"impossible record header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        key_length, pos = decode_varint(data, pos)
        stop = pos + key_length
        if key_length < 0 or stop > record_end:
            raise CorruptRecordError(f"impossible record header key length {key_length}")
        key = data[pos:stop].decode("utf-8", "surrogateescape")
        value_length, pos = decode_varint(data, stop)
        if value_length < 0:
            if value_length != -1:
                raise CorruptRecordError(f"negative record header value length {value_length}")
            value = None
        else:
            stop = pos + value_length
            if stop > record_end:
                raise CorruptRecordError(
                    f"record header value of {value_length} bytes overruns its record"
                )
            value = data[pos:stop]
            pos = stop
        headers.append((key, value))
    return headers, pos

