"""A producer batch: records bound for one partition, sent together, acknowledged together.

The unit the accumulator queues and the sender ships (the Java client's ProducerBatch), with
the :class:`RecordMetadata` its records' futures resolve to and the size estimate that
batching and the buffer memory limit count in.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from odradek.records.appender import RecordsAppender
from odradek.records.batch import EncodedRecords, Record
from odradek.records.header import compute_crc

__all__ = [
    "BATCH_OVERHEAD",
    "RECORD_OVERHEAD",
    "ProducerBatch",
    "RecordMetadata",
    "TopicPartition",
    "make_record",
    "record_size",
]

TopicPartition = tuple[str, int]

RECORD_OVERHEAD = 21  # length, attributes, deltas and key/value lengths (varints, worst case)
BATCH_OVERHEAD = 61
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43
_PRODUCER_FIELDS_POS = 43
_CRC_POS = 17


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written. ``offset`` is -1 when unknown (acks=0, duplicate)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


# RecordMetadata's generated frozen __init__ (object.__setattr__ per field) is most of the
# cost of resolving a record's future; complete() fills the slots directly instead.
_METADATA_SLOTS = tuple(
    RecordMetadata.__dict__[name].__set__
    for name in ("topic", "partition", "offset", "timestamp_ms")
)


def make_record(
    value: bytes | None,
    key: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
    timestamp_ms: int | None,
) -> Record:
    """A copy of a record to send, its types checked (TypeError/ValueError for bad ones) and
    its timestamp set (now, unless given)."""
    if value is not None and not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"record value must be bytes or None, not {type(value).__name__}")
    if key is not None and not isinstance(key, bytes | bytearray | memoryview):
        raise TypeError(f"record key must be bytes or None, not {type(key).__name__}")
    checked = []
    for item in headers:
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str):
            raise TypeError(f"a header must be a (str, bytes | None) pair, not {item!r}")
        if item[1] is not None and not isinstance(item[1], bytes | bytearray):
            raise TypeError(f"header {item[0]!r} value must be bytes or None")
        checked.append((item[0], None if item[1] is None else bytes(item[1])))
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    elif not isinstance(timestamp_ms, int) or timestamp_ms < 0:
        raise ValueError(f"timestamp_ms must be a non-negative int, not {timestamp_ms!r}")
    return Record(
        value=None if value is None else bytes(value),
        key=None if key is None else bytes(key),
        headers=tuple(checked),
        timestamp_ms=timestamp_ms,
    )


def record_size(record: Record) -> int:
    """An upper bound of the bytes ``record`` takes in a batch (what batch_size and
    buffer_memory count)."""
    size = RECORD_OVERHEAD
    if record.key is not None:
        size += len(record.key)
    if record.value is not None:
        size += len(record.value)
    for name, value in record.headers:
        size += 10 + len(name.encode("utf-8", "surrogateescape"))
        if value is not None:
            size += len(value)
    return size


class ProducerBatch:
    """Records bound for one partition, sent together, acknowledged together."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "closed",
        "created",
        "done",
        "encoded",
        "futures",
        "producer_epoch",
        "producer_id",
        "records",
        "retry_after",
        "sequence_reset",
        "size",
        "tp",
    )

    def __init__(self, tp: TopicPartition, now: float) -> None:
        self.tp = tp
        # send() encodes each record as it comes (RecordsAppender); send_batch() hands in
        # Records or an already encoded section.
        self.records: RecordsAppender | list[Record] | EncodedRecords = RecordsAppender()
        # One per record from send(); send_batch() only wants the first record's, so the
        # rest are None (a future per record was half the Spark sink's CPU).
        self.futures: list[asyncio.Future[RecordMetadata] | None] = []
        self.size = BATCH_OVERHEAD
        self.created = now
        self.closed = False
        self.attempts = 0
        self.retry_after = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.sequence_reset = False
        self.encoded: bytearray | None = None
        # Resolved when every record's future is; flush() waits on these, one per batch.
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence >= 0

    def stamp(self, producer_id: int, epoch: int, base_sequence: int) -> None:
        """Set the idempotence fields; an already encoded batch is patched in place (and its
        CRC recomputed), so a retried compressed batch is never re-compressed."""
        self.producer_id = producer_id
        self.producer_epoch = epoch
        self.base_sequence = base_sequence
        if self.encoded is not None:
            _PRODUCER_FIELDS.pack_into(
                self.encoded, _PRODUCER_FIELDS_POS, producer_id, epoch, base_sequence
            )
            struct.pack_into(
                ">I", self.encoded, _CRC_POS, compute_crc(self.encoded, 0, len(self.encoded))
            )

    def fail(self, error: BaseException) -> None:
        for future in self.futures:
            if future is not None and not future.done():
                future.set_exception(error)
        if not self.done.done():
            self.done.set_result(None)

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        topic, partition = self.tp
        records = self.records
        if log_append_time_ms >= 0:
            timestamps: Sequence[int] = [log_append_time_ms] * len(records)
        elif isinstance(records, RecordsAppender):
            timestamps = records.timestamps
        elif isinstance(records, EncodedRecords):
            timestamps = [records.base_timestamp] * len(records)
        else:
            timestamps = [r.timestamp_ms or -1 for r in records]
        new = object.__new__
        set_topic, set_partition, set_offset, set_timestamp = _METADATA_SLOTS
        for index, future in enumerate(self.futures):
            if future is None or future.done():
                continue
            metadata = new(RecordMetadata)
            set_topic(metadata, topic)
            set_partition(metadata, partition)
            set_offset(metadata, base_offset + index if base_offset >= 0 else -1)
            set_timestamp(metadata, timestamps[index])
            future.set_result(metadata)
        if not self.done.done():
            self.done.set_result(None)
