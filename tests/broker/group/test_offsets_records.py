"""The ``__consumer_offsets`` key/value formats: exact bytes, every version, round trips."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.group.offsets_records import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def compact(data: bytes | None) -> bytes:
    return b"\x00" if data is None else uvarint(len(data) + 1) + data


def test_keys_have_kafkas_exact_bytes() -> None:
    assert encode_offset_commit_key("g", "t", 7) == bytes.fromhex("0001 0001 67 0001 74 00000007")
    assert encode_group_metadata_key("grp") == bytes.fromhex("0002 0003 677270")
    assert decode_key(bytes.fromhex("0001 0001 67 0001 74 00000007")) == OffsetCommitKey(
        "g", "t", 7
    )
    # version 0 offset keys (older Kafka) have the same layout
    assert decode_key(bytes.fromhex("0000 0001 67 0001 74 00000001")) == OffsetCommitKey(
        "g", "t", 1
    )
    assert decode_key(bytes.fromhex("0002 0003 677270")) == GroupMetadataKey("grp")


def test_offset_commit_value_v3_bytes() -> None:
    value = OffsetCommitValue(offset=42, metadata="m", commit_timestamp=1000, leader_epoch=5)
    expected = (
        struct.pack(">hqi", 3, 42, 5) + s16("m") + struct.pack(">q", 1000)
    )  # version, offset, leader_epoch, metadata, commit_timestamp
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_with_expire_timestamp_is_written_as_v1() -> None:
    value = OffsetCommitValue(offset=1, metadata="", commit_timestamp=10, expire_timestamp=99)
    encoded = encode_offset_commit_value(value)
    assert encoded == struct.pack(">hq", 1, 1) + s16("") + struct.pack(">qq", 10, 99)
    assert decode_offset_commit_value(encoded) == value


def test_offset_commit_value_older_and_flexible_versions_decode() -> None:
    v0 = struct.pack(">hq", 0, 5) + s16("meta") + struct.pack(">q", 77)
    v2 = struct.pack(">hq", 2, 6) + s16("x") + struct.pack(">q", 78)
    v4 = (
        struct.pack(">hqi", 4, 7, 3)
        + compact(b"flex")
        + struct.pack(">q", 79)
        + uvarint(1)  # one tagged field we do not know: skipped
        + uvarint(9)
        + uvarint(2)
        + b"zz"
    )
    assert decode_offset_commit_value(v0) == OffsetCommitValue(5, "meta", 77)
    assert decode_offset_commit_value(v2) == OffsetCommitValue(6, "x", 78)
    assert decode_offset_commit_value(v4) == OffsetCommitValue(7, "flex", 79, leader_epoch=3)


def _member_v3(m: MemberMetadataValue) -> bytes:
    return (
        s16(m.member_id)
        + s16(m.group_instance_id)
        + s16(m.client_id)
        + s16(m.client_host)
        + struct.pack(">ii", m.rebalance_timeout, m.session_timeout)
        + b32(m.subscription)
        + b32(m.assignment)
    )


MEMBER = MemberMetadataValue(
    member_id="c-1",
    client_id="c",
    client_host="/127.0.0.1",
    rebalance_timeout=300_000,
    session_timeout=45_000,
    subscription=b"\x00\x01sub",
    assignment=b"\x00\x02asg",
    group_instance_id="inst",
)


def test_group_metadata_value_v3_bytes() -> None:
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=3,
        protocol="range",
        leader="c-1",
        members=(MEMBER,),
        current_state_timestamp=123,
    )
    expected = (
        struct.pack(">h", 3)
        + s16("consumer")
        + struct.pack(">i", 3)
        + s16("range")
        + s16("c-1")
        + struct.pack(">q", 123)
        + struct.pack(">i", 1)
        + _member_v3(MEMBER)
    )
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_empty_group_metadata_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue(protocol_type="", generation=4, protocol=None, leader=None)
    encoded = encode_group_metadata_value(value)
    assert encoded == (
        struct.pack(">h", 3)
        + s16("")
        + struct.pack(">i", 4)
        + s16(None)
        + s16(None)
        + struct.pack(">qi", -1, 0)
    )
    assert decode_group_metadata_value(encoded) == value


def test_group_metadata_value_older_versions_decode() -> None:
    # v0: no rebalance timeout (it equals the session timeout), no state timestamp, no instance
    v0 = (
        struct.pack(">h", 0)
        + s16("consumer")
        + struct.pack(">i", 1)
        + s16("range")
        + s16("m")
        + struct.pack(">i", 1)
        + s16("m")
        + s16("cid")
        + s16("/h")
        + struct.pack(">i", 10_000)
        + b32(b"s")
        + b32(b"a")
    )
    decoded = decode_group_metadata_value(v0)
    assert decoded.current_state_timestamp == -1
    assert decoded.members == (
        MemberMetadataValue("m", "cid", "/h", 10_000, 10_000, b"s", b"a", None),
    )
    # v2: rebalance timeout and state timestamp, still no instance id
    v2 = (
        struct.pack(">h", 2)
        + s16("consumer")
        + struct.pack(">i", 1)
        + s16(None)
        + s16(None)
        + struct.pack(">q", 55)
        + struct.pack(">i", 1)
        + s16("m")
        + s16("cid")
        + s16("/h")
        + struct.pack(">ii", 20_000, 10_000)
        + b32(b"")
        + b32(b"")
    )
    decoded = decode_group_metadata_value(v2)
    assert decoded.current_state_timestamp == 55
    assert decoded.members[0].rebalance_timeout == 20_000
    assert decoded.members[0].group_instance_id is None


def test_group_metadata_value_v4_flexible_decodes() -> None:
    member = (
        compact(b"m")
        + compact(None)
        + compact(b"cid")
        + compact(b"/h")
        + struct.pack(">ii", 20_000, 10_000)
        + compact(b"sub")
        + compact(b"asg")
        + uvarint(0)  # member tagged fields
    )
    v4 = (
        struct.pack(">h", 4)
        + compact(b"consumer")
        + struct.pack(">i", 9)
        + compact(b"range")
        + compact(b"m")
        + struct.pack(">q", 1)
        + uvarint(2)  # one member
        + member
        + uvarint(1)
        + uvarint(0)
        + uvarint(1)
        + b"\x00"
    )
    assert decode_group_metadata_value(v4) == GroupMetadataValue(
        "consumer",
        9,
        "range",
        "m",
        (MemberMetadataValue("m", "cid", "/h", 20_000, 10_000, b"sub", b"asg", None),),
        1,
    )


def test_unknown_key_versions_are_reported_not_rejected() -> None:
    # KIP-848 consumer-group records use key versions 3+: classic groups skip them.
    assert decode_key(struct.pack(">h", 5) + b"anything") == UnknownRecordKey(5)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        bytes.fromhex("0001 0005 6162"),  # string longer than the data
        bytes.fromhex("0001 0001 67 0001 74 000000"),  # truncated partition
        bytes.fromhex("0001 0001 67 0001 74 00000007 ff"),  # trailing byte
        bytes.fromhex("ffff 0001 67"),  # negative version
        bytes.fromhex("0002 ffff"),  # null group id
        bytes.fromhex("0002 0002 c328"),  # invalid UTF-8
    ],
)
def test_corrupt_keys_raise_the_documented_error(data: bytes) -> None:
    with pytest.raises(CorruptOffsetsRecordError):
        decode_key(data)


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">h", 9) + b"\x00" * 30,  # unknown version
        struct.pack(">hq", 3, 1),  # truncated
        struct.pack(">hqi", 3, 1, 1) + s16(None) + struct.pack(">q", 1),  # null metadata
        struct.pack(">hqi", 3, 1, 1) + s16("") + struct.pack(">q", 1) + b"x",  # trailing
    ],
)
def test_corrupt_offset_values_raise(data: bytes) -> None:
    with pytest.raises(CorruptOffsetsRecordError):
        decode_offset_commit_value(data)


def test_corrupt_group_values_raise() -> None:
    huge_array = (
        struct.pack(">h", 3)
        + s16("c")
        + struct.pack(">i", 1)
        + s16(None)
        + s16(None)
        + struct.pack(">qi", 1, 2**31 - 1)
    )
    negative_bytes = (
        struct.pack(">h", 3)
        + s16("c")
        + struct.pack(">i", 1)
        + s16(None)
        + s16(None)
        + struct.pack(">qi", 1, 1)
        + s16("m")
        + s16(None)
        + s16("c")
        + s16("h")
        + struct.pack(">ii", 1, 1)
        + struct.pack(">i", -5)
    )
    for data in (huge_array, negative_bytes, b"\x00\x03"):
        with pytest.raises(CorruptOffsetsRecordError):
            decode_group_metadata_value(data)


names = st.text(min_size=0, max_size=30)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
members = st.builds(
    MemberMetadataValue,
    member_id=names,
    client_id=names,
    client_host=names,
    rebalance_timeout=int32,
    session_timeout=int32,
    subscription=st.binary(max_size=50),
    assignment=st.binary(max_size=50),
    group_instance_id=st.none() | names,
)


@settings(max_examples=150, deadline=None)
@given(group=names, topic=names, partition=int32)
def test_key_round_trips(group: str, topic: str, partition: int) -> None:
    assert decode_key(encode_offset_commit_key(group, topic, partition)) == OffsetCommitKey(
        group, topic, partition
    )
    assert decode_key(encode_group_metadata_key(group)) == GroupMetadataKey(group)


@settings(max_examples=150, deadline=None)
@given(
    offset=int64,
    metadata=st.text(max_size=100),
    commit=int64,
    epoch=int32,
    expire=st.one_of(st.just(-1), st.integers(0, 2**62)),
)
def test_offset_value_round_trips(
    offset: int, metadata: str, commit: int, epoch: int, expire: int
) -> None:
    # v1 (with an expire timestamp) has no leader epoch field.
    value = OffsetCommitValue(offset, metadata, commit, epoch if expire < 0 else -1, expire)
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


@settings(max_examples=100, deadline=None)
@given(
    protocol_type=names,
    generation=int32,
    protocol=st.none() | names,
    leader=st.none() | names,
    timestamp=int64,
    group_members=st.lists(members, max_size=5),
)
def test_group_value_round_trips(
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    timestamp: int,
    group_members: list[MemberMetadataValue],
) -> None:
    value = GroupMetadataValue(
        protocol_type, generation, protocol, leader, tuple(group_members), timestamp
    )
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=80))
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    for decode in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        try:
            decode(data)
        except CorruptOffsetsRecordError:
            pass
