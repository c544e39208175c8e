"""The fixed 61-byte header of a record batch v2 (magic 2), read without decoding records.

On-disk and on-the-wire layout (big-endian), byte offsets from the start of the batch::

    0  baseOffset            int64
    8  batchLength           int32   bytes that follow this field (total size - 12)
    12 partitionLeaderEpoch  int32
    16 magic                 int8    always 2 here
    17 crc                   uint32  CRC32C of bytes [21, end of batch)
    21 attributes            int16   bits 0-2 codec, 3 timestamp type, 4 transactional,
                                     5 control, 6 has delete horizon
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64   (firstTimestamp)
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records ...

This is the hot path of produce, fetch and recovery: the broker parses this header,
checks the CRC over the bytes in place and rewrites the base offset; it never decodes
individual records there.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from odradek.records.errors import CorruptRecordError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted in batchLength
MAGIC_V2 = 2

BASE_OFFSET_POS = 0
BATCH_LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
MAX_TIMESTAMP_POS = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_LENGTH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
_new_tuple = tuple.__new__


class BatchHeader(NamedTuple):
    """The decoded 61-byte header. ``size`` is the whole batch in bytes (batchLength + 12)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 max as Kafka does."""
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def peek_batch_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Total size of the batch starting at ``pos``, or None if fewer than 12 bytes remain.

    Raises CorruptRecordError if the length field is impossible (smaller than a header).
    Never trusts the length to allocate anything.
    """
    if pos < 0:
        raise CorruptRecordError(f"batch position {pos} is negative")
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    (batch_length,) = _LENGTH.unpack_from(buf, pos + BATCH_LENGTH_POS)
    if batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at byte {pos} has batchLength {batch_length}, "
            f"smaller than the {HEADER_SIZE - LOG_OVERHEAD}-byte minimum"
        )
    return batch_length + LOG_OVERHEAD


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header of the batch at ``pos``. Checks length and magic, not the CRC."""
    if pos < 0:
        raise CorruptRecordError(f"batch position {pos} is negative")
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at byte {pos} is truncated: {len(buf) - pos} bytes, header needs {HEADER_SIZE}"
        )
    # _HEADER unpacks the 13 fields in order: tuple.__new__ is what _make calls, minus
    # a Python-level call (this runs for every batch produced or fetched by a follower).
    header: BatchHeader = _new_tuple(BatchHeader, _HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(
            f"batch at byte {pos} has magic {header.magic}; only record batch v2 is supported"
        )
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at byte {pos} has batchLength {header.batch_length}, too small for a header"
        )
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError(
            f"batch at byte {pos} has negative record count or last offset delta"
        )
    return header


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC32C of the batch's CRC-covered range: from attributes to the end of the batch."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_POS : pos + size])


def check_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    """Raise CorruptRecordError unless the stored CRC matches the bytes in place."""
    if len(buf) - pos < header.size:
        raise CorruptRecordError(
            f"batch at byte {pos} is truncated: batchLength says {header.size} bytes, "
            f"{len(buf) - pos} present"
        )
    actual = compute_crc(buf, pos, header.size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at byte {pos} failed its CRC32C check "
            f"(stored {header.crc:#010x}, computed {actual:#010x})"
        )


def assigned(
    header: BatchHeader, base_offset: int, partition_leader_epoch: int, max_timestamp: int
) -> BatchHeader:
    """``header`` with the fields a leader's append assigns: the same as
    ``header._replace(base_offset=..., partition_leader_epoch=..., max_timestamp=...)``
    in a third of its time (no keyword dict; this runs once per appended batch)."""
    return _new_tuple(
        BatchHeader,
        (base_offset, header[1], partition_leader_epoch, *header[3:8], max_timestamp,
         *header[9:]),
    )  # fmt: skip


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite the base offset in place. The CRC does not cover it, so it stays valid."""
    _BASE_OFFSET.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)


def set_base_offset_and_epoch(
    buf: bytearray | memoryview, pos: int, header: BatchHeader, base_offset: int, epoch: int
) -> None:
    """set_base_offset and set_partition_leader_epoch in one pack (a leader's append does
    both for every batch): batchLength, between the two, is written back unchanged."""
    _OFFSET_LENGTH_EPOCH.pack_into(buf, pos, base_offset, header.batch_length, epoch)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the leader epoch in place. Not covered by the CRC either."""
    _LEADER_EPOCH.pack_into(buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, append_time_ms: int) -> None:
    """Mark the batch at ``pos`` LogAppendTime with ``append_time_ms`` and re-stamp its CRC.

    What a broker does for a topic with ``message.timestamp.type=LogAppendTime``:
    attributes bit 3 and maxTimestamp change in place (both are CRC-covered, so the
    CRC is recomputed); records keep their create-time deltas, which readers ignore
    for such batches. The caller is expected to have checked the CRC first.
    """
    header = parse_header(buf, pos)
    if len(buf) - pos < header.size:
        raise CorruptRecordError(
            f"batch at byte {pos} is truncated: batchLength says {header.size} bytes, "
            f"{len(buf) - pos} present"
        )
    _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_POS, header.attributes | TIMESTAMP_TYPE_MASK)
    _MAX_TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_POS, append_time_ms)
    _CRC.pack_into(buf, pos + CRC_POS, compute_crc(buf, pos, header.size))


def iter_headers(
    buf: bytes | bytearray | memoryview, verify_crc: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch in ``buf``.

    Stops cleanly at a trailing partial batch (as a fetch response may end with one);
    raises CorruptRecordError for a batch whose header or CRC is bad.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        size = peek_batch_size(buf, pos)
        if size is None or end - pos < size:
            return
        header = parse_header(buf, pos)
        if verify_crc:
            check_crc(buf, pos, header)
        yield pos, header
        pos += size
