"""Transactional offset commits (TxnOffsetCommit, KIP-98 / KIP-447) for the group coordinator.

A transactional producer commits its consumer's offsets *inside* its transaction: the
records go to the group's ``__consumer_offsets`` partition in a transactional batch of the
producer, and stay *pending* until the transaction's marker lands in that partition —
COMMIT makes them the group's committed offsets, ABORT drops them. Meanwhile OffsetFetch
with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for those partitions (KIP-447).

On load, ``OffsetsTopic.read`` yields committed transactional records at their marker and
keeps the ones still open per producer; :meth:`TxnOffsetCommits.restore` makes those
pending again, so a marker written after a restart still completes them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.group.group import CommittedOffset, GroupMetadata, GroupState
from odradek.broker.group.offsets_records import (
    CorruptOffsetsRecordError,
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
)
from odradek.broker.group.persistence import offset_commit_records

if TYPE_CHECKING:
    from odradek.broker.group.offsets import OffsetCommitRequestData
    from odradek.broker.group.registry import GroupRegistry

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class TxnOffsetCommits:
    def __init__(self, registry: GroupRegistry) -> None:
        self._registry = registry
        # group id -> producer id -> partition -> pending offset
        self._pending: dict[str, dict[int, dict[TopicPartition, CommittedOffset]]] = {}

    def pending(self, group_id: str) -> dict[int, dict[TopicPartition, CommittedOffset]]:
        return self._pending.get(group_id, {})

    def unstable_partitions(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> set[TopicPartition]:
        """Partitions with a transactional commit still pending (all of them when None)."""
        pending = {tp for by_tp in self.pending(group_id).values() for tp in by_tp}
        return pending if partitions is None else pending & set(partitions)

    async def commit(
        self,
        *,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetCommitRequestData],
    ) -> dict[TopicPartition, ErrorCode]:
        registry = self._registry
        error = registry.group_error(group_id, allow_empty=True)
        if error is None:
            group = registry.groups.get(group_id)
            if group is None:
                if generation_id >= 0:
                    error = ErrorCode.illegal_generation
                else:
                    group = GroupMetadata(group_id, GroupState.EMPTY, registry.clock())
                    registry.groups[group_id] = group
            if group is not None:
                error = _validate(registry, group, generation_id, member_id, group_instance_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        now = registry.clock()
        to_write: dict[TopicPartition, CommittedOffset] = {}
        results: dict[TopicPartition, ErrorCode] = {}
        for tp, data in offsets.items():
            metadata = data.metadata or ""
            if (
                len(metadata.encode("utf-16-le")) // 2
                > registry.config.offset_metadata_max_bytes
            ):
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            to_write[tp] = CommittedOffset(
                offset=data.offset,
                metadata=metadata,
                commit_timestamp=now,
                leader_epoch=data.leader_epoch,
            )
        if not to_write:
            return results
        partition = registry.partition_for(group_id)
        try:
            last = await registry.log.append_transactional(  # type: ignore[attr-defined]
                partition,
                offset_commit_records(group_id, to_write),
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
        except Exception as exc:
            log.warning("transactional offset commit for %s failed: %r", group_id, exc)
            code = _append_error(getattr(exc, "error_code", -1))
            return {**results, **dict.fromkeys(to_write, code)}
        first = last - len(to_write) + 1
        by_tp = self._pending.setdefault(group_id, {}).setdefault(producer_id, {})
        for index, (tp, committed) in enumerate(to_write.items()):
            committed.append_offset = first + index
            by_tp[tp] = committed
            results[tp] = ErrorCode.none
        return results

    def complete(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker of ``producer_id`` landed in ``__consumer_offsets-partition``."""
        registry = self._registry
        for group_id in list(self._pending):
            if registry.partition_for(group_id) != partition:
                continue
            offsets = self._pending[group_id].pop(producer_id, None)
            if not self._pending[group_id]:
                del self._pending[group_id]
            if not commit or not offsets:
                continue
            group = registry.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                continue
            for tp, committed in offsets.items():
                group.apply_offset_commit(tp, committed)

    def restore(
        self, partition: int, open_txns: Mapping[int, list[tuple[int, bytes, bytes | None]]]
    ) -> None:
        """Make the records of transactions still open at load time pending again."""
        registry = self._registry
        for producer_id, records in open_txns.items():
            for log_offset, key_bytes, value_bytes in records:
                try:
                    key = decode_key(key_bytes)
                    if not isinstance(key, OffsetCommitKey) or value_bytes is None:
                        continue
                    value = decode_offset_commit_value(value_bytes)
                except CorruptOffsetsRecordError as exc:
                    log.error(
                        "skipping malformed pending offset in partition %d: %s", partition, exc
                    )
                    continue
                if registry.partition_for(key.group) != partition:
                    continue
                if key.group not in registry.groups:
                    registry.groups[key.group] = GroupMetadata(
                        key.group, GroupState.EMPTY, registry.clock()
                    )
                self._pending.setdefault(key.group, {}).setdefault(producer_id, {})[
                    (key.topic, key.partition)
                ] = CommittedOffset(
                    offset=value.offset,
                    metadata=value.metadata,
                    commit_timestamp=value.commit_timestamp,
                    leader_epoch=value.leader_epoch,
                    append_offset=log_offset,
                )


def _validate(
    registry: Any,
    group: GroupMetadata,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
) -> ErrorCode | None:
    """KIP-447: a transactional commit carries the consumer's generation and member."""
    if group.state is GroupState.DEAD:
        return ErrorCode.coordinator_not_available
    if group_instance_id is not None:
        current = group.static_member_id(group_instance_id)
        if current is not None and current != member_id:
            return ErrorCode.fenced_instance_id
    if member_id and not group.has(member_id):
        return ErrorCode.unknown_member_id
    if generation_id >= 0 and generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    return None


def _append_error(code: int) -> ErrorCode:
    if code in (3, 19, 20, 7):
        return ErrorCode.coordinator_not_available
    if code in (6, 56):
        return ErrorCode.not_coordinator
    if code in (47, 90):
        return ErrorCode(code)  # fenced by a newer producer epoch
    return ErrorCode.unknown_server_error
