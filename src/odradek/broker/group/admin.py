"""The administrative group requests: ListGroups, DescribeGroups, DeleteGroups.

:class:`GroupAdmin` answers what ``kafka-consumer-groups`` and admin clients ask about the
groups this broker coordinates -- which there are and in which state, who their members are
and what they were assigned -- and deletes empty groups (their offsets and metadata are
tombstoned). :class:`GroupOverview`, :class:`GroupSummary` and :class:`MemberSummary` are the
answers the handlers turn into responses.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.broker.group.group import GroupMetadata, GroupState
from odradek.broker.group.offsets_log import write_tombstones
from odradek.broker.group.rebalance import Rebalancer
from odradek.broker.group.registry import GroupRegistry

__all__ = [
    "CLASSIC_GROUP_TYPE",
    "GroupAdmin",
    "GroupOverview",
    "GroupSummary",
    "MemberSummary",
]

log = logging.getLogger(__name__)

CLASSIC_GROUP_TYPE = "classic"  # ListGroups v5 group_type of every group this coordinator runs


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: GroupState
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    state: GroupState
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


class GroupAdmin:
    """ListGroups, DescribeGroups and DeleteGroups over the registry's groups."""

    def __init__(self, registry: GroupRegistry, rebalancer: Rebalancer) -> None:
        self.registry = registry
        self.rebalancer = rebalancer

    def list_groups(
        self, states_filter: Sequence[str] = (), types_filter: Sequence[str] = ()
    ) -> tuple[ErrorCode, list[GroupOverview]]:
        """Groups of the partitions owned here; COORDINATOR_LOAD_IN_PROGRESS (with the groups
        loaded so far) while any partition loads. Filters compare case-insensitively."""
        if not self.registry.active:
            return ErrorCode.coordinator_not_available, []
        if types_filter and CLASSIC_GROUP_TYPE not in {t.lower() for t in types_filter}:
            groups: list[GroupOverview] = []
        else:
            states = {s.lower() for s in states_filter}
            groups = [
                GroupOverview(group.group_id, group.protocol_type or "", group.state)
                for group in self.registry.groups.values()
                if group.state is not GroupState.DEAD
                and self.registry.partition_for(group.group_id) in self.registry.owned
                and (not states or group.state.value.lower() in states)
            ]
        error = ErrorCode.coordinator_load_in_progress if self.registry.loading else ErrorCode.none
        return error, groups

    def describe_group(self, group_id: str | None) -> tuple[ErrorCode, GroupSummary | None]:
        """(error, summary); an unknown group is (NONE, None): Kafka describes it as Dead."""
        error = self.registry.group_error(group_id, allow_empty=True)
        if error is not None:
            return error, None
        assert group_id is not None
        group = self.registry.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.none, None
        stable = group.state is GroupState.STABLE and group.protocol_name is not None
        members = []
        for member in group.members.values():
            metadata = b""
            assignment = b""
            if stable:
                assert group.protocol_name is not None
                try:
                    metadata = member.metadata_for(group.protocol_name)
                except KeyError:
                    metadata = b""
                assignment = member.assignment
            members.append(
                MemberSummary(
                    member.member_id,
                    member.group_instance_id,
                    member.client_id,
                    member.client_host,
                    metadata,
                    assignment,
                )
            )
        return ErrorCode.none, GroupSummary(
            group.state,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            tuple(members),
        )

    async def delete_groups(self, group_ids: Sequence[str | None]) -> dict[str | None, ErrorCode]:
        """DeleteGroups: only empty groups (NON_EMPTY_GROUP otherwise); their offsets and
        metadata are tombstoned."""
        results: dict[str | None, ErrorCode] = {}
        doomed: list[GroupMetadata] = []
        for group_id in group_ids:
            error = self.registry.group_error(group_id, allow_empty=True)
            if error is not None:
                results[group_id] = error
                continue
            assert group_id is not None
            group = self.registry.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                results[group_id] = ErrorCode.group_id_not_found
            elif group.state is GroupState.EMPTY:
                group.transition_to(GroupState.DEAD, self.registry.clock())
                del self.registry.groups[group_id]
                self.rebalancer.on_group_unloaded_quietly(group)
                doomed.append(group)
                results[group_id] = ErrorCode.none
            else:
                results[group_id] = ErrorCode.non_empty_group
        for group in doomed:
            removed = dict(group.offsets)
            group.offsets.clear()
            error = await write_tombstones(self.registry.log, group, removed, group_tombstone=True)
            if error is not ErrorCode.none:
                # Memory already forgot it; the log still has it until a later cleanup.
                log.warning("tombstones for deleted group %s failed: %s", group.group_id, error)
                results[group.group_id] = error
        return results
