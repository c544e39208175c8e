"""The rebalance and session machinery of the group coordinator, driven by its timers.

:class:`Rebalancer` owns the two purgatories of the group coordinator (``Rebalance`` for the
join and sync phases, ``Heartbeat`` for sessions) and every decision their operations
(``delayed_ops``) call back into:

* **rebalance** -- :meth:`Rebalancer.maybe_prepare_rebalance` moves a group to
  PreparingRebalance and waits (an initial delay for an empty group, then the rebalance
  timeout) for its members to rejoin; :meth:`Rebalancer.on_complete_join` drops the members
  that did not, starts the next generation and answers the parked JoinGroups; members that
  then do not send SyncGroup in time are removed and the group rebalances again;
  :meth:`Rebalancer.store_sync_assignment` writes the leader's assignment before anybody
  receives it;
* **sessions** -- every member has a heartbeat expectation in the purgatory
  (:meth:`Rebalancer.complete_and_schedule_next_heartbeat_expiration`); one that expires
  removes the member and rebalances its group;
* **going away** -- a group unloaded or deleted answers its parked requests and drops its
  timers (:meth:`Rebalancer.on_group_unloaded`).

The requests that start all this (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) are in
``membership``; the group state machine itself is in ``group``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from kio.schema.errors import ErrorCode

from odradek.broker.group.delayed_ops import (
    DelayedHeartbeat,
    DelayedJoin,
    DelayedSync,
    InitialDelayedJoin,
    join_key,
    member_key,
    sync_key,
)
from odradek.broker.group.group import (
    GroupMetadata,
    GroupState,
    JoinGroupResult,
    MemberMetadata,
    SyncGroupResult,
)
from odradek.broker.group.offsets_log import store_group
from odradek.broker.group.registry import GroupRegistry
from odradek.broker.purgatory import DelayedOperationPurgatory
from odradek.broker.timing_wheel import Timer

__all__ = ["Rebalancer"]

log = logging.getLogger(__name__)


class Rebalancer:
    """Rebalances, pending syncs and member sessions of the registry's groups."""

    def __init__(self, registry: GroupRegistry, timer: Timer) -> None:
        self.registry = registry
        self.heartbeat_purgatory = DelayedOperationPurgatory("Heartbeat", timer)
        self.rebalance_purgatory = DelayedOperationPurgatory("Rebalance", timer)

    def shutdown(self) -> None:
        self.rebalance_purgatory.shutdown()
        self.heartbeat_purgatory.shutdown()

    # == rebalance =================================================================================

    def maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Members parked in SyncGroup must rejoin for the new generation.
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self.remove_sync_expiration(group)
        operation: DelayedJoin
        if group.state is GroupState.EMPTY:
            delay = self.registry.config.group_initial_rebalance_delay_ms
            operation = InitialDelayedJoin(
                self,
                self.rebalance_purgatory,
                group,
                delay,
                delay,
                max(group.rebalance_timeout_ms - delay, 0),
            )
        else:
            operation = DelayedJoin(self, group, group.rebalance_timeout_ms)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.registry.clock())
        log.info(
            "preparing to rebalance group %s in state %s with old generation %d: %s",
            group.group_id,
            group.state,
            group.generation_id,
            reason,
        )
        self.rebalance_purgatory.try_complete_else_watch(operation, [join_key(group.group_id)])

    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool:
        # A dead group (unloaded, deleted) has nothing left to wait for.
        if group.state is GroupState.DEAD or group.has_all_members_joined():
            return force_complete()
        return False

    def on_complete_join(self, group: GroupMetadata) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            if group.state is not GroupState.DEAD:
                log.warning("join of group %s completed in state %s", group.group_id, group.state)
            return
        # Dynamic members that did not rejoin in time are gone; static ones stay (their session
        # timeout decides), so a slow restart does not cost them their assignment.
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                self._remove_member(group, member)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody but silent static members: wait another round for them (or their expiry).
            log.warning(
                "group %s could not complete its rebalance: no member rejoined", group.group_id
            )
            self.rebalance_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms), [join_key(group.group_id)]
            )
            return
        group.init_next_generation(self.registry.clock())
        if group.state is GroupState.EMPTY:
            log.info(
                "group %s with generation %d is now empty", group.group_id, group.generation_id
            )
            self.registry.spawn(self._store_empty_group(group))
            return
        log.info(
            "stabilizing group %s generation %d (%s) with %d members",
            group.group_id,
            group.generation_id,
            group.protocol_name,
            group.size,
        )
        leader_view = group.current_member_metadata()
        for member in list(group.members.values()):
            result = JoinGroupResult(
                ErrorCode.none,
                member.member_id,
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                group.leader_id or "",
                leader_view if group.is_leader(member.member_id) else (),
            )
            group.invoke_join_future(member, result)
            self.complete_and_schedule_next_heartbeat_expiration(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    async def _store_empty_group(self, group: GroupMetadata) -> None:
        error = await store_group(self.registry.log, group, {})
        if error is not ErrorCode.none:
            # Harmless: the previous generation in the log has no live members either way.
            log.warning("failed to write empty metadata for group %s: %s", group.group_id, error)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(
        self, group: GroupMetadata, assignment: Mapping[str, bytes]
    ) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in list(group.members.values()):
            result = SyncGroupResult(
                error,
                member.assignment if error is ErrorCode.none else b"",
                group.protocol_type,
                group.protocol_name,
            )
            if group.invoke_sync_future(member, result):
                # Sessions were not ticking while parked: restart them now.
                self.complete_and_schedule_next_heartbeat_expiration(group, member)

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self.rebalance_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms),
            [sync_key(group.group_id)],
        )

    def remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def try_complete_pending_sync(
        self, group: GroupMetadata, generation_id: int, force_complete: Callable[[], bool]
    ) -> bool:
        if generation_id != group.generation_id or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return force_complete()
        if group.has_received_sync_from_all_members():
            return force_complete()
        return False

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        if generation_id != group.generation_id or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return
        if group.has_received_sync_from_all_members():
            return
        missing = sorted(group.pending_sync_members)
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                group.invoke_join_future(member, JoinGroupResult(ErrorCode.unknown_member_id, ""))
                group.invoke_sync_future(member, SyncGroupResult(ErrorCode.unknown_member_id))
                self._remove_member(group, member)
        self._prepare_rebalance(group, f"members {missing} did not send SyncGroup in time")

    # == sessions ==================================================================================

    def complete_and_schedule_next_heartbeat_expiration(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        key = member_key(group.group_id, member.member_id)
        # Complete the current expectation, then expect the next heartbeat.
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(
                self,
                group,
                member.member_id,
                False,
                member.session_timeout_ms if timeout_ms is None else timeout_ms,
            ),
            [key],
        )

    def try_complete_heartbeat(self, operation: DelayedHeartbeat) -> bool:
        group = operation.group
        if group.state is GroupState.DEAD:
            return operation.force_complete()
        if operation.is_pending:
            # Done once the pending member has joined for real (or left).
            if group.has(operation.member_id) or operation.member_id not in group.pending_members:
                return operation.force_complete()
            return False
        member = group.members.get(operation.member_id)
        if member is None or member.has_satisfied_heartbeat() or member.is_leaving:
            return operation.force_complete()
        return False

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        if group.state is GroupState.DEAD:
            return
        if is_pending:
            if member_id in group.pending_members:
                log.info("pending member %s of group %s expired", member_id, group.group_id)
                group.pending_members.discard(member_id)
                if group.state is GroupState.PREPARING_REBALANCE:
                    self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info(
            "member %s of group %s failed its session timeout; removing it",
            member_id,
            group.group_id,
        )
        self.remove_member_and_update_group(group, member, "session timeout")

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """Drop the member and its session timer."""
        group.remove(member.member_id)
        member.is_leaving = True
        self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member.member_id))

    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        # Answer its parked requests first: UNKNOWN_MEMBER_ID makes a live client rejoin.
        group.invoke_join_future(member, JoinGroupResult(ErrorCode.unknown_member_id, ""))
        group.invoke_sync_future(member, SyncGroupResult(ErrorCode.unknown_member_id))
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(
                group, f"removing member {member.member_id}: {reason or 'left'}"
            )
        elif group.state is GroupState.PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    # == assignment ================================================================================

    async def store_sync_assignment(
        self, group: GroupMetadata, generation_id: int, assignment: dict[str, bytes]
    ) -> None:
        error = await store_group(self.registry.log, group, assignment)
        if (
            group.state is not GroupState.COMPLETING_REBALANCE
            or group.generation_id != generation_id
        ):
            return  # the group moved on while we wrote; its new round will write again
        if error is not ErrorCode.none:
            self._reset_and_propagate_assignment_error(group, error)
            self.maybe_prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        self._set_and_propagate_assignment(group, assignment)
        group.transition_to(GroupState.STABLE, self.registry.clock())

    # == groups going away =========================================================================

    def on_group_unloaded(self, group: GroupMetadata) -> None:
        previous = group.state
        group.transition_to(GroupState.DEAD, self.registry.clock())
        if previous is GroupState.PREPARING_REBALANCE:
            for member in list(group.members.values()):
                group.invoke_join_future(
                    member, JoinGroupResult(ErrorCode.not_coordinator, member.member_id)
                )
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
        elif previous in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            for member in list(group.members.values()):
                group.invoke_sync_future(member, SyncGroupResult(ErrorCode.not_coordinator))
        for member_id in [*group.members, *group.pending_members]:
            self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))
        self.remove_sync_expiration(group)

    def on_group_unloaded_quietly(self, group: GroupMetadata) -> None:
        """An Empty group going Dead: only pending-member timers may still reference it."""
        for member_id in list(group.pending_members):
            self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))
        self.remove_sync_expiration(group)

