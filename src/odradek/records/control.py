"""Control records: the COMMIT / ABORT markers that end a transaction in a partition.

A marker is a batch of exactly one record with attributes bits 4 (transactional)
and 5 (control) set, the transaction's producer id and epoch, baseSequence -1 and
no compression. Its key and value are Kafka "data" messages prefixed by an int16
schema version (``ControlRecordTypeSchema.json`` and ``EndTxnMarker.json``; kio
generates classes for both, which only carry these same two fields)::

    key    version int16 (0) | type int16 (0 = ABORT, 1 = COMMIT)
    value  version int16 (0) | coordinatorEpoch int32

Readers accept versions newer than 0 and read them as version 0, as Java's
``EndTransactionMarker`` does; negative versions, short keys and values and unknown
types are corrupt. Other control types exist (KRaft's LEADER_CHANGE = 2, snapshot
headers and footers...); :func:`peek_control_type` lets a reader skip them.
"""

from __future__ import annotations

import enum
import struct

from odradek.records.batch import Record, build_batch
from odradek.records.errors import CorruptRecordError

__all__ = [
    "ControlType",
    "build_end_txn_marker",
    "encode_control_key",
    "encode_end_txn_value",
    "parse_control_record",
    "peek_control_type",
]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


class ControlType(enum.IntEnum):
    """Control record types that end a transaction."""

    ABORT = 0
    COMMIT = 1


def encode_control_key(control_type: int) -> bytes:
    """The 4-byte key of a control record of ``control_type``."""
    return _KEY.pack(CONTROL_KEY_VERSION, control_type)


def encode_end_txn_value(coordinator_epoch: int) -> bytes:
    """The 6-byte value of an end-transaction marker."""
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def peek_control_type(key: bytes | None) -> int:
    """The raw int16 type in a control record key (any type, known or not)."""
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(
            f"control record key must have {_KEY.size} bytes, got "
            f"{'null' if key is None else len(key)}"
        )
    version, control_type = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    return control_type


def parse_control_record(key: bytes | None, value: bytes | None) -> tuple[ControlType, int]:
    """Decode an end-transaction marker into ``(ControlType, coordinator_epoch)``.

    Raises CorruptRecordError for anything but a well-formed COMMIT or ABORT marker.
    """
    raw_type = peek_control_type(key)
    try:
        control_type = ControlType(raw_type)
    except ValueError:
        raise CorruptRecordError(
            f"control record type {raw_type} is not an end-transaction marker"
        ) from None
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(
            f"end-transaction marker value must have {_VALUE.size} bytes, got "
            f"{'null' if value is None else len(value)}"
        )
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"end-transaction marker has negative version {version}")
    return control_type, coordinator_epoch


def build_end_txn_marker(
    control_type: ControlType | int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    timestamp_ms: int | None = None,
) -> bytearray:
    """A one-record control batch marking the producer's transaction committed or aborted."""
    control_type = ControlType(control_type)
    if producer_id < 0:
        raise ValueError("an end-transaction marker needs a producer id")
    try:
        value = encode_end_txn_value(coordinator_epoch)
    except struct.error:
        raise ValueError(f"coordinator epoch {coordinator_epoch} is not an int32") from None
    record = Record(value=value, key=encode_control_key(control_type), timestamp_ms=timestamp_ms)
    return build_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
        now_ms=timestamp_ms,
    )
