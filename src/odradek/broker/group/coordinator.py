"""The group coordinator: Kafka's classic consumer-group protocol over ``__consumer_offsets``.

A group belongs to partition ``partition_for(group_id)`` of the offsets topic; the broker
leading that partition is the group's coordinator. The coordinator keeps every group of the
partitions it owns in memory and writes everything that must survive a move to the log:

* **offsets** -- one ``OffsetCommitKey -> OffsetCommitValue`` record per committed partition,
  on every commit; tombstones when offsets expire or are deleted;
* **group metadata** -- one ``GroupMetadataKey -> GroupMetadataValue`` record (generation,
  protocol, leader, members with their subscriptions and assignments) whenever a rebalance
  completes (the leader's assignment is stored before anybody receives it), when a group
  becomes empty, and when a static member is replaced; a tombstone when the group is deleted.

:meth:`GroupCoordinator.load_partition` rebuilds groups and offsets from those records, so
a fresh coordinator on another broker continues where the old one stopped (members keep
their ids and assignments and just have to heartbeat in time). See ``offsets_records`` for
the formats and ``group`` for the state machine.

Requests that must wait (JoinGroup until the group has rejoined, SyncGroup until the
leader's assignment is stored) park an asyncio future on the member; timeouts (join,
initial delay, session, pending sync) are purgatory operations on the broker's timing wheel.
Everything runs on one event loop: between two ``await`` s nothing else touches a group, and
after every ``await`` the code re-checks the group's state and generation.

Errors are Kafka's codes (``kio.schema.errors.ErrorCode``), in the results; nothing in here
raises for bad client input.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from odradek.broker.group.config import GroupConfig
from odradek.broker.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
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
    CommittedOffset,
    GroupMetadata,
    GroupState,
    JoinGroupResult,
    MemberMetadata,
    SyncGroupResult,
)
from odradek.broker.group.partitioning import partition_for
from odradek.broker.group.persistence import (
    PartitionRebuilder,
    group_metadata_record,
    offset_commit_records,
    tombstones,
)
from odradek.broker.purgatory import DelayedOperationPurgatory
from odradek.broker.timing_wheel import Timer, TimerTask

__all__ = [
    "CLASSIC_GROUP_TYPE",
    "GroupCoordinator",
    "GroupOverview",
    "GroupSummary",
    "MemberSummary",
    "OffsetCommitRequestData",
    "OffsetsLogAccess",
    "wall_clock_ms",
]

log = logging.getLogger(__name__)

CLASSIC_GROUP_TYPE = "classic"  # ListGroups v5 group_type of every group this coordinator runs
_LOAD_YIELD_EVERY = 1024  # records between two yields to the event loop while loading

T = TypeVar("T")
TopicPartition = tuple[str, int]


def wall_clock_ms() -> int:
    """The default coordinator clock: wall time, because commit timestamps are persisted and
    compared after restarts (and on other brokers)."""
    return time.time_ns() // 1_000_000


class OffsetsLogAccess(Protocol):
    """How the coordinator reads and writes ``__consumer_offsets`` (the broker implements it)."""

    num_partitions: int

    def is_local_leader(self, partition: int) -> bool: ...

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Write the records as one batch with acks=all; return the last offset. Raises on
        failure, ideally with an ``error_code`` attribute (a Kafka error code)."""
        ...

    def read(self, partition: int) -> Iterator[tuple[int, bytes, bytes | None]]: ...

    def log_end_offset(self, partition: int) -> int: ...


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestData:
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1


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


# Append failures -> the error a client can act on (Kafka's GroupMetadataManager mapping).
_APPEND_ERROR_MAP: dict[ErrorCode, ErrorCode] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.invalid_fetch_size: ErrorCode.invalid_commit_offset_size,
}


def _append_error(exc: BaseException, *, for_offsets: bool) -> ErrorCode:
    code = getattr(exc, "error_code", None)
    if isinstance(exc, TimeoutError):
        return ErrorCode.coordinator_not_available
    try:
        error = ErrorCode(int(code)) if code is not None else ErrorCode.unknown_server_error
    except ValueError:
        error = ErrorCode.unknown_server_error
    mapped = _APPEND_ERROR_MAP.get(error, error)
    if mapped is ErrorCode.invalid_commit_offset_size and not for_offsets:
        return ErrorCode.unknown_server_error
    return mapped


