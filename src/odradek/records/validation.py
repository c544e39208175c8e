"""Checking a produced batch's records against its header, as Kafka's LogValidator does.

The header fast path (:mod:`odradek.records.header`) checks framing and the CRC. The
CRC only proves the bytes arrived as the client wrote them, not that the client wrote
a sound batch, so before a leader stores a batch it walks every record once:

* exactly ``recordsCount`` records fill the records section, each exactly its declared
  ``length``, with no byte left over (Kafka: "Incorrect declared batch size, premature
  EOF reached" / "records still remaining"); every varint in range; key, value and
  header lengths inside their record; header counts and header key lengths >= 0;
* record ``i`` has offset delta ``i``. Kafka never stores other deltas either: it
  rewrites a compressed batch whose deltas are off, and trusts an uncompressed one.
  Every magic-2 client (Java, librdkafka, kafka-python, aiokafka) writes 0..n-1, so a
  batch that does not is refused instead of rebuilt;
* the records' smallest and largest timestamps are returned so the log can apply
  ``message.timestamp.before/after.max.ms`` to every record (Kafka checks each
  record, not just the header) and store the true maxTimestamp in the header, as
  Kafka's ``setMaxTimestamp`` does. Kafka does not reject a record whose timestamp
  is below the batch's baseTimestamp or above its maxTimestamp, so neither does this.

A compressed section is decompressed first, bounded by :func:`uncompressed_limit`.

Errors: records that do not match the header raise :class:`InvalidRecordsError`
(Kafka's INVALID_RECORD); an undecodable compressed stream raises
:class:`CorruptRecordError` (CORRUPT_MESSAGE); a section inflating past the bound
raises :class:`UncompressedSizeError`.

The walk builds no objects per record. It runs in C (``_walk.c``, built by
``pip install -e .``; some 40 times faster) when the extension is there, else in
the pure-Python ``_walk`` below, which makes the same decisions and which the tests
run side by side with the C one. ``bench/bench_records.py`` prints what validation
costs relative to an append without it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from crc32c import crc32c

from odradek.records.compression import Compression, decompress
from odradek.records.errors import CorruptRecordError, InvalidRecordsError
from odradek.records.header import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
)
from odradek.records.varint import decode_varint, decode_varlong

try:
    from odradek.records._walk import leader_batch as _c_leader_batch
    from odradek.records._walk import walk as _c_walk
except ImportError:  # not built (no compiler at install time): the Python walk below
    _c_walk = _c_leader_batch = None

__all__ = [
    "MIN_UNCOMPRESSED_LIMIT",
    "UNCOMPRESSED_RATIO",
    "RecordsSummary",
    "leader_batch",
    "records_section",
    "uncompressed_limit",
    "validate_records",
]

NO_TIMESTAMP = -1

# How far a batch's records may inflate, relative to max.message.bytes. Kafka has no
# such bound (it streams records through the decompressor), so it must sit well above
# anything a real client writes: librdkafka, kafka-python and aiokafka cap a batch's
# *uncompressed* size at batch.size (at most ~1 MB by default), and the Java producer
# fills a batch until its estimated compressed size reaches batch.size, which even at
# a 20:1 ratio keeps a 1 MB batch.size below 20 MB uncompressed. A batch past the
# bound is refused with MESSAGE_TOO_LARGE, which the Java producer answers by
# splitting the batch and retrying.
UNCOMPRESSED_RATIO = 64
MIN_UNCOMPRESSED_LIMIT = 1 << 20  # used in place of a smaller max.message.bytes

# The smallest record body after its length varint: attributes, timestampDelta,
# offsetDelta, keyLength, valueLength, headersCount, one byte each.
_MIN_RECORD_BODY = 6
_MIN_RECORD_SIZE = 7


# leader_batch(buffer) -> (header, min_timestamp, max_timestamp, null_keys) | None: the
# header parse, CRC check and record walk of a leader's commonest append in one C call
# (``_walk.c``): ``buffer`` is exactly one uncompressed, non-control batch that passes all
# three. None for anything else, sound or not, and when the extension is not built: the
# caller then runs parse_header, check_crc and validate_records, which decide and word
# every error (storage.log_append.parse_batches; the tests compare both on the same input).
leader_batch = (
    None if _c_leader_batch is None else functools.partial(_c_leader_batch, BatchHeader, crc32c)
)


def uncompressed_limit(max_message_bytes: int) -> int:
    """Largest records section (after decompression) a batch may carry."""
    return UNCOMPRESSED_RATIO * max(max_message_bytes, MIN_UNCOMPRESSED_LIMIT)


@dataclass(frozen=True, slots=True)
class RecordsSummary:
    """What the walk learnt; timestamps are absolute (baseTimestamp + delta)."""

    min_timestamp: int
    max_timestamp: int
    null_keys: int
    uncompressed_size: int


def records_section(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, max_uncompressed: int
) -> tuple[bytes | bytearray | memoryview, int, int]:
    """``(data, start, end)``: the batch's records section, decompressed if need be.

    Uncompressed sections are not copied: ``data`` is ``buf`` itself.
    """
    codec = header.attributes & COMPRESSION_MASK
    start = pos + HEADER_SIZE
    end = pos + header.size
    if codec == Compression.NONE:
        return buf, start, end
    if codec > Compression.ZSTD:
        raise CorruptRecordError(f"batch at byte {pos} names unknown codec {codec}")
    data = decompress(Compression(codec), memoryview(buf)[start:end], max_uncompressed)
    return data, 0, len(data)


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def validate_records(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, *, max_uncompressed: int
) -> RecordsSummary:
    """Walk the records of the batch at ``pos`` (header already parsed and CRC-checked).

    Raises InvalidRecordsError, CorruptRecordError or UncompressedSizeError (see the
    module docstring). For a LogAppendTime batch every record's timestamp is the
    header's maxTimestamp, as readers report it.
    """
    data, start, end = records_section(buf, pos, header, max_uncompressed)
    count = header.records_count
    if count <= 0 or count * _MIN_RECORD_SIZE > end - start:
        raise InvalidRecordsError(
            f"batch at byte {pos} claims {count} records but its records section has "
            f"only {end - start} bytes"
        )
    if _c_walk is not None:
        found = _c_walk(data, start, end, count)
        if isinstance(found, str):
            raise InvalidRecordsError(f"batch at byte {pos}: {found}")
        min_delta, max_delta, null_keys = found
    else:
        min_delta, max_delta, null_keys = _python_walk(data, pos, start, end, count)
    if header.attributes & TIMESTAMP_TYPE_MASK:
        low = high = header.max_timestamp
    else:
        low = header.base_timestamp + min_delta
        high = header.base_timestamp + max_delta
        if not _INT64_MIN <= low <= high <= _INT64_MAX:
            # Java would wrap the sum silently; a timestamp no int64 holds is refused.
            raise InvalidRecordsError(
                f"batch at byte {pos}: a record timestamp (baseTimestamp "
                f"{header.base_timestamp} + delta) does not fit in 64 bits"
            )
    return RecordsSummary(low, high, null_keys, end - start)


def _python_walk(
    data: bytes | bytearray | memoryview, pos: int, start: int, end: int, count: int
) -> tuple[int, int, int]:
    try:
        return _walk(data, start, end, count)
    except IndexError:
        raise InvalidRecordsError(
            f"records of batch at byte {pos} are truncated: premature end of the batch"
        ) from None
    except InvalidRecordsError as exc:
        raise InvalidRecordsError(f"batch at byte {pos}: {exc}") from None
    except CorruptRecordError as exc:  # a varint out of range
        raise InvalidRecordsError(f"batch at byte {pos}: {exc}") from None


def _walk(
    data: bytes | bytearray | memoryview, pos: int, end: int, count: int
) -> tuple[int, int, int]:
    """``(smallest, largest timestampDelta, null keys)`` of ``count`` records filling
    ``data[pos:end]`` exactly. Reading past ``end`` raises IndexError only when ``end``
    is the end of ``data``; every length is checked against its record's end, so a
    walk never leaves the batch without being caught."""
    min_delta = max_delta = None
    null_keys = 0
    for index in range(count):
        # record length (varint; one and two bytes inline)
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
            raise InvalidRecordsError(
                f"record {index} has impossible length {length} ({end - pos} bytes remain)"
            )
        pos += 1  # attributes: unused in magic 2, and Kafka does not check them
        # timestampDelta (varlong)
        byte = data[pos]
        if byte < 0x80:
            delta = (byte >> 1) ^ -(byte & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            byte = (byte & 0x7F) | (data[pos + 1] << 7)
            delta = (byte >> 1) ^ -(byte & 1)
            pos += 2
        else:
            delta, pos = decode_varlong(data, pos)
        if min_delta is None:
            min_delta = max_delta = delta
        elif delta > max_delta:
            max_delta = delta
        elif delta < min_delta:
            min_delta = delta
        # offsetDelta (varint), which must be the record's position
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
        if offset_delta != index:
            raise InvalidRecordsError(f"record {index} has offset delta {offset_delta}")
        # keyLength, key
        byte = data[pos]
        if byte < 0x80:
            size = (byte >> 1) ^ -(byte & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            byte = (byte & 0x7F) | (data[pos + 1] << 7)
            size = (byte >> 1) ^ -(byte & 1)
            pos += 2
        else:
            size, pos = decode_varint(data, pos)
        if size >= 0:
            pos += size
        elif size == -1:
            null_keys += 1
        else:
            raise InvalidRecordsError(f"record {index} has key length {size}")
        if pos >= record_end:
            raise InvalidRecordsError(f"key of record {index} overruns the record")
        # valueLength, value
        byte = data[pos]
        if byte < 0x80:
            size = (byte >> 1) ^ -(byte & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            byte = (byte & 0x7F) | (data[pos + 1] << 7)
            size = (byte >> 1) ^ -(byte & 1)
            pos += 2
        else:
            size, pos = decode_varint(data, pos)
        if size >= 0:
            pos += size
        elif size != -1:
            raise InvalidRecordsError(f"record {index} has value length {size}")
        if pos >= record_end:
            raise InvalidRecordsError(f"value of record {index} overruns the record")
        # headersCount, headers
        if data[pos] == 0:
            pos += 1
        else:
            pos = _walk_headers(data, pos, record_end, index)
        if pos != record_end:
            raise InvalidRecordsError(
                f"record {index} declares {length} bytes but its fields take "
                f"{length + pos - record_end}"
            )
    if pos != end:
        raise InvalidRecordsError(f"{end - pos} bytes remain after the {count} records")
    assert min_delta is not None and max_delta is not None  # count >= 1
    return min_delta, max_delta, null_keys


def _walk_headers(
    data: bytes | bytearray | memoryview, pos: int, record_end: int, index: int
) -> int:
    count, pos = decode_varint(data, pos)
    if count < 0 or count * 2 > record_end - pos:
        raise InvalidRecordsError(f"record {index} has impossible header count {count}")
    for _ in range(count):
        size, pos = decode_varint(data, pos)
        if size < 0:
            raise InvalidRecordsError(f"record {index} has header key length {size}")
        pos += size
        if pos >= record_end:
            raise InvalidRecordsError(f"a header key of record {index} overruns the record")
        size, pos = decode_varint(data, pos)
        if size >= 0:
            pos += size
        elif size != -1:
            raise InvalidRecordsError(f"record {index} has header value length {size}")
        if pos > record_end:
            raise InvalidRecordsError(f"a header value of record {index} overruns the record")
    return pos
