"""The records of ``__transaction_state`` in Kafka's format (TransactionLogKey/Value).

Both are Kafka "data" messages prefixed by an int16 schema version::

    key    version int16 (0) | transactionalId string
    value  version int16 (0) | producerId int64 | producerEpoch int16 |
           transactionTimeoutMs int32 | transactionStatus int8 |
           transactionPartitions [topic string, partitionIds [int32]] (nullable) |
           transactionLastUpdateTimestampMs int64 | transactionStartTimestampMs int64

Version 0 is what Kafka 3.x writes. Version 1 of the value is the same fields in the
flexible encoding (compact strings and arrays, tagged fields) and is read too, ignoring
its tagged fields. A null value is a tombstone: the id expired (state Dead).
"""

from __future__ import annotations

import struct

from odradek.broker.txn.state import TxnSnapshot, TxnState

__all__ = [
    "CorruptTxnRecordError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

KEY_VERSION = 0
VALUE_VERSION = 0


class CorruptTxnRecordError(ValueError):
    pass


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return struct.pack(">hh", KEY_VERSION, len(raw)) + raw


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    version = reader.int16()
    if version < 0:
        raise CorruptTxnRecordError(f"transaction log key has version {version}")
    if version > 0:
        # Newer key versions keep the id first (the schema only ever adds tagged fields).
        return reader.compact_string()
    return reader.string()


def encode_value(snapshot: TxnSnapshot) -> bytes:
    out = bytearray(
        struct.pack(
            ">hqhib",
            VALUE_VERSION,
            snapshot.producer_id,
            snapshot.producer_epoch,
            snapshot.timeout_ms,
            int(snapshot.state),
        )
    )
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(snapshot.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out += struct.pack(">i", len(by_topic))
    for topic, partitions in by_topic.items():
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw
        out += struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    out += struct.pack(">qq", snapshot.last_update_timestamp_ms, snapshot.start_timestamp_ms)
    return bytes(out)


def decode_value(data: bytes) -> TxnSnapshot:
    reader = _Reader(data)
    version = reader.int16()
    if version < 0:
        raise CorruptTxnRecordError(f"transaction log value has version {version}")
    flexible = version >= 1
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    status = reader.int8()
    try:
        state = TxnState(status)
    except ValueError:
        raise CorruptTxnRecordError(f"unknown transaction status {status}") from None
    partitions: set[tuple[str, int]] = set()
    count = reader.compact_length() if flexible else reader.int32()
    for _ in range(max(count, 0)):  # -1: null array
        topic = reader.compact_string() if flexible else reader.string()
        ids = reader.compact_length() if flexible else reader.int32()
        for _ in range(max(ids, 0)):
            partitions.add((topic, reader.int32()))
        if flexible:
            reader.skip_tagged_fields()
    last_update = reader.int64()
    start = reader.int64()
    return TxnSnapshot(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=frozenset(partitions),
        start_timestamp_ms=start,
        last_update_timestamp_ms=last_update,
    )


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise CorruptTxnRecordError("transaction log record is truncated")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def int8(self) -> int:
        return self._take(">b")

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(">B")
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptTxnRecordError("varint is too long")

    def _bytes(self, length: int) -> str:
        if length < 0 or self.pos + length > len(self.data):
            raise CorruptTxnRecordError("bad string length in transaction log record")
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise CorruptTxnRecordError("string is not UTF-8") from None

    def string(self) -> str:
        return self._bytes(self.int16())

    def compact_length(self) -> int:
        return self.uvarint() - 1

    def compact_string(self) -> str:
        return self._bytes(self.compact_length())

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            size = self.uvarint()
            if self.pos + size > len(self.data):
                raise CorruptTxnRecordError("tagged field runs past the record")
            self.pos += size
