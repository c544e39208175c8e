"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, and their removal over time.

:class:`OffsetStore` commits a member's (or a "simple" consumer's) offsets to
``__consumer_offsets`` and applies them to the group only once the append succeeded, so
memory never gets ahead of the log; it answers OffsetFetch from memory and OffsetDelete
(KIP-496) with tombstones. Offsets also go away on their own: every
``offsets.retention.check.interval.ms`` :meth:`OffsetStore.expire_offsets` tombstones the
expired ones, and :meth:`OffsetStore.on_partitions_deleted` those of deleted topics; an empty
group left without offsets goes Dead then. Transactional commits (TxnOffsetCommit) are
``txn_offsets``'; the in-memory offsets and their expiry rule live on the group (``group``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.broker.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from odradek.broker.group.group import CommittedOffset, GroupMetadata, GroupState
from odradek.broker.group.offsets_log import append_error, write_tombstones
from odradek.broker.group.persistence import offset_commit_records
from odradek.broker.group.rebalance import Rebalancer
from odradek.broker.group.registry import GroupRegistry, validate_current_member

__all__ = ["OffsetCommitRequestData", "OffsetStore"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestData:
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1


class OffsetStore:
    """Committed offsets of the registry's groups (see the module docstring)."""

    def __init__(self, registry: GroupRegistry, rebalancer: Rebalancer) -> None:
        self.registry = registry
        self.rebalancer = rebalancer


    async def commit_offsets(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommitRequestData],
        retention_ms: int | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit offsets for a group member, or for a "simple" consumer (generation -1, no
        member id) when the group has no members. ``retention_ms`` is OffsetCommit v2-v4's
        explicit retention time (None/-1: the broker's ``offsets.retention.minutes``)."""

        def all_(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, error)

        error = self.registry.group_error(group_id, allow_empty=True)
        if error is not None:
            return all_(error)
        group = self.registry.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation this coordinator never saw (a stale one).
                return all_(ErrorCode.illegal_generation)
            group = GroupMetadata(group_id, GroupState.EMPTY, self.registry.clock())
            self.registry.groups[group_id] = group
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return all_(error)
        if group.state is GroupState.COMPLETING_REBALANCE:
            # A member of the new generation that has not synced yet: let it finish first.
            return all_(ErrorCode.rebalance_in_progress)
        member = group.members.get(member_id)
        if member is not None:
            self.rebalancer.complete_and_schedule_next_heartbeat_expiration(group, member)
        if not offsets:
            return {}
        expire = -1
        if retention_ms is not None and retention_ms >= 0:
            expire = self.registry.clock() + retention_ms
        # Shielded: once the append is issued, its outcome must be applied even if the client
        # goes away, or memory and log would disagree.
        task = self.registry.spawn(self._store_offsets(group, dict(offsets), expire))
        return await asyncio.shield(task)

    def _validate_offset_commit(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
    ) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            error = validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif group.state is not GroupState.EMPTY:
            # Only members may commit while the group has members.
            return ErrorCode.unknown_member_id
        return None

    async def _store_offsets(
        self,
        group: GroupMetadata,
        offsets: dict[TopicPartition, OffsetCommitRequestData],
        expire_timestamp: int,
    ) -> dict[TopicPartition, ErrorCode]:
        now = self.registry.clock()
        max_metadata = self.registry.config.offset_metadata_max_bytes
        results: dict[TopicPartition, ErrorCode] = {}
        to_write: dict[TopicPartition, CommittedOffset] = {}
        for tp, data in offsets.items():
            metadata = data.metadata or ""
            # Kafka compares the Java string length (UTF-16 units) with offset.metadata.max.bytes.
            if len(metadata.encode("utf-16-le")) // 2 > max_metadata:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            to_write[tp] = CommittedOffset(
                offset=data.offset,
                metadata=metadata,
                commit_timestamp=now,
                leader_epoch=data.leader_epoch,
                expire_timestamp=expire_timestamp,
            )
        if not to_write:
            return results
        records = offset_commit_records(group.group_id, to_write)
        for tp in to_write:
            group.pending_offset_commits[tp] += 1
        error = ErrorCode.none
        last_offset = -1
        try:
            last_offset = await self.registry.log.append(
                self.registry.partition_for(group.group_id), records
            )
        except Exception as exc:
            error = append_error(exc, for_offsets=True)
            log.warning("offset commit for group %s failed: %r", group.group_id, exc)
        finally:
            for tp in to_write:
                group.pending_offset_commits[tp] -= 1
                if group.pending_offset_commits[tp] <= 0:
                    del group.pending_offset_commits[tp]
        if error is ErrorCode.none and group.state is not GroupState.DEAD:
            first = last_offset - len(records) + 1
            for index, (tp, committed) in enumerate(to_write.items()):
                committed.append_offset = first + index
                group.apply_offset_commit(tp, committed)
        for tp in to_write:
            results[tp] = error
        return results

    def fetch_offsets(
        self,
        *,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
    ) -> tuple[ErrorCode, dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets of ``partitions`` (None: every partition with an offset); a
        partition without one maps to None (answered as offset -1)."""
        del require_stable  # only pending *transactional* commits are unstable; none here
        error = self.registry.group_error(group_id, allow_empty=True)
        if error is not None:
            return error, {}
        group = self.registry.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.none, dict.fromkeys(partitions or (), None)
        if partitions is None:
            return ErrorCode.none, {tp: group.offsets[tp] for tp in sorted(group.offsets)}
        return ErrorCode.none, {tp: group.offsets.get(tp) for tp in partitions}

    async def delete_offsets(
        self, *, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (KIP-496): allowed for an empty group, and for a consumer group on
        topics it does not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC otherwise)."""
        error = self.registry.group_error(group_id, allow_empty=False)
        if error is not None:
            return error, {}
        group = self.registry.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}
        results: dict[TopicPartition, ErrorCode] = {}
        if group.state is GroupState.EMPTY:
            eligible = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            eligible = []
            for tp in partitions:
                if group.is_subscribed_to_topic(tp[0]):
                    results[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.non_empty_group, {}
        removed = {tp: group.offsets.pop(tp) for tp in eligible if tp in group.offsets}
        write_error = ErrorCode.none
        if removed:
            write_error = await write_tombstones(self.registry.log, group, removed)
            if write_error is not ErrorCode.none:
                for tp, committed in removed.items():
                    group.offsets.setdefault(tp, committed)  # unless re-committed meanwhile
        for tp in eligible:
            results[tp] = write_error if tp in removed else ErrorCode.none
        return ErrorCode.none, results

    async def expire_offsets(self) -> int:
        """One pass of offset expiration (run every ``offsets.retention.check.interval.ms``):
        expired offsets get tombstones; an empty group left without offsets goes Dead and its
        metadata is tombstoned too. Returns the number of offsets expired."""
        now = self.registry.clock()
        retention = self.registry.config.offsets_retention_ms
        total = await self._cleanup_groups(
            lambda group: group.remove_expired_offsets(now, retention), "expired"
        )
        if total:
            log.info("expired %d offsets", total)
        return total

    async def on_partitions_deleted(self, partitions: Iterable[TopicPartition]) -> int:
        """Topics were deleted: drop their committed offsets with tombstones, as Kafka's
        handleDeletedPartitions does, so a topic re-created under the same name does not
        resume at offsets of the old one. Returns the number of offsets removed."""
        gone = frozenset(partitions)

        def remove(group: GroupMetadata) -> dict[TopicPartition, CommittedOffset]:
            removed = {tp: group.offsets[tp] for tp in gone if tp in group.offsets}
            for tp in removed:
                del group.offsets[tp]
            return removed

        total = await self._cleanup_groups(remove, "deleted-topic")
        if total:
            log.info("removed %d offsets of deleted partitions", total)
        return total

    async def _cleanup_groups(
        self,
        remove: Callable[[GroupMetadata], Mapping[TopicPartition, CommittedOffset]],
        reason: str,
    ) -> int:
        """Remove offsets chosen by ``remove`` from every owned group and write their
        tombstones; an empty group left without offsets goes Dead (metadata tombstoned)."""
        now = self.registry.clock()
        total = 0
        for group in list(self.registry.groups.values()):
            partition = self.registry.partition_for(group.group_id)
            if partition not in self.registry.owned or group.state is GroupState.DEAD:
                continue
            removed = remove(group)
            dead = False
            if group.state is GroupState.EMPTY and not group.has_offsets():
                group.transition_to(GroupState.DEAD, now)
                if self.registry.groups.get(group.group_id) is group:
                    del self.registry.groups[group.group_id]
                self.rebalancer.on_group_unloaded_quietly(group)
                dead = True
                log.info("group %s is now dead: empty and without offsets", group.group_id)
            if removed or dead:
                error = await write_tombstones(
                    self.registry.log, group, removed, group_tombstone=dead
                )
                if error is not ErrorCode.none:
                    log.warning(
                        "tombstones for %s offsets of group %s failed: %s",
                        reason,
                        group.group_id,
                        error,
                    )
            total += len(removed)
        return total
