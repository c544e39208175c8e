"""The per-record half of Kafka's LogValidator, applied to a batch a leader appends.

:mod:`odradek.records.validation` walks the records; this module applies the topic's
configuration to what the walk found and turns its errors into the storage errors that
carry Kafka's codes:

=====================================================  ======================
records do not match the header (count, lengths, ...)  INVALID_RECORD (87)
compressed stream that cannot be decompressed          CORRUPT_MESSAGE (2)
records inflating past the bound (decompression bomb)  MESSAGE_TOO_LARGE (10)
a keyless record on a compacted topic                  INVALID_RECORD (87)
a CreateTime record outside message.timestamp.*.max.ms INVALID_TIMESTAMP (32)
=====================================================  ======================
"""

from __future__ import annotations

import struct

from odradek.records.batch import DecodedBatch, decode_batch
from odradek.records.errors import CorruptRecordError, InvalidRecordsError, UncompressedSizeError
from odradek.records.header import CRC_POS, BatchHeader, compute_crc
from odradek.records.validation import NO_TIMESTAMP, uncompressed_limit, validate_records
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptBatchError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)

__all__ = ["apply_record_checks", "check_batch_records", "decode_bounded"]

_MAX_TIMESTAMP_POS = 35
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


def check_batch_records(
    buf: bytearray | memoryview, pos: int, header: BatchHeader, config: LogConfig, now_ms: int
) -> BatchHeader:
    """Validate the records of the batch at ``pos``; return its header as it will be stored.

    The header differs from ``header`` only in maxTimestamp: like Kafka's
    ``setMaxTimestamp``, a CreateTime batch stores the largest timestamp of its records
    (its CRC is recomputed in place), whatever the client wrote there.
    """
    limit = uncompressed_limit(config.max_message_bytes)
    try:
        summary = validate_records(buf, pos, header, max_uncompressed=limit)
    except UncompressedSizeError as exc:
        raise RecordTooLargeError(
            f"records of the batch at byte {pos} decompress to more than {limit} bytes "
            f"(64 x max.message.bytes {config.max_message_bytes}): {exc}"
        ) from None
    except InvalidRecordsError as exc:
        raise InvalidRecordError(str(exc)) from None
    except CorruptRecordError as exc:
        raise CorruptBatchError(str(exc)) from None
    return apply_record_checks(
        buf, pos, header, config, now_ms, summary.min_timestamp, summary.max_timestamp,
        summary.null_keys,
    )


def apply_record_checks(
    buf: bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    config: LogConfig,
    now_ms: int,
    min_timestamp: int,
    max_timestamp: int,
    null_keys: int,
) -> BatchHeader:
    """The half of :func:`check_batch_records` after the walk, given what it found (the
    records' smallest and largest timestamps and their null keys)."""
    if null_keys and config.compact and not header.is_control:
        raise InvalidRecordError(
            "compacted topic cannot accept a record without a key (cleanup.policy=compact)"
        )
    if config.log_append_time:
        return header  # the log stamps the broker's time on these batches
    earliest = now_ms - config.timestamp_before_max_ms
    latest = now_ms + config.timestamp_after_max_ms
    if min_timestamp < earliest or max_timestamp > latest:
        _check_each_timestamp(
            buf, pos, earliest, latest, uncompressed_limit(config.max_message_bytes)
        )
    if max_timestamp != header.max_timestamp and not header.is_log_append_time:
        _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_POS, max_timestamp)
        _UINT32.pack_into(buf, pos + CRC_POS, compute_crc(buf, pos, header.size))
        header = header._replace(max_timestamp=max_timestamp)
    return header


def _check_each_timestamp(
    buf: bytearray | memoryview, pos: int, earliest: int, latest: int, limit: int
) -> None:
    """The slow path, taken only when some timestamp is out of bounds: as Kafka does,
    a record without a timestamp (-1) is exempt, so look at each record."""
    for record in decode_bounded(buf, pos, limit).records:
        timestamp = record.timestamp_ms
        if timestamp != NO_TIMESTAMP and not earliest <= timestamp <= latest:
            raise InvalidTimestampError(
                f"timestamp {timestamp} of the record at offset delta "
                f"{record.offset - _base_offset(buf, pos)} is out of range: it must be within "
                f"[{earliest}, {latest}] (message.timestamp.before/after.max.ms)"
            )


def _base_offset(buf: bytearray | memoryview, pos: int) -> int:
    return int(_INT64.unpack_from(buf, pos)[0])


def decode_bounded(buf: bytes | bytearray | memoryview, pos: int, limit: int) -> DecodedBatch:
    """decode_batch with the decompression bound, errors mapped as on produce."""
    try:
        return decode_batch(buf, pos, verify_crc=False, max_uncompressed=limit)
    except UncompressedSizeError as exc:
        raise RecordTooLargeError(str(exc)) from None
    except CorruptRecordError as exc:
        raise CorruptBatchError(str(exc)) from None
