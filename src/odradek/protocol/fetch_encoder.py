"""The Fetch response, encoded by hand so record data can go out with ``sendfile``.

``encode_fetch_response`` returns chunks whose concatenation (file regions read in place)
is exactly the framed response kio would produce with the records inlined. Record data
given as a region (any object with ``length``; the network layer also wants ``fd`` and
``position``) is never copied into Python memory.

Layout, Fetch v4..v18 (``[]`` = array, ``?`` = only from that version; in flexible
versions, v12+, strings/arrays/records use compact lengths and every struct ends with a
tagged-field section)::

    size                       int32   (frame size prefix)
    correlation_id             int32   (response header v0; v1 = + tagged fields)
    throttle_time_ms           int32
    error_code                 int16   v7+
    session_id                 int32   v7+
    responses []
      topic                    string  v4..v12
      topic_id                 uuid    v13+
      partitions []
        partition_index        int32
        error_code             int16
        high_watermark         int64
        last_stable_offset     int64
        log_start_offset       int64   v5+
        aborted_transactions   nullable [] of (producer_id int64, first_offset int64)
        preferred_read_replica int32   v11+
        records                nullable bytes (int32 length; compact in v12+)
        tagged fields          v12+: 0 diverging_epoch (epoch int32, end_offset int64),
                                     1 current_leader (leader_id int32, leader_epoch int32),
                                     2 snapshot_id (end_offset int64, epoch int32)
      tagged fields            v12+
    tagged fields              v12+ (tag 0 node_endpoints from v16: never sent)

A tagged struct is written only when it differs from its default (all -1), as Kafka does.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from odradek.protocol.headers import RequestHeader, encode_response_header
from odradek.protocol.primitives import uvarint

__all__ = [
    "MAX_FETCH_VERSION",
    "MIN_FETCH_VERSION",
    "FetchPartitionData",
    "FetchTopicData",
    "Region",
    "encode_fetch_response",
    "response_size",
]

FETCH = 1
MIN_FETCH_VERSION = 4
MAX_FETCH_VERSION = 18
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_SIZE = _INT32
_TOP_V7 = struct.Struct(">ihi")  # throttle, error code, session id
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, high watermark, last stable
_INT64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_EPOCH_END_OFFSET = struct.Struct(">iqB")  # epoch, end offset, empty tagged fields
_LEADER = struct.Struct(">iiB")  # leader id, leader epoch, empty tagged fields
_SNAPSHOT = struct.Struct(">qiB")  # end offset, epoch, empty tagged fields
_NULL_INT32 = _INT32.pack(-1)


@runtime_checkable
class Region(Protocol):
    """Record data left in a file: ``length`` bytes (``fd``/``position`` for sendfile)."""

    @property
    def length(self) -> int: ...


RecordsLike = bytes | bytearray | memoryview | Region | Sequence[Any] | None


@dataclass(slots=True)
class FetchPartitionData:
    """One partition of a Fetch response; defaults are Kafka's "unknown" values."""

    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: Sequence[tuple[int, int]] | None = None  # (producer id, first offset)
    preferred_read_replica: int = -1
    # bytes, a Region, or a list of them (concatenated); None is a null record set.
    records: RecordsLike = None
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), v12+
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch), v12+
    snapshot_id: tuple[int, int] | None = None  # (end offset, epoch), v12+


@dataclass(slots=True)
class FetchTopicData:
    """One topic of a Fetch response (``topic_id`` is required from v13)."""

    name: str
    partitions: Sequence[Any]  # FetchPartitionData, or mappings with the same keys
    topic_id: uuid.UUID | None = None


_PARTITION_DEFAULTS = {
    "error_code": 0,
    "high_watermark": -1,
    "last_stable_offset": -1,
    "log_start_offset": -1,
    "aborted_transactions": None,
    "preferred_read_replica": -1,
    "records": None,
    "diverging_epoch": None,
    "current_leader": None,
    "snapshot_id": None,
}


