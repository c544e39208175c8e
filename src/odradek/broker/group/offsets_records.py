"""Records of the ``__consumer_offsets`` topic, in Kafka's own binary formats.

The group coordinator keeps all its state as key/value records in this compacted topic, so
any broker that becomes leader of a partition can rebuild the groups of that partition by
reading it. The formats are those of Kafka's group-coordinator message schemas
(``OffsetCommitKey``/``OffsetCommitValue``, ``GroupMetadataKey``/``GroupMetadataValue``), so
Kafka's own tools could read an odradek offsets log and vice versa.

Every key and value starts with an ``int16`` version. Keys are never flexible::

    key version 0 or 1  OffsetCommitKey    group: string, topic: string, partition: int32
    key version 2       GroupMetadataKey   group: string
    (3 and up are KIP-848/share-group records: not used by classic groups, skipped on load)

``string`` is an ``int16`` length then UTF-8 bytes (length -1 = null); ``bytes`` is an
``int32`` length then the bytes; an array is an ``int32`` count then the elements. Version 4
of both values is *flexible*: compact strings/bytes/arrays (unsigned varint length + 1, 0 =
null) and a tagged-field section (unsigned varint count, then tag/size/data) after every
struct; odradek reads v4 and writes the classic versions Kafka writes::

    OffsetCommitValue   (written as v3, or v1 when an explicit expire timestamp is set)
      offset: int64
      leader_epoch: int32           v3+ (-1 = unknown)
      metadata: string              (non-null; a null client metadata is stored as "")
      commit_timestamp: int64
      expire_timestamp: int64       v1 only (-1 = none; OffsetCommit v2-v4 retention_time)

    GroupMetadataValue  (written as v3)
      protocol_type: string
      generation: int32
      protocol: nullable string     (selected protocol; null when the group is Empty)
      leader: nullable string
      current_state_timestamp: int64  v2+ (-1 = unknown)
      members: array of
        member_id: string
        group_instance_id: nullable string   v3+
        client_id: string
        client_host: string
        rebalance_timeout: int32             v1+ (v0: equals session_timeout)
        session_timeout: int32
        subscription: bytes          (the member's metadata for the selected protocol)
        assignment: bytes

A tombstone is a key with a null value: the offset was deleted/expired, or the group is gone.

Decoders raise :class:`CorruptOffsetsRecordError` (a ValueError) for any malformed input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "CorruptOffsetsRecordError",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "UnknownRecordKey",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
_MAX_VALUE_VERSION = 4


class CorruptOffsetsRecordError(ValueError):
    """A key or value of the offsets topic is not in any format odradek knows."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownRecordKey:
    """A key of a record type classic groups do not use (KIP-848 consumer groups, shares)."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[MemberMetadataValue, ...] = ()
    current_state_timestamp: int = -1


# -- writing -------------------------------------------------------------------------------------

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class _Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, value: int) -> None:
        self.parts.append(_INT16.pack(value))

    def int32(self, value: int) -> None:
        self.parts.append(_INT32.pack(value))

    def int64(self, value: int) -> None:
        self.parts.append(_INT64.pack(value))

    def string(self, value: str | None) -> None:
        if value is None:
            self.parts.append(_INT16.pack(-1))
            return
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        self.parts.append(_INT16.pack(len(data)))
        self.parts.append(data)

    def bytes_(self, value: bytes) -> None:
        self.parts.append(_INT32.pack(len(value)))
        self.parts.append(bytes(value))

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer()
    w.int16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return w.getvalue()


def encode_group_metadata_key(group: str) -> bytes:
    w = _Writer()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.getvalue()


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """v1 when the value carries an expire timestamp (only v1 has the field), else v3."""
    w = _Writer()
    if value.expire_timestamp >= 0:
        w.int16(1)
        w.int64(value.offset)
        w.string(value.metadata)
        w.int64(value.commit_timestamp)
        w.int64(value.expire_timestamp)
    else:
        w.int16(OFFSET_COMMIT_VALUE_VERSION)
        w.int64(value.offset)
        w.int32(value.leader_epoch)
        w.string(value.metadata)
        w.int64(value.commit_timestamp)
    return w.getvalue()


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = _Writer()
    w.int16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for member in value.members:
        w.string(member.member_id)
        w.string(member.group_instance_id)
        w.string(member.client_id)
        w.string(member.client_host)
        w.int32(member.rebalance_timeout)
        w.int32(member.session_timeout)
        w.bytes_(member.subscription)
        w.bytes_(member.assignment)
    return w.getvalue()


# -- reading -------------------------------------------------------------------------------------


class _Reader:
    """Bounds-checked reader; ``flexible`` switches strings/bytes/arrays to compact forms."""

    __slots__ = ("data", "flexible", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.what = what
        self.flexible = False

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptOffsetsRecordError(
                f"{self.what}: needs {n} bytes at position {self.pos}, "
                f"only {len(self.data) - self.pos} left"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return int(_INT16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_INT64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        result = 0
        shift = 0
        while True:
            byte = self._take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise CorruptOffsetsRecordError(f"{self.what}: unsigned varint too long")

    def _length(self, wide: bool) -> int:
        """A length where -1 means null (compact: varint n+1, 0 = null)."""
        if self.flexible:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def nullable_string(self) -> str | None:
        n = self._length(wide=False)
        if n < -1:
            raise CorruptOffsetsRecordError(f"{self.what}: negative string length {n}")
        if n == -1:
            return None
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptOffsetsRecordError(f"{self.what}: string is not UTF-8: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise CorruptOffsetsRecordError(f"{self.what}: null where a string is required")
        return value

    def bytes_(self) -> bytes:
        n = self._length(wide=True)
        if n < 0:
            raise CorruptOffsetsRecordError(f"{self.what}: null or negative bytes length {n}")
        return bytes(self._take(n))

    def array_length(self) -> int:
        n = self._length(wide=True)
        if n < 0:
            raise CorruptOffsetsRecordError(f"{self.what}: null or negative array length {n}")
        # Each element takes at least one byte: a cheap bound against absurd counts.
        if n > len(self.data) - self.pos:
            raise CorruptOffsetsRecordError(f"{self.what}: array of {n} cannot fit the record")
        return n

    def skip_tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def version(self, max_version: int) -> int:
        version = self.int16()
        if not 0 <= version <= max_version:
            raise CorruptOffsetsRecordError(f"{self.what}: unknown version {version}")
        return version

    def finish(self) -> None:
        if self.pos != len(self.data):
            raise CorruptOffsetsRecordError(
                f"{self.what}: {len(self.data) - self.pos} unexpected trailing bytes"
            )


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownRecordKey:
    r = _Reader(data, "offsets topic key")
    version = r.int16()
    if version in (0, 1):
        key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(r.string())
    elif version > GROUP_METADATA_KEY_VERSION:
        return UnknownRecordKey(version)
    else:
        raise CorruptOffsetsRecordError(f"offsets topic key: unknown version {version}")
    r.finish()
    return key


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = _Reader(data, "OffsetCommitValue")
    version = r.version(_MAX_VALUE_VERSION)
    r.flexible = version >= 4
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.skip_tagged_fields()
    r.finish()
    return OffsetCommitValue(
        offset=offset,
        metadata=metadata,
        commit_timestamp=commit_timestamp,
        leader_epoch=leader_epoch,
        expire_timestamp=expire_timestamp,
    )


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data, "GroupMetadataValue")
    version = r.version(_MAX_VALUE_VERSION)
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        group_instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else None
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tagged_fields()
        members.append(
            MemberMetadataValue(
                member_id=member_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout=(
                    session_timeout if rebalance_timeout is None else rebalance_timeout
                ),
                session_timeout=session_timeout,
                subscription=subscription,
                assignment=assignment,
                group_instance_id=group_instance_id,
            )
        )
    r.skip_tagged_fields()
    r.finish()
    return GroupMetadataValue(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        members=tuple(members),
        current_state_timestamp=current_state_timestamp,
    )
