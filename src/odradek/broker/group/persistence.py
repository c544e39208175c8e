"""Between groups in memory and records in ``__consumer_offsets`` (no I/O here).

Writing: :func:`group_metadata_record`, :func:`offset_commit_records` and :func:`tombstones`
turn in-memory state into the ``(key, value)`` pairs the coordinator appends (formats in
``offsets_records``). Reading: :class:`PartitionRebuilder` replays a partition's records in
log order -- a later record for the same key replaces the earlier one, a tombstone removes it,
exactly what log compaction would keep -- and :meth:`PartitionRebuilder.groups` builds the
groups they describe:

* group metadata with members -> a **Stable** group of that generation, members with their
  ids, instance ids, timeouts, subscription (for the selected protocol) and assignment; they
  must heartbeat within their session timeout to stay;
* group metadata without members -> an **Empty** group that keeps its protocol type;
* offsets without group metadata -> an **Empty** group without protocol type (a "simple"
  consumer that only stores offsets).

A group in the middle of a rebalance when its coordinator moved comes back as its last stored
generation: its members rejoin, as they would with Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from odradek.broker.group.group import CommittedOffset, GroupMetadata, GroupState, MemberMetadata
from odradek.broker.group.offsets_records import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

__all__ = [
    "PartitionRebuilder",
    "Record",
    "group_metadata_record",
    "offset_commit_records",
    "tombstones",
]

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]
TopicPartition = tuple[str, int]


def group_metadata_record(group: GroupMetadata, assignment: Mapping[str, bytes]) -> Record:
    """The GroupMetadata record of ``group`` with these assignments (member id -> bytes)."""
    protocol = group.protocol_name
    members = []
    for member in group.members.values():
        try:
            subscription = member.metadata_for(protocol) if protocol is not None else b""
        except KeyError:
            subscription = b""
        members.append(
            MemberMetadataValue(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout=member.rebalance_timeout_ms,
                session_timeout=member.session_timeout_ms,
                subscription=subscription,
                assignment=assignment.get(member.member_id, b""),
            )
        )
    value = GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=protocol,
        leader=group.leader_id,
        members=tuple(members),
        current_state_timestamp=(
            group.current_state_timestamp if group.current_state_timestamp is not None else -1
        ),
    )
    return encode_group_metadata_key(group.group_id), encode_group_metadata_value(value)


def offset_commit_records(
    group_id: str, offsets: Mapping[TopicPartition, CommittedOffset]
) -> list[Record]:
    return [
        (
            encode_offset_commit_key(group_id, topic, partition),
            encode_offset_commit_value(
                OffsetCommitValue(
                    offset=committed.offset,
                    metadata=committed.metadata,
                    commit_timestamp=committed.commit_timestamp,
                    leader_epoch=committed.leader_epoch,
                    expire_timestamp=committed.expire_timestamp,
                )
            ),
        )
        for (topic, partition), committed in offsets.items()
    ]


def tombstones(
    group_id: str, partitions: Iterable[TopicPartition], *, group: bool = False
) -> list[Record]:
    """Tombstones for these offsets, and for the group metadata when ``group``."""
    records: list[Record] = [
        (encode_offset_commit_key(group_id, topic, partition), None)
        for topic, partition in partitions
    ]
    if group:
        records.append((encode_group_metadata_key(group_id), None))
    return records


class PartitionRebuilder:
    """Feed a partition's records in log order, then ask for the groups they describe."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.records = 0
        self.skipped = 0
        self._metadata: dict[str, GroupMetadataValue | None] = {}
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def add(self, log_offset: int, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """Replay one record; a malformed one is logged and skipped (the rest still loads)."""
        self.records += 1
        try:
            key = decode_key(key_bytes)
            if isinstance(key, OffsetCommitKey):
                group_offsets = self._offsets.setdefault(key.group, {})
                tp = (key.topic, key.partition)
                if value_bytes is None:
                    group_offsets.pop(tp, None)
                    return
                value = decode_offset_commit_value(value_bytes)
                current = group_offsets.get(tp)
                if current is not None and current.append_offset > log_offset:
                    # A transactional commit replayed at its marker is older than a plain
                    # commit already seen: the later record wins, as in memory.
                    return
                group_offsets[tp] = CommittedOffset(
                    offset=value.offset,
                    metadata=value.metadata,
                    commit_timestamp=value.commit_timestamp,
                    leader_epoch=value.leader_epoch,
                    expire_timestamp=value.expire_timestamp,
                    append_offset=log_offset,
                )
            elif isinstance(key, GroupMetadataKey):
                self._metadata[key.group] = (
                    None if value_bytes is None else decode_group_metadata_value(value_bytes)
                )
            # UnknownRecordKey: KIP-848 / share-group records, not for classic groups.
        except CorruptOffsetsRecordError as exc:
            self.skipped += 1
            log.error(
                "skipping malformed record at offset %d of __consumer_offsets-%d: %s",
                log_offset,
                self.partition,
                exc,
            )

    def groups(self, now_ms: int) -> list[GroupMetadata]:
        out = []
        for group_id in {*self._metadata, *self._offsets}:
            group = _rebuild_group(
                group_id, self._metadata.get(group_id), self._offsets.get(group_id) or {}, now_ms
            )
            if group is not None:
                out.append(group)
        return out


def _rebuild_group(
    group_id: str,
    value: GroupMetadataValue | None,
    offsets: dict[TopicPartition, CommittedOffset],
    now_ms: int,
) -> GroupMetadata | None:
    if value is None and not offsets:
        return None  # tombstoned group and no offsets left: nothing to serve
    if value is None:
        group = GroupMetadata(group_id, GroupState.EMPTY, now_ms)
    else:
        group = GroupMetadata(
            group_id, GroupState.STABLE if value.members else GroupState.EMPTY, now_ms
        )
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.current_state_timestamp = (
            value.current_state_timestamp if value.current_state_timestamp >= 0 else None
        )
        for record in value.members:
            group.add(
                MemberMetadata(
                    member_id=record.member_id,
                    group_instance_id=record.group_instance_id,
                    client_id=record.client_id,
                    client_host=record.client_host,
                    rebalance_timeout_ms=record.rebalance_timeout,
                    session_timeout_ms=record.session_timeout,
                    protocol_type=value.protocol_type,
                    protocols=[(value.protocol or "", record.subscription)],
                    assignment=record.assignment,
                ),
                None,
            )
        if group.members:
            group.leader_id = value.leader if value.leader in group.members else None
            if group.leader_id is None:
                group.leader_id = next(iter(group.members))
        group.refresh_subscribed_topics()
    group.offsets = offsets
    return group