class _PeriodicTask(TimerTask):
    """Re-arms itself on the timer and runs ``job`` every ``interval_ms``."""

    def __init__(self, timer: Timer, interval_ms: int, job: Callable[[], None]) -> None:
        super().__init__(interval_ms)
        self.timer = timer
        self.job = job
        self.stopped = False

    def run(self) -> None:
        if self.stopped:
            return
        try:
            self.job()
        finally:
            if not self.stopped:
                self.timer.add(self)


class GroupCoordinator:
    """Consumer groups and committed offsets for the offsets partitions this broker leads."""

    def __init__(
        self,
        offsets_log: OffsetsLogAccess,
        timer: Timer,
        config: GroupConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.log = offsets_log
        self.timer = timer
        self.config = config or GroupConfig()
        self.clock = clock
        self.heartbeat_purgatory = DelayedOperationPurgatory("Heartbeat", timer)
        self.rebalance_purgatory = DelayedOperationPurgatory("Rebalance", timer)
        self._groups: dict[str, GroupMetadata] = {}
        self._owned: set[int] = set()
        self._loading: set[int] = set()
        self._partition_epoch: dict[int, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._active = True
        self._expiration: _PeriodicTask | None = None

    # == lifecycle ================================================================================

    def startup(self) -> None:
        """Start the periodic offset expiration (``offsets.retention.check.interval.ms``)."""
        if self._expiration is None:
            self._expiration = _PeriodicTask(
                self.timer,
                self.config.offsets_retention_check_interval_ms,
                lambda: self._spawn(self.expire_offsets()),
            )
            self.timer.add(self._expiration)

    async def shutdown(self) -> None:
        """Answer parked requests NOT_COORDINATOR, stop timers, cancel background writes."""
        self._active = False
        if self._expiration is not None:
            self._expiration.stopped = True
            self._expiration.cancel()
        for partition in sorted(self._owned | self._loading):
            self.unload_partition(partition)
        self.rebalance_purgatory.shutdown()
        self.heartbeat_purgatory.shutdown()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def active(self) -> bool:
        return self._active

    def partition_for(self, group_id: str) -> int:
        """``abs(group_id.hashCode()) % partitions`` exactly as Kafka (see ``partitioning``)."""
        return partition_for(group_id, self.log.num_partitions)

    def owned_partitions(self) -> frozenset[int]:
        return frozenset(self._owned)

    def is_loading(self, partition: int | None = None) -> bool:
        return bool(self._loading) if partition is None else partition in self._loading

    def group(self, group_id: str) -> GroupMetadata | None:
        """The in-memory group (for tests and introspection); None when unknown."""
        return self._groups.get(group_id)

    def groups(self) -> list[GroupMetadata]:
        return list(self._groups.values())

    # == loading ==================================================================================

    async def load_partition(self, partition: int) -> None:
        """Become coordinator of ``partition``: rebuild its groups and offsets from the log.

        Requests for its groups get COORDINATOR_LOAD_IN_PROGRESS meanwhile. Malformed records
        are logged and skipped. If the partition is unloaded while loading, loading stops.
        """
        if partition in self._owned or partition in self._loading:
            return
        await self._load(partition, self._begin_loading(partition))

    def schedule_load(self, partition: int) -> asyncio.Task[None] | None:
        """``load_partition`` in the background, but the partition counts as loading at
        once: a request arriving before the load starts gets COORDINATOR_LOAD_IN_PROGRESS,
        not NOT_COORDINATOR (Kafka's scheduleLoadGroupAndOffsets). None if already ours."""
        if partition in self._owned or partition in self._loading:
            return None
        return self._spawn(self._load(partition, self._begin_loading(partition)))

    def _begin_loading(self, partition: int) -> int:
        epoch = self._partition_epoch.get(partition, 0) + 1
        self._partition_epoch[partition] = epoch
        self._loading.add(partition)
        return epoch

    async def _load(self, partition: int, epoch: int) -> None:
        started = time.monotonic()
        try:
            rebuilder = PartitionRebuilder(partition)
            for log_offset, key, value in self.log.read(partition):
                rebuilder.add(log_offset, key, value)
                if rebuilder.records % _LOAD_YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # a big partition must not stall the broker
                    if self._partition_epoch.get(partition) != epoch:
                        return  # unloaded meanwhile
            if self._partition_epoch.get(partition) != epoch:
                return
            for group in rebuilder.groups(self.clock()):
                self._install_loaded_group(group)
            self._owned.add(partition)
            log.info(
                "loaded %d records of __consumer_offsets-%d in %.3fs",
                rebuilder.records,
                partition,
                time.monotonic() - started,
            )
        finally:
            if self._partition_epoch.get(partition) == epoch:
                self._loading.discard(partition)

    def _install_loaded_group(self, group: GroupMetadata) -> None:
        self._groups[group.group_id] = group
        # Loaded members must prove they are alive within their session timeout.
        for member in list(group.members.values()):
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
        if group.size > self.config.group_max_size:
            self._maybe_prepare_rebalance(group, "loaded group is larger than group.max.size")

    def unload_partition(self, partition: int) -> None:
        """Stop coordinating ``partition`` (leadership moved): its groups go Dead here and
        parked requests are answered NOT_COORDINATOR so clients look for the new one."""
        self._partition_epoch[partition] = self._partition_epoch.get(partition, 0) + 1
        self._loading.discard(partition)
        self._owned.discard(partition)
        for group_id, group in list(self._groups.items()):
            if self.partition_for(group_id) == partition:
                del self._groups[group_id]
                self._on_group_unloaded(group)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        previous = group.state
        group.transition_to(GroupState.DEAD, self.clock())
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
        self._remove_sync_expiration(group)

    # == validation ===============================================================================

    def _group_error(self, group_id: str | None, *, allow_empty: bool) -> ErrorCode | None:
        """Kafka's validateGroupStatus: id, coordinator active, loaded, and ours."""
        if group_id is None or (not allow_empty and group_id == ""):
            return ErrorCode.invalid_group_id
        if not self._active:
            return ErrorCode.coordinator_not_available
        partition = self.partition_for(group_id)
        if partition in self._loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self._owned or not self.log.is_local_leader(partition):
            return ErrorCode.not_coordinator
        return None

    @staticmethod
    def _validate_current_member(
        group: GroupMetadata, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        """A static member's id must be the current one for its instance (else it was
        replaced: FENCED_INSTANCE_ID); any member id must be known (UNKNOWN_MEMBER_ID)."""
        if group_instance_id is not None:
            current = group.static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return None

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
        error = self._group_error(group_id, allow_empty=False)
        if error is not None:
            return JoinGroupResult(error, member_id)
        if not (
            self.config.group_min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            return JoinGroupResult(ErrorCode.invalid_session_timeout, member_id)
        is_unknown_member = member_id == ""
        group = self._groups.get(group_id)
        if group is None:
            if not is_unknown_member:
                return JoinGroupResult(ErrorCode.unknown_member_id, member_id)
            group = GroupMetadata(group_id, GroupState.EMPTY, self.clock())
            self._groups[group_id] = group

        if not self._accept_joining_member(group, member_id):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member_and_update_group(group, member, "group is full")
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
            self.rebalance_purgatory.check_and_complete(join_key(group_id))
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
            ) or group.num_members_awaiting_join < self.config.group_max_size
        return group.has(member_id) or group.size < self.config.group_max_size

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
            self.heartbeat_purgatory.try_complete_else_watch(
                DelayedHeartbeat(self, group, new_member_id, True, args.session_timeout_ms),
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
        self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, old_member_id))
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
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
                self._spawn(
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
        error = await self._store_group(group, assignment)
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
                self.heartbeat_purgatory.check_and_complete(
                    member_key(group.group_id, new_member_id)
                )
                self._complete_and_schedule_next_heartbeat_expiration(group, member)
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
        error = self._validate_current_member(group, member_id, args.group_instance_id)
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
        self._complete_and_schedule_next_heartbeat_expiration(
            group, member, self.config.group_new_member_join_timeout_ms
        )
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")
        return args.future

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, args: _JoinArgs, reason: str
    ) -> asyncio.Future[JoinGroupResult]:
        future = group.update_member(
            member, args.protocols, args.rebalance_timeout_ms, args.session_timeout_ms, args.future
        )
        assert future is not None
        self._maybe_prepare_rebalance(group, reason)
        return future

    # == rebalance machinery ======================================================================

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Members parked in SyncGroup must rejoin for the new generation.
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        operation: DelayedJoin
        if group.state is GroupState.EMPTY:
            delay = self.config.group_initial_rebalance_delay_ms
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
        group.transition_to(GroupState.PREPARING_REBALANCE, self.clock())
        log.info(
            "preparing to rebalance group %s in state %s with old generation %d: %s",
            group.group_id,
            group.state,
            group.generation_id,
            reason,
        )
        self.rebalance_purgatory.try_complete_else_watch(operation, [join_key(group.group_id)])

    def _try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool:
        # A dead group (unloaded, deleted) has nothing left to wait for.
        if group.state is GroupState.DEAD or group.has_all_members_joined():
            return force_complete()
        return False

    def _on_complete_join(self, group: GroupMetadata) -> None:
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
        group.init_next_generation(self.clock())
        if group.state is GroupState.EMPTY:
            log.info(
                "group %s with generation %d is now empty", group.group_id, group.generation_id
            )
            self._spawn(self._store_empty_group(group))
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
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    async def _store_empty_group(self, group: GroupMetadata) -> None:
        error = await self._store_group(group, {})
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
                self._complete_and_schedule_next_heartbeat_expiration(group, member)

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self.rebalance_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms),
            [sync_key(group.group_id)],
        )

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _try_complete_pending_sync(
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

    def _on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
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

    # == sessions =================================================================================

    def _complete_and_schedule_next_heartbeat_expiration(
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

    def _try_complete_heartbeat(self, operation: DelayedHeartbeat) -> bool:
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

    def _on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
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
        self._remove_member_and_update_group(group, member, "session timeout")

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """Drop the member and its session timer."""
        group.remove(member.member_id)
        member.is_leaving = True
        self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member.member_id))

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        # Answer its parked requests first: UNKNOWN_MEMBER_ID makes a live client rejoin.
        group.invoke_join_future(member, JoinGroupResult(ErrorCode.unknown_member_id, ""))
        group.invoke_sync_future(member, SyncGroupResult(ErrorCode.unknown_member_id))
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(
                group, f"removing member {member.member_id}: {reason or 'left'}"
            )
        elif group.state is GroupState.PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

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
        error = self._group_error(group_id, allow_empty=False)
        if error is not None:
            return SyncGroupResult(error)
        group = self._groups.get(group_id)
        if group is None:
            return SyncGroupResult(ErrorCode.unknown_member_id)
        if group.state is GroupState.DEAD:
            return SyncGroupResult(ErrorCode.coordinator_not_available)
        error = self._validate_current_member(group, member_id, group_instance_id)
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
            self._remove_pending_sync_member(group, member_id)
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
            return SyncGroupResult(
                ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
            )
        # CompletingRebalance: park until the leader's assignment is stored.
        future = group.set_sync_future(member, asyncio.get_running_loop().create_future())
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            self._spawn(self._store_sync_assignment(group, group.generation_id, full))
        return await asyncio.shield(future)

    async def _store_sync_assignment(
        self, group: GroupMetadata, generation_id: int, assignment: dict[str, bytes]
    ) -> None:
        error = await self._store_group(group, assignment)
        if (
            group.state is not GroupState.COMPLETING_REBALANCE
            or group.generation_id != generation_id
        ):
            return  # the group moved on while we wrote; its new round will write again
        if error is not ErrorCode.none:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        self._set_and_propagate_assignment(group, assignment)
        group.transition_to(GroupState.STABLE, self.clock())

    # == Heartbeat / LeaveGroup ===================================================================

    def heartbeat(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = self._group_error(group_id, allow_empty=False)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, *, group_id: str, members: Sequence[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """KIP-345 batch leave: ``members`` are (member_id, group_instance_id, reason); an
        empty member id with an instance id removes that static member (admin use). Returns
        the group-level error and one error per member."""
        error = self._group_error(group_id, allow_empty=False)
        if error is not None:
            return error, []
        group = self._groups.get(group_id)
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
            self._remove_member_and_update_group(group, group.get(current), why)
            return ErrorCode.none
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))
            if group.state is GroupState.PREPARING_REBALANCE:
                self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
            return ErrorCode.none
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        self._remove_member_and_update_group(group, group.get(member_id), why)
        return ErrorCode.none

    # == offsets ==================================================================================

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

        error = self._group_error(group_id, allow_empty=True)
        if error is not None:
            return all_(error)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation this coordinator never saw (a stale one).
                return all_(ErrorCode.illegal_generation)
            group = GroupMetadata(group_id, GroupState.EMPTY, self.clock())
            self._groups[group_id] = group
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return all_(error)
        if group.state is GroupState.COMPLETING_REBALANCE:
            # A member of the new generation that has not synced yet: let it finish first.
            return all_(ErrorCode.rebalance_in_progress)
        member = group.members.get(member_id)
        if member is not None:
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
        if not offsets:
            return {}
        expire = -1
        if retention_ms is not None and retention_ms >= 0:
            expire = self.clock() + retention_ms
        # Shielded: once the append is issued, its outcome must be applied even if the client
        # goes away, or memory and log would disagree.
        task = self._spawn(self._store_offsets(group, dict(offsets), expire))
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
            error = self._validate_current_member(group, member_id, group_instance_id)
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
        now = self.clock()
        results: dict[TopicPartition, ErrorCode] = {}
        to_write: dict[TopicPartition, CommittedOffset] = {}
        for tp, data in offsets.items():
            metadata = data.metadata or ""
            # Kafka compares the Java string length (UTF-16 units) with offset.metadata.max.bytes.
            if len(metadata.encode("utf-16-le")) // 2 > self.config.offset_metadata_max_bytes:
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
            last_offset = await self.log.append(self.partition_for(group.group_id), records)
        except Exception as exc:
            error = _append_error(exc, for_offsets=True)
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
        error = self._group_error(group_id, allow_empty=True)
        if error is not None:
            return error, {}
        group = self._groups.get(group_id)
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
        error = self._group_error(group_id, allow_empty=False)
        if error is not None:
            return error, {}
        group = self._groups.get(group_id)
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
            write_error = await self._write_cleanup(group, removed)
            if write_error is not ErrorCode.none:
                for tp, committed in removed.items():
                    group.offsets.setdefault(tp, committed)  # unless re-committed meanwhile
        for tp in eligible:
            results[tp] = write_error if tp in removed else ErrorCode.none
        return ErrorCode.none, results

    async def delete_groups(self, group_ids: Sequence[str | None]) -> dict[str | None, ErrorCode]:
        """DeleteGroups: only empty groups (NON_EMPTY_GROUP otherwise); their offsets and
        metadata are tombstoned."""
        results: dict[str | None, ErrorCode] = {}
        doomed: list[GroupMetadata] = []
        for group_id in group_ids:
            error = self._group_error(group_id, allow_empty=True)
            if error is not None:
                results[group_id] = error
                continue
            assert group_id is not None
            group = self._groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                results[group_id] = ErrorCode.group_id_not_found
            elif group.state is GroupState.EMPTY:
                group.transition_to(GroupState.DEAD, self.clock())
                del self._groups[group_id]
                self._on_group_unloaded_quietly(group)
                doomed.append(group)
                results[group_id] = ErrorCode.none
            else:
                results[group_id] = ErrorCode.non_empty_group
        for group in doomed:
            removed = dict(group.offsets)
            group.offsets.clear()
            error = await self._write_cleanup(group, removed, group_tombstone=True)
            if error is not ErrorCode.none:
                # Memory already forgot it; the log still has it until a later cleanup.
                log.warning("tombstones for deleted group %s failed: %s", group.group_id, error)
                results[group.group_id] = error
        return results

    def _on_group_unloaded_quietly(self, group: GroupMetadata) -> None:
        """An Empty group going Dead: only pending-member timers may still reference it."""
        for member_id in list(group.pending_members):
            self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))
        self._remove_sync_expiration(group)

    async def expire_offsets(self) -> int:
        """One pass of offset expiration (run every ``offsets.retention.check.interval.ms``):
        expired offsets get tombstones; an empty group left without offsets goes Dead and its
        metadata is tombstoned too. Returns the number of offsets expired."""
        now = self.clock()
        retention = self.config.offsets_retention_ms
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
        now = self.clock()
        total = 0
        for group in list(self._groups.values()):
            partition = self.partition_for(group.group_id)
            if partition not in self._owned or group.state is GroupState.DEAD:
                continue
            removed = remove(group)
            dead = False
            if group.state is GroupState.EMPTY and not group.has_offsets():
                group.transition_to(GroupState.DEAD, now)
                if self._groups.get(group.group_id) is group:
                    del self._groups[group.group_id]
                self._on_group_unloaded_quietly(group)
                dead = True
                log.info("group %s is now dead: empty and without offsets", group.group_id)
            if removed or dead:
                error = await self._write_cleanup(group, removed, group_tombstone=dead)
                if error is not ErrorCode.none:
                    log.warning(
                        "tombstones for %s offsets of group %s failed: %s",
                        reason,
                        group.group_id,
                        error,
                    )
            total += len(removed)
        return total

    async def _write_cleanup(
        self,
        group: GroupMetadata,
        removed: Mapping[TopicPartition, CommittedOffset],
        *,
        group_tombstone: bool = False,
    ) -> ErrorCode:
        records = tombstones(group.group_id, removed, group=group_tombstone)
        if not records:
            return ErrorCode.none
        try:
            await self.log.append(self.partition_for(group.group_id), records)
        except Exception as exc:
            log.warning("tombstones for group %s failed: %r", group.group_id, exc)
            return _append_error(exc, for_offsets=True)
        return ErrorCode.none

    # == group metadata records ===================================================================

    async def _store_group(
        self, group: GroupMetadata, assignment: Mapping[str, bytes]
    ) -> ErrorCode:
        record = group_metadata_record(group, assignment)
        try:
            await self.log.append(self.partition_for(group.group_id), [record])
        except Exception as exc:
            log.warning("storing metadata of group %s failed: %r", group.group_id, exc)
            return _append_error(exc, for_offsets=False)
        return ErrorCode.none

    # == ListGroups / DescribeGroups ==============================================================

    def list_groups(
        self, states_filter: Sequence[str] = (), types_filter: Sequence[str] = ()
    ) -> tuple[ErrorCode, list[GroupOverview]]:
        """Groups of the partitions owned here; COORDINATOR_LOAD_IN_PROGRESS (with the groups
        loaded so far) while any partition loads. Filters compare case-insensitively."""
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        if types_filter and CLASSIC_GROUP_TYPE not in {t.lower() for t in types_filter}:
            groups: list[GroupOverview] = []
        else:
            states = {s.lower() for s in states_filter}
            groups = [
                GroupOverview(group.group_id, group.protocol_type or "", group.state)
                for group in self._groups.values()
                if group.state is not GroupState.DEAD
                and self.partition_for(group.group_id) in self._owned
                and (not states or group.state.value.lower() in states)
            ]
        error = ErrorCode.coordinator_load_in_progress if self._loading else ErrorCode.none
        return error, groups

    def describe_group(self, group_id: str | None) -> tuple[ErrorCode, GroupSummary | None]:
        """(error, summary); an unknown group is (NONE, None): Kafka describes it as Dead."""
        error = self._group_error(group_id, allow_empty=True)
        if error is not None:
            return error, None
        assert group_id is not None
        group = self._groups.get(group_id)
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

    # == background tasks =========================================================================

    def _spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group coordinator background task failed", exc_info=task.exception())

    async def wait_for_background_tasks(self) -> None:
        """Wait until every background write has finished (for tests and orderly stops)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


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
