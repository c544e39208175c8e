"""The per-batch work of an append before its bytes are written, and what an append
returns (:class:`AppendInfo`).

:func:`parse_batches` splits the produced (or fetched) bytes into batches and applies
the per-batch checks of Kafka's LogValidator: framing, CRC32C, max.message.bytes,
record count against lastOffsetDelta, no control batch from a client, and (through
:mod:`odradek.storage.batch_validation`) the record walk. :func:`check_producers`
applies idempotence and fencing across the batches of one append,
:func:`maybe_recompress` re-encodes for a topic's fixed compression.type and
:func:`stamp_timestamp` sets LogAppendTime in place.

``Log.append_as_leader`` and ``Log.append_as_follower`` (log.py) call these directly,
under the log's lock; they are on the broker's hot path (one call per Produce), so
each is one plain function call, as the methods they replaced were. Kept apart from
log.py because they only look at and rewrite the bytes of one append (plus the
producer state's verdict), never the log's segments or offsets.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.records.errors import CorruptRecordError
from odradek.records.header import (
    ATTRIBUTES_POS,
    CRC_POS,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    check_crc,
    compute_crc,
    parse_header,
    peek_batch_size,
)
from odradek.records.validation import leader_batch, uncompressed_limit
from odradek.storage.batch_validation import (
    apply_record_checks,
    check_batch_records,
    decode_bounded,
)
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptBatchError,
    InvalidRecordError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from odradek.storage.producer_state import ORIGIN_CLIENT, BatchMetadata, ProducerStateManager

_CODEC_BY_NAME = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_MAX_TIMESTAMP_FIELD = struct.Struct(">q")
_ATTRIBUTES_FIELD = struct.Struct(">h")
_CRC_FIELD = struct.Struct(">I")
_MAX_TIMESTAMP_POS = 35


@dataclass
class AppendInfo:
    """What an append did (or, for a duplicate, what the original append did)."""

    first_offset: int
    last_offset: int
    max_timestamp_ms: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records_count: int
    duplicate: bool = False


@dataclass
class ParsedBatch:
    """A batch of an append: where it starts in the buffer, and its header."""

    position: int  # within the append buffer
    header: BatchHeader


def stamp_timestamp(buf: bytearray, pos: int, header: BatchHeader, *, log_append_time: bool,
                    max_timestamp: int) -> None:  # fmt: skip
    """Set the timestamp type bit and maxTimestamp in place; both are CRC-covered, so
    the CRC is recomputed over the batch (a C-speed pass, no record decoding)."""
    attributes = header.attributes
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    _ATTRIBUTES_FIELD.pack_into(buf, pos + ATTRIBUTES_POS, attributes)
    _MAX_TIMESTAMP_FIELD.pack_into(buf, pos + _MAX_TIMESTAMP_POS, max_timestamp)
    _CRC_FIELD.pack_into(buf, pos + CRC_POS, compute_crc(buf, pos, header.size))


def is_writable(data: bytes | bytearray | memoryview) -> bool:
    """A buffer the log may rewrite in place (base offsets, leader epochs, timestamps)."""
    return isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly)


def parse_batches(
    buf: bytearray, config: LogConfig, *, leader: bool, validate: bool, origin: str, now_ms: int
) -> list[ParsedBatch]:
    """Split ``buf`` into batches and apply the per-batch checks of Kafka's LogValidator."""
    if leader and validate and leader_batch is not None:
        # One uncompressed batch from a client (linger.ms=0 sends one per request): its
        # framing, CRC and record walk in one C call. Anything else, and every error, is
        # left to the loop below (the C call only says the checks passed).
        found = leader_batch(buf)
        if found is not None:
            header, low, high, null_keys = found
            if header.batch_length + LOG_OVERHEAD <= config.max_message_bytes:
                header = apply_record_checks(buf, 0, header, config, now_ms, low, high,
                                             null_keys)  # fmt: skip
                return [ParsedBatch(0, header)]
    parsed: list[ParsedBatch] = []
    pos = 0
    end = len(buf)
    while pos < end:
        try:
            size = peek_batch_size(buf, pos)
            if size is None or pos + size > end:
                if not leader:
                    break  # a fetch response may end in a partial batch
                raise CorruptBatchError(
                    f"{end - pos} trailing bytes at {pos} do not form a whole record batch"
                )
            header = parse_header(buf, pos)
            if validate:
                check_crc(buf, pos, header)
        except CorruptRecordError as exc:
            raise CorruptBatchError(str(exc)) from None
        if leader:
            if size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"record batch of {size} bytes is larger than max.message.bytes "
                    f"{config.max_message_bytes}"
                )
            if (
                header.records_count == 0
                or header.records_count != header.last_offset_delta + 1
            ):
                raise InvalidRecordError(
                    f"batch at byte {pos}: inconsistent lastOffsetDelta "
                    f"{header.last_offset_delta} and record count {header.records_count}"
                )
            if header.is_control and origin == ORIGIN_CLIENT:
                raise InvalidRecordError("clients are not allowed to write control records")
            if validate:
                header = check_batch_records(buf, pos, header, config, now_ms)
        parsed.append(ParsedBatch(pos, header))
        pos += size
    return parsed


def check_producers(
    producer_state: ProducerStateManager, buf: bytearray, parsed: list[ParsedBatch], origin: str
) -> BatchMetadata | None:
    """Idempotence and fencing checks; the original's metadata for a duplicate.

    The producer state checks the first batch of each producer; further batches of
    the same producer in this append must continue its sequence and epoch.
    """
    seen: dict[int, BatchHeader] = {}
    for batch in parsed:
        header = batch.header
        if header.producer_id < 0:
            continue
        previous = seen.get(header.producer_id)
        if previous is None or header.is_control:
            view = memoryview(buf)[batch.position : batch.position + header.size]
            duplicate = producer_state.check_duplicate_or_validate(header, origin, view)
            if duplicate is not None:
                return duplicate
        elif origin == ORIGIN_CLIENT and not previous.is_control:
            expected = (previous.last_sequence + 1) % 2**31
            if header.producer_epoch != previous.producer_epoch or (
                header.base_sequence != expected
            ):
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id}: batch with epoch "
                    f"{header.producer_epoch} sequence {header.base_sequence} does not "
                    f"follow the previous batch of the same request"
                )
        seen[header.producer_id] = header
    return None


def maybe_recompress(
    buf: bytearray, parsed: list[ParsedBatch], config: LogConfig
) -> tuple[bytearray, list[ParsedBatch]]:
    """Re-encode batches whose codec differs from a topic's fixed compression.type."""
    target_name = config.compression_type
    if target_name == "producer":
        return buf, parsed
    target = _CODEC_BY_NAME[target_name]
    if all(b.header.compression == target or b.header.is_control for b in parsed):
        return buf, parsed
    from odradek.records.batch import rebuild_batch
    from odradek.records.compression import Compression

    out = bytearray()
    rebuilt: list[ParsedBatch] = []
    for batch in parsed:
        pos, header = batch.position, batch.header
        if header.compression == target or header.is_control:
            data = buf[pos : pos + header.size]
        else:
            limit = uncompressed_limit(config.max_message_bytes)
            decoded = decode_bounded(buf, pos, limit)
            data = rebuild_batch(decoded, compression=Compression(target))
        rebuilt.append(ParsedBatch(len(out), parse_header(data)))
        out += data
        if len(data) > config.max_message_bytes:
            raise RecordTooLargeError(
                f"record batch recompressed to {target_name} is {len(data)} bytes, larger "
                f"than max.message.bytes {config.max_message_bytes}"
            )
    return out, rebuilt