def _getter(partition: Any) -> Any:
    if isinstance(partition, Mapping):
        unknown = partition.keys() - _PARTITION_DEFAULTS.keys() - {"partition_index"}
        if unknown:
            raise ValueError(f"unknown Fetch partition fields: {sorted(unknown)}")

        def get(name: str) -> Any:
            if name == "partition_index":
                return partition["partition_index"]
            return partition.get(name, _PARTITION_DEFAULTS[name])

        return get
    return lambda name: getattr(partition, name)


def _pair(value: Any, first: str, second: str) -> tuple[int, int] | None:
    """A tagged struct as a pair, or None when absent or equal to its default (-1, -1).

    Accepts a tuple or an object with the two named attributes (kio's EpochEndOffset,
    LeaderIdAndEpoch, SnapshotId).
    """
    if value is None:
        return None
    if isinstance(value, tuple):
        pair = (int(value[0]), int(value[1]))
    else:
        pair = (int(getattr(value, first)), int(getattr(value, second)))
    return None if pair == (-1, -1) else pair


class _Writer:
    """Collects bytes; a region closes the current bytes chunk and is kept as-is."""

    __slots__ = ("chunks", "current", "total")

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.current = bytearray(b"\x00\x00\x00\x00")  # size prefix, patched at the end
        self.total = 0

    def records(self, records: RecordsLike, flexible: bool) -> None:
        if records is None:
            self.current += b"\x00" if flexible else _NULL_INT32
            return
        parts: Sequence[Any]
        if isinstance(records, bytes | bytearray | memoryview):
            parts = (records,)
        elif isinstance(records, Sequence):
            parts = records
        elif hasattr(records, "length"):
            parts = (records,)
        else:
            raise TypeError(f"records must be bytes, a region or a list, not {type(records)}")
        length = 0
        for part in parts:
            if isinstance(part, bytes | bytearray | memoryview):
                length += len(part)
            elif hasattr(part, "length"):
                if part.length < 0:
                    raise ValueError(f"region with negative length {part.length}")
                length += part.length
            else:
                raise TypeError(f"record part must be bytes or a region, not {type(part)}")
        self.current += uvarint(length + 1) if flexible else _INT32.pack(length)
        for part in parts:
            if isinstance(part, bytes | bytearray | memoryview):
                self.current += part
            elif part.length:
                self._flush()
                self.chunks.append(part)
                self.total += part.length

    def _flush(self) -> None:
        if self.current:
            data = bytes(self.current)
            self.chunks.append(data)
            self.total += len(data)
            self.current = bytearray()

    def finish(self) -> list[Any]:
        self._flush()
        size = self.total - 4
        first = self.chunks[0]
        self.chunks[0] = _SIZE.pack(size) + first[4:]
        return self.chunks


def _topics(topics: Any) -> Iterable[tuple[str | None, uuid.UUID | None, Sequence[Any]]]:
    if isinstance(topics, Mapping):
        for key, partitions in topics.items():
            if isinstance(key, uuid.UUID):
                yield None, key, partitions
            elif isinstance(key, tuple):
                yield key[0], key[1], partitions
            else:
                yield key, None, partitions
        return
    for topic in topics:
        if isinstance(topic, FetchTopicData):
            yield topic.name, topic.topic_id, topic.partitions
        else:
            name, partitions = topic
            yield name, None, partitions


