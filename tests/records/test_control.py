"""Transaction markers: layout, parsing, and agreement with aiokafka's control records."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER, ControlRecord
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import Compression, ControlType, CorruptRecordError, decode_batch
from odradek.records.control import (
    build_end_txn_marker,
    encode_control_key,
    encode_end_txn_value,
    parse_control_record,
    peek_control_type,
)
from odradek.records.header import CONTROL_MASK, TRANSACTIONAL_MASK


@pytest.mark.parametrize(
    ("control_type", "theirs"),
    [(ControlType.COMMIT, COMMIT_MARKER), (ControlType.ABORT, ABORT_MARKER)],
)
def test_marker_batch_layout(control_type: ControlType, theirs: ControlRecord) -> None:
    raw = build_end_txn_marker(
        control_type,
        producer_id=4242,
        producer_epoch=3,
        coordinator_epoch=17,
        base_offset=900,
        partition_leader_epoch=5,
        timestamp_ms=1_700_000_000_123,
    )
    batch = decode_batch(raw)
    assert batch.header.attributes == TRANSACTIONAL_MASK | CONTROL_MASK
    assert batch.compression is Compression.NONE
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 3, -1)
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (900, 900, 5)
    [record] = batch.records
    assert record.key == struct.pack(">hh", 0, int(control_type))
    assert record.value == struct.pack(">hi", 0, 17)
    assert record.timestamp_ms == 1_700_000_000_123
    assert parse_control_record(record.key, record.value) == (control_type, 17)
    # aiokafka, an independent reader, sees the same marker.
    their_batch = DefaultRecordBatch(bytes(raw))
    assert their_batch.is_control_batch and their_batch.validate_crc()
    [their_record] = list(their_batch)
    assert ControlRecord.parse(their_record.key) == theirs


@settings(max_examples=100)
@given(st.sampled_from(list(ControlType)), st.integers(-(2**31), 2**31 - 1))
def test_key_and_value_round_trip(control_type: ControlType, epoch: int) -> None:
    key, value = encode_control_key(control_type), encode_end_txn_value(epoch)
    assert (len(key), len(value)) == (4, 6)
    assert parse_control_record(key, value) == (control_type, epoch)


def test_newer_versions_are_read_as_version_zero() -> None:
    assert parse_control_record(struct.pack(">hhx", 1, 1), struct.pack(">hi4x", 3, 9)) == (
        ControlType.COMMIT,
        9,
    )


def test_peek_control_type_sees_types_beyond_markers() -> None:
    key = struct.pack(">hh", 0, 2)  # KRaft LEADER_CHANGE
    assert peek_control_type(key) == 2
    with pytest.raises(CorruptRecordError, match="not an end-transaction marker"):
        parse_control_record(key, struct.pack(">hi", 0, 1))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, struct.pack(">hi", 0, 1)),
        (b"\x00\x00\x00", struct.pack(">hi", 0, 1)),
        (struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1)),
        (struct.pack(">hh", 0, -1), struct.pack(">hi", 0, 1)),
        (struct.pack(">hh", 0, 1), None),
        (struct.pack(">hh", 0, 1), b"\x00\x00\x00\x00\x01"),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -2, 1)),
    ],
)
def test_malformed_markers_are_corrupt(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        parse_control_record(key, value)


@settings(max_examples=200)
@given(st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=8))
def test_random_keys_and_values_only_raise_corrupt(key: bytes | None, value: bytes | None) -> None:
    try:
        control_type, _ = parse_control_record(key, value)
    except CorruptRecordError:
        return
    assert control_type in (ControlType.ABORT, ControlType.COMMIT)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"producer_id": -1, "producer_epoch": 0, "coordinator_epoch": 0},
        {"producer_id": 1, "producer_epoch": 0, "coordinator_epoch": 2**31},
        {"producer_id": 1, "producer_epoch": 2**15, "coordinator_epoch": 0},
    ],
)
def test_bad_marker_arguments(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        build_end_txn_marker(ControlType.COMMIT, **kwargs)


def test_unknown_control_type_argument() -> None:
    with pytest.raises(ValueError):
        build_end_txn_marker(7, producer_id=1, producer_epoch=0, coordinator_epoch=0)
