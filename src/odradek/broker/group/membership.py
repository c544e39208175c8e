"""The membership requests of the classic group protocol: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup.

:class:`Membership` validates each request against the group and its member and decides what
it does: a new member gets an id (KIP-394) and joins, a static member (KIP-345) replaces its
previous id and may keep the current generation, a member whose protocols changed or the
leader triggers a rebalance, followers wait in SyncGroup for the leader's assignment, a
heartbeat restarts a session, a leaving member is removed. What happens *next* -- the
rebalance's phases and timeouts, session expiry -- is the ``rebalance`` module's; the group
state machine is ``group``'s.

JoinGroup and SyncGroup return once the rebalance has progressed far enough: their answers are
asyncio futures parked on the member and completed by the rebalancer.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.broker.group.delayed_ops import DelayedHeartbeat, join_key, member_key
from odradek.broker.group.group import (
    GroupMetadata,
    GroupState,
    JoinGroupResult,
    MemberMetadata,
    SyncGroupResult,
)
from odradek.broker.group.offsets_log import store_group
from odradek.broker.group.rebalance import Rebalancer
from odradek.broker.group.registry import GroupRegistry, validate_current_member

__all__ = ["Membership"]

log = logging.getLogger(__name__)


class Membership:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup for the registry's groups."""

    def __init__(self, registry: GroupRegistry, rebalancer: Rebalancer) -> None:
        self.registry = registry
        self.rebalancer = rebalancer

    # == JoinGroup ================================================================================

    async def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        require_known_member_id: bool,
        supports_skip_assignment: bool = False,
        reason: str | None = None,
    ) -> JoinGroupResult:
        """Join (or rejoin) a group; returns when the join phase of the rebalance completes.

        ``require_known_member_id`` is JoinGroup v4+ (KIP-394: a member without id first gets
        MEMBER_ID_REQUIRED with its id); ``supports_skip_assignment`` is v9+ (KIP-814).
        """
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        error = self.registry.group_error(group_id, allow_empty=False)
        if error is not None:
            return JoinGroupResult(error, member_id)
        if not (
            self.registry.config.group_min_session_timeout_ms
            <= session_timeout_ms
            <= self.registry.config.group_max_session_timeout_ms
        ):
            return JoinGroupResult(ErrorCode.invalid_session_timeout, member_id)
        is_unknown_member = member_id == ""
        group = self.registry.groups.get(group_id)
        if group is None:
            if not is_unknown_member:
                return JoinGroupResult(ErrorCode.unknown_member_id, member_id)
            group = GroupMetadata(group_id, GroupState.EMPTY, self.registry.clock())
            self.registry.groups[group_id] = group

        if not self._accept_joining_member(group, member_id):
            member = group.members.get(member_id)
            if member is not None:
                self.rebalancer.remove_member_and_update_group(group, member, "group is full")
            group.pending_members.discard(member_id)
            return JoinGroupResult(ErrorCode.group_max_size_reached, "")

        future: asyncio.Future[JoinGroupResult] = asyncio.get_running_loop().create_future()
        args = _JoinArgs(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            require_known_member_id=require_known_member_id,
            supports_skip_assignment=supports_skip_assignment,
            reason=reason or "",
            future=future,
        )
        if is_unknown_member:
            outcome = self._do_new_member_join(group, args)
        else:
            outcome = self._do_current_member_join(group, args)
        if group.state is GroupState.PREPARING_REBALANCE:
            self.rebalancer.rebalance_purgatory.check_and_complete(join_key(group_id))
        if isinstance(outcome, JoinGroupResult):
            return outcome
        # shield: a request cancelled (client gone) must not cancel the member's future that
        # a retried request may share.
        return await asyncio.shield(outcome)

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        """group.max.size: existing members are always accepted; newcomers while there is
        room (counting, during a rebalance, only the members that have rejoined)."""
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is GroupState.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (
                member is not None and member.is_awaiting_join
            ) or group.num_members_awaiting_join < self.registry.config.group_max_size
        return group.has(member_id) or group.size < self.registry.config.group_max_size

    def _new_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{uuid.uuid4()}"

    def _do_new_member_join(
        self, group: GroupMetadata, args: _JoinArgs
    ) -> JoinGroupResult | asyncio.Future[JoinGroupResult]:
        if group.state is GroupState.DEAD:
            # Deleted or moved while we looked: the client re-finds the coordinator and retries.
            return JoinGroupResult(ErrorCode.coordinator_not_available, "")
        if not group.supports_protocols(args.protocol_type, args.protocols):
            return JoinGroupResult(ErrorCode.inconsistent_group_protocol, "")
        new_member_id = self._new_member_id(args.client_id, args.group_instance_id)
        if args.group_instance_id is not None:
            return self._do_static_member_join(group, new_member_id, args)
        if args.require_known_member_id:
            # KIP-394: hand out the id first, so a client that times out and retries does not
            # leave a ghost member behind; the id expires after one session timeout.
            group.pending_members.add(new_member_id)
            self.rebalancer.heartbeat_purgatory.try_complete_else_watch(
                DelayedHeartbeat(
                    self.rebalancer, group, new_member_id, True, args.session_timeout_ms
                ),
                [member_key(group.group_id, new_member_id)],
            )
            return JoinGroupResult(ErrorCode.member_id_required, new_member_id)
        return self._add_member_and_rebalance(group, new_member_id, args)

    def _do_static_member_join(
        self, group: GroupMetadata, new_member_id: str, args: _JoinArgs
    ) -> JoinGroupResult | asyncio.Future[JoinGroupResult]:
        assert args.group_instance_id is not None
        old_member_id = group.static_member_id(args.group_instance_id)
        if old_member_id is None:
            return self._add_member_and_rebalance(group, new_member_id, args)
        return self._update_static_member_and_rebalance(group, old_member_id, new_member_id, args)

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, old_member_id: str, new_member_id: str, args: _JoinArgs
    ) -> JoinGroupResult | asyncio.Future[JoinGroupResult]:
        assert args.group_instance_id is not None
        current_leader = group.leader_id
        member = group.get(old_member_id)
        old_protocols = member.protocols
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        group.replace_static_member(args.group_instance_id, old_member_id, new_member_id)
        # The old id's session timer completes harmlessly; the new id gets its own.
        self.rebalancer.heartbeat_purgatory.check_and_complete(
            member_key(group.group_id, old_member_id)
        )
        self.rebalancer.complete_and_schedule_next_heartbeat_expiration(group, member)
        log.info(
            "static member %s of group %s rejoined as %s (was %s) in state %s",
            args.group_instance_id,
            group.group_id,
            new_member_id,
            old_member_id,
            group.state,
        )
        if group.state is GroupState.STABLE:
            group.update_member(
                member, args.protocols, args.rebalance_timeout_ms, args.session_timeout_ms, None
            )
            if group.protocol_name == group.select_protocol():
                # Same protocol for the next generation: no rebalance. Persist the new member
                # id, then hand back the current generation (KIP-345).
                self.registry.spawn(
                    self._store_static_member_replacement(
                        group,
                        args,
                        member,
                        old_member_id,
                        current_leader,
                        old_protocols,
                        old_rebalance_timeout,
                        old_session_timeout,
                    )
                )
                return args.future
            return self._update_member_and_rebalance(
                group,
                member,
                args,
                f"static member {args.group_instance_id} changed the selected protocol",
            )
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old id: start over with the new one.
            return self._update_member_and_rebalance(
                group,
                member,
                args,
                f"static member {args.group_instance_id} rejoined during a sync",
            )
        if group.state is GroupState.PREPARING_REBALANCE:
            # Already rebalancing: the member just joins it (no new rebalance starts).
            return self._update_member_and_rebalance(
                group, member, args, f"static member {args.group_instance_id} rejoined"
            )
        return JoinGroupResult(ErrorCode.coordinator_not_available, "")  # Empty/Dead: no member

    async def _store_static_member_replacement(
        self,
        group: GroupMetadata,
        args: _JoinArgs,
        member: MemberMetadata,
        old_member_id: str,
        current_leader: str | None,
        old_protocols: list[tuple[str, bytes]],
        old_rebalance_timeout: int,
        old_session_timeout: int,
    ) -> None:
        assert args.group_instance_id is not None
        new_member_id = member.member_id
        assignment = {m.member_id: m.assignment for m in group.members.values()}
        error = await store_group(self.registry.log, group, assignment)
        future = args.future
        if error is not ErrorCode.none:
            log.warning(
                "could not persist static member %s of group %s: %s",
                args.group_instance_id,
                group.group_id,
                error.name,
            )
            # Put the old member back (if nothing else happened meanwhile) and fail the join.
            if (
                group.state is not GroupState.DEAD
                and group.static_member_id(args.group_instance_id) == new_member_id
            ):
                group.replace_static_member(args.group_instance_id, new_member_id, old_member_id)
                group.update_member(
                    member, old_protocols, old_rebalance_timeout, old_session_timeout, None
                )
                self.rebalancer.heartbeat_purgatory.check_and_complete(
                    member_key(group.group_id, new_member_id)
                )
                self.rebalancer.complete_and_schedule_next_heartbeat_expiration(group, member)
            if not future.done():
                future.set_result(JoinGroupResult(error, ""))
            return
        is_leader = group.is_leader(new_member_id)
        if args.supports_skip_assignment and is_leader:
            # KIP-814: the leader learns it is the leader (to keep watching metadata) but must
            # not compute a new assignment, which a Stable group would not distribute anyway.
            result = JoinGroupResult(
                ErrorCode.none,
                new_member_id,
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                new_member_id,
                group.current_member_metadata(),
                skip_assignment=True,
            )
        else:
            # Older clients get the previous leader id: a restarted leader then sees it is not
            # the leader, skips the assignment and fetches its old one with SyncGroup.
            result = JoinGroupResult(
                ErrorCode.none,
                new_member_id,
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                current_leader or "",
            )
        if not future.done():
            future.set_result(result)

    def _do_current_member_join(
        self, group: GroupMetadata, args: _JoinArgs
    ) -> JoinGroupResult | asyncio.Future[JoinGroupResult]:
        member_id = args.member_id
        if group.state is GroupState.DEAD:
            return JoinGroupResult(ErrorCode.coordinator_not_available, member_id)
        if not group.supports_protocols(args.protocol_type, args.protocols):
            return JoinGroupResult(ErrorCode.inconsistent_group_protocol, member_id)
        if member_id in group.pending_members:
            if args.group_instance_id is not None:
                # Static members never get pending ids: this id is not theirs.
                return JoinGroupResult(ErrorCode.unknown_member_id, member_id)
            return self._add_member_and_rebalance(group, member_id, args)
        error = validate_current_member(group, member_id, args.group_instance_id)
        if error is not None:
            return JoinGroupResult(error, member_id)
        member = group.get(member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, args, "member rejoined")
        if group.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(args.protocols):
                # It missed the JoinGroup response of this generation: send it again.
                return self._current_join_result(group, member_id)
            return self._update_member_and_rebalance(
                group, member, args, "member changed its protocols during the sync"
            )
        if group.state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(args.protocols):
                # The leader rejoins when it sees metadata change (new partitions, regex
                # matches): that is a request for a new assignment.
                return self._update_member_and_rebalance(
                    group, member, args, args.reason or "leader or changed member rejoined"
                )
            return self._current_join_result(group, member_id)
        return JoinGroupResult(ErrorCode.unknown_member_id, member_id)

    @staticmethod
    def _current_join_result(group: GroupMetadata, member_id: str) -> JoinGroupResult:
        return JoinGroupResult(
            ErrorCode.none,
            member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            group.current_member_metadata() if group.is_leader(member_id) else (),
        )

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, args: _JoinArgs
    ) -> asyncio.Future[JoinGroupResult]:
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=args.group_instance_id,
            client_id=args.client_id,
            client_host=args.client_host,
            rebalance_timeout_ms=args.rebalance_timeout_ms,
            session_timeout_ms=args.session_timeout_ms,
            protocol_type=args.protocol_type,
            protocols=list(args.protocols),
            is_new=True,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True  # extends the initial rebalance delay
        group.add(member, args.future)
        # A new member that never completes its first join is dropped after this long.
        self.rebalancer.complete_and_schedule_next_heartbeat_expiration(
            group, member, self.registry.config.group_new_member_join_timeout_ms
        )
        self.rebalancer.maybe_prepare_rebalance(group, f"adding new member {member_id}")
        return args.future

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, args: _JoinArgs, reason: str
    ) -> asyncio.Future[JoinGroupResult]:
        future = group.update_member(
            member, args.protocols, args.rebalance_timeout_ms, args.session_timeout_ms, args.future
        )
        assert future is not None
        self.rebalancer.maybe_prepare_rebalance(group, reason)
        return future

    # == SyncGroup ================================================================================

    async def sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncGroupResult:
        """Followers wait here for the leader's assignment; the leader brings it."""
        error = self.registry.group_error(group_id, allow_empty=False)
        if error is not None:
            return SyncGroupResult(error)
        group = self.registry.groups.get(group_id)
        if group is None:
            return SyncGroupResult(ErrorCode.unknown_member_id)
        if group.state is GroupState.DEAD:
            return SyncGroupResult(ErrorCode.coordinator_not_available)
        error = validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return SyncGroupResult(error)
        if generation_id != group.generation_id:
            return SyncGroupResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncGroupResult(ErrorCode.inconsistent_group_protocol)
        if group.state is GroupState.EMPTY:
            return SyncGroupResult(ErrorCode.unknown_member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncGroupResult(ErrorCode.rebalance_in_progress)
        member = group.get(member_id)
        if group.state is GroupState.STABLE:
            # Already distributed (this member's sync was late or repeated).
            self.rebalancer.remove_pending_sync_member(group, member_id)
            self.rebalancer.complete_and_schedule_next_heartbeat_expiration(group, member)
            return SyncGroupResult(
                ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
            )
        # CompletingRebalance: park until the leader's assignment is stored.
        future = group.set_sync_future(member, asyncio.get_running_loop().create_future())
        self.rebalancer.remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            self.registry.spawn(
                self.rebalancer.store_sync_assignment(group, group.generation_id, full)
            )
        return await asyncio.shield(future)

    # == Heartbeat / LeaveGroup ===================================================================

    def heartbeat(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = self.registry.group_error(group_id, allow_empty=False)
        if error is not None:
            return error
        group = self.registry.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        error = validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self.rebalancer.complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, *, group_id: str, members: Sequence[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """KIP-345 batch leave: ``members`` are (member_id, group_instance_id, reason); an
        empty member id with an instance id removes that static member (admin use). Returns
        the group-level error and one error per member."""
        error = self.registry.group_error(group_id, allow_empty=False)
        if error is not None:
            return error, []
        group = self.registry.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available, []
        results: list[ErrorCode] = []
        for member_id, group_instance_id, reason in members:
            results.append(self._leave_one(group, member_id, group_instance_id, reason))
        return ErrorCode.none, results

    def _leave_one(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        reason: str | None,
    ) -> ErrorCode:
        why = f"left the group ({reason})" if reason else "left the group"
        if member_id == "":
            current = (
                group.static_member_id(group_instance_id) if group_instance_id is not None else None
            )
            if current is None:
                return ErrorCode.unknown_member_id
            self.rebalancer.remove_member_and_update_group(group, group.get(current), why)
            return ErrorCode.none
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.rebalancer.heartbeat_purgatory.check_and_complete(
                member_key(group.group_id, member_id)
            )
            if group.state is GroupState.PREPARING_REBALANCE:
                self.rebalancer.rebalance_purgatory.check_and_complete(join_key(group.group_id))
            return ErrorCode.none
        error = validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        self.rebalancer.remove_member_and_update_group(group, group.get(member_id), why)
        return ErrorCode.none


@dataclass(slots=True)
class _JoinArgs:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool
    supports_skip_assignment: bool
    reason: str
    future: asyncio.Future[JoinGroupResult]