def encode_fetch_response(
    header: RequestHeader,
    throttle_ms: int,
    error_code: int,
    session_id: int,
    topics: Mapping[Any, Sequence[Any]] | Iterable[FetchTopicData],
) -> list[Any]:
    """Encode a framed Fetch response for ``header``'s version as bytes and region chunks.

    ``topics`` maps a topic name (or, from v13, a topic id ``uuid.UUID`` or a
    ``(name, id)`` pair) to its partitions, or is an iterable of ``FetchTopicData``.
    A partition is a ``FetchPartitionData`` or a mapping with the same keys.
    ``error_code`` and ``session_id`` exist from v7 and are ignored before.
    """
    version = header.api_version
    if header.api_key != FETCH:
        raise ValueError(f"not a Fetch request header: api key {header.api_key}")
    if not MIN_FETCH_VERSION <= version <= MAX_FETCH_VERSION:
        raise ValueError(
            f"Fetch v{version} is outside what the encoder writes "
            f"(v{MIN_FETCH_VERSION}..v{MAX_FETCH_VERSION})"
        )
    flexible = version >= FIRST_FLEXIBLE
    writer = _Writer()
    out = writer.current
    out += encode_response_header(FETCH, version, header.correlation_id)
    if version >= 7:
        out += _TOP_V7.pack(throttle_ms, error_code, session_id)
    else:
        out += _INT32.pack(throttle_ms)

    topic_list = list(_topics(topics))
    out += uvarint(len(topic_list) + 1) if flexible else _INT32.pack(len(topic_list))
    for name, topic_id, partitions in topic_list:
        out = writer.current
        if version >= FIRST_TOPIC_ID:
            if topic_id is None:
                raise ValueError(f"Fetch v{version} needs a topic id for topic {name!r}")
            out += topic_id.bytes
        else:
            if name is None:
                raise ValueError(f"Fetch v{version} needs a topic name (got id {topic_id})")
            encoded = name.encode("utf-8")
            out += uvarint(len(encoded) + 1) if flexible else _INT16.pack(len(encoded))
            out += encoded
        out += uvarint(len(partitions) + 1) if flexible else _INT32.pack(len(partitions))
        for partition in partitions:
            get = _getter(partition)
            out = writer.current
            out += _PARTITION_HEAD.pack(
                get("partition_index"),
                int(get("error_code")),
                get("high_watermark"),
                get("last_stable_offset"),
            )
            if version >= 5:
                out += _INT64.pack(get("log_start_offset"))
            aborted = get("aborted_transactions")
            if aborted is None:
                out += b"\x00" if flexible else _NULL_INT32
            else:
                out += uvarint(len(aborted) + 1) if flexible else _INT32.pack(len(aborted))
                for entry in aborted:
                    if isinstance(entry, tuple):
                        producer_id, first_offset = entry
                    else:
                        producer_id, first_offset = entry.producer_id, entry.first_offset
                    out += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        out += b"\x00"
            if version >= 11:
                out += _INT32.pack(get("preferred_read_replica"))
            if flexible:
                tagged = _partition_tags(get)
            writer.records(get("records"), flexible)
            if flexible:
                writer.current += tagged
        if flexible:
            writer.current += b"\x00"  # topic tagged fields
    if flexible:
        writer.current += b"\x00"  # response tagged fields
    return writer.finish()


def _partition_tags(get: Any) -> bytes:
    tags = []
    diverging = _pair(get("diverging_epoch"), "epoch", "end_offset")
    if diverging is not None:
        body = _EPOCH_END_OFFSET.pack(*diverging, 0)
        tags.append(b"\x00" + uvarint(len(body)) + body)
    leader = _pair(get("current_leader"), "leader_id", "leader_epoch")
    if leader is not None:
        body = _LEADER.pack(*leader, 0)
        tags.append(b"\x01" + uvarint(len(body)) + body)
    snapshot = _pair(get("snapshot_id"), "end_offset", "epoch")
    if snapshot is not None:
        body = _SNAPSHOT.pack(*snapshot, 0)
        tags.append(b"\x02" + uvarint(len(body)) + body)
    return uvarint(len(tags)) + b"".join(tags)


def response_size(chunks: Sequence[Any]) -> int:
    """Total bytes the chunks put on the wire (size prefix included)."""
    return sum(chunk.length if hasattr(chunk, "length") else len(chunk) for chunk in chunks)
