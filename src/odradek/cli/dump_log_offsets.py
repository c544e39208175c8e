"""``dump-log --offsets-decoder``: ``__consumer_offsets`` records as Kafka's tool prints them.

Kafka's DumpLogSegments turns each key and value into JSON with the field names of its
message schemas (``{"type":"1","data":{"group":...}}`` for keys, ``{"version":"3","data":
{...}}`` for values). A tombstone's payload is ``<DELETE>``. Member ``subscription`` and
``assignment`` bytes are shown base64-encoded, as Kafka's JSON converters write bytes.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from odradek.broker.group.offsets_records import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownRecordKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _version(data: bytes) -> int:
    if len(data) < 2:
        raise CorruptOffsetsRecordError("value shorter than its version")
    return int(struct.unpack_from(">h", data)[0])


def parse_offsets_record(
    offset: int, key: bytes | None, value: bytes | None
) -> tuple[str | None, str | None]:
    """(key text, payload text) for one ``__consumer_offsets`` record, like Kafka's
    OffsetsMessageParser; a record it cannot decode gives an explanation as the key."""
    if key is None:
        return (
            f"Failed to decode message at offset {offset} using offset topic decoder "
            "(message had a missing key)",
            None,
        )
    try:
        decoded = decode_key(key)
        if isinstance(decoded, UnknownRecordKey):
            return f"Unknown record type {decoded.version} at offset {offset}, skipping.", None
        key_version = _version(key)
        if isinstance(decoded, OffsetCommitKey):
            key_data: dict[str, Any] = {
                "group": decoded.group,
                "topic": decoded.topic,
                "partition": decoded.partition,
            }
        else:
            assert isinstance(decoded, GroupMetadataKey)
            key_data = {"group": decoded.group}
        key_text = _json({"type": str(key_version), "data": key_data})
        if value is None:
            return key_text, "<DELETE>"
        version = _version(value)
        if isinstance(decoded, OffsetCommitKey):
            value_data = _offset_commit_json(value, version)
        else:
            value_data = _group_metadata_json(value, version)
        return key_text, _json({"version": str(version), "data": value_data})
    except (CorruptOffsetsRecordError, ValueError) as exc:
        return f"Error at offset {offset}, skipping. {exc}", None


def _offset_commit_json(value: bytes, version: int) -> dict[str, Any]:
    commit = decode_offset_commit_value(value)
    data: dict[str, Any] = {"offset": commit.offset}
    if version >= 3:
        data["leaderEpoch"] = commit.leader_epoch
    data["metadata"] = commit.metadata
    data["commitTimestamp"] = commit.commit_timestamp
    if version == 1:
        data["expireTimestamp"] = commit.expire_timestamp
    return data


def _group_metadata_json(value: bytes, version: int) -> dict[str, Any]:
    group = decode_group_metadata_value(value)
    data: dict[str, Any] = {
        "protocolType": group.protocol_type,
        "generation": group.generation,
        "protocol": group.protocol,
        "leader": group.leader,
    }
    if version >= 2:
        data["currentStateTimestamp"] = group.current_state_timestamp
    members = []
    for member in group.members:
        entry: dict[str, Any] = {"memberId": member.member_id}
        if version >= 3:
            entry["groupInstanceId"] = member.group_instance_id
        entry["clientId"] = member.client_id
        entry["clientHost"] = member.client_host
        if version >= 1:
            entry["rebalanceTimeout"] = member.rebalance_timeout
        entry["sessionTimeout"] = member.session_timeout
        entry["subscription"] = base64.b64encode(member.subscription).decode()
        entry["assignment"] = base64.b64encode(member.assignment).decode()
        members.append(entry)
    data["members"] = members
    return data
