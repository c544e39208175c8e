"""A classic consumer group: its state machine, its members and its committed offsets.

States and the only transitions allowed (Kafka's ``GroupState``)::

    Empty ------------> PreparingRebalance <------------ Stable
      ^                  |      ^                           ^
      |   (nobody        |      | (a member joins,          |
      |    rejoined)     |      |  leaves, or times out)    | (leader's SyncGroup
      +------------------+      |                           |  assignment stored)
                         v      |                           |
                       CompletingRebalance ------------------+

    Dead <- from every state: the group was deleted, expired or unloaded (moved away).

* **Empty** -- no members (maybe committed offsets); **PreparingRebalance** -- waiting for
  members to (re)join, up to the rebalance timeout; **CompletingRebalance** -- the join
  finished, waiting for the leader's assignment (SyncGroup); **Stable** -- assignment handed
  out, members heartbeat; **Dead** -- no longer served here.

This module holds state and answers questions about it; the decisions (timers, log writes,
responses) are the coordinator's. Member requests waiting for a rebalance to progress are
asyncio futures stored on the member (``awaiting_join``/``awaiting_sync``).
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.broker.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics

__all__ = [
    "CommittedOffset",
    "GroupMetadata",
    "GroupState",
    "IllegalGroupStateTransition",
    "JoinGroupResult",
    "MemberMetadata",
    "SyncGroupResult",
]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupStateTransition(RuntimeError):
    """A transition the state machine forbids: always a coordinator bug, never bad input."""


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    """What a JoinGroup request is answered with."""

    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # (member_id, group_instance_id, metadata) for the leader only; empty for followers.
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class CommittedOffset:
    """A committed offset as kept in memory (and in an OffsetCommitValue record)."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1  # only from OffsetCommit v2-v4 with an explicit retention time
    append_offset: int = -1  # where its record sits in the offsets log: later wins


@dataclass(eq=False, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # The member's protocols in its order of preference: (name, metadata).
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: asyncio.Future[JoinGroupResult] | None = None
    awaiting_sync: asyncio.Future[SyncGroupResult] | None = None
    # Kafka's heartbeat bookkeeping (see the coordinator's DelayedHeartbeat).
    heartbeat_satisfied: bool = False
    is_leaving: bool = False
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same metadata, same order: a rejoin that changes nothing."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols that every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            # A new member may expire while waiting in its first join: it needs a heartbeat
            # (its first join counts) like everybody else.
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            # Members parked in a rebalance need not heartbeat: the rebalance has its own timeouts.
            return True
        return self.heartbeat_satisfied


def _resolve(future: asyncio.Future[object] | None, result: object) -> bool:
    if future is None or future.done():
        return False
    future.set_result(result)
    return True


class GroupMetadata:
    """One group's membership, generation and offsets; see the module docstring."""

    def __init__(self, group_id: str, state: GroupState, now_ms: int) -> None:
        self.group_id = group_id
        self.state = state
        self.current_state_timestamp: int | None = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()  # KIP-394: ids handed out, first join not yet in
        self.pending_sync_members: set[str] = set()  # joined this generation, not yet synced
        self.num_members_awaiting_join = 0
        self.new_member_added = False  # extends the initial rebalance delay
        self.subscribed_topics: frozenset[str] | None = None  # None: unknown
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        # (topic, partition) -> number of commits whose append is still in flight
        self.pending_offset_commits: Counter[tuple[str, int]] = Counter()

    def __repr__(self) -> str:
        return (
            f"GroupMetadata({self.group_id!r}, {self.state}, generation={self.generation_id}, "
            f"members={len(self.members)})"
        )

    # -- state -----------------------------------------------------------------------------------
    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalGroupStateTransition(
                f"group {self.group_id}: cannot go from {self.state} to {target}"
            )
        self.state = target
        self.current_state_timestamp = now_ms

    # -- members ---------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.members)

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, future: asyncio.Future[JoinGroupResult] | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)
        if future is not None:
            member.awaiting_join = future
            self.num_members_awaiting_join += 1

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> MemberMetadata:
        """A static member restarted: same member under a new id; its old id is fenced from now
        on, and requests it still has parked are answered FENCED_INSTANCE_ID."""
        member = self.members.pop(old_member_id)
        self.invoke_join_future(
            member, JoinGroupResult(ErrorCode.fenced_instance_id, old_member_id)
        )
        self.invoke_sync_future(member, SyncGroupResult(ErrorCode.fenced_instance_id))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        future: asyncio.Future[JoinGroupResult] | None,
    ) -> asyncio.Future[JoinGroupResult] | None:
        """Take the member's new protocols and timeouts; park it with ``future`` and return the
        future its request must await. A member already parked (the client sent JoinGroup
        again) keeps its first future, so both requests get the same answer."""
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if future is None:
            return None
        if member.awaiting_join is None:
            member.awaiting_join = future
            self.num_members_awaiting_join += 1
        return member.awaiting_join

    def invoke_join_future(self, member: MemberMetadata, result: JoinGroupResult) -> bool:
        future = member.awaiting_join
        if future is None:
            return False
        member.awaiting_join = None
        self.num_members_awaiting_join -= 1
        return _resolve(future, result)  # type: ignore[arg-type]

    def invoke_sync_future(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        future = member.awaiting_sync
        if future is None:
            return False
        member.awaiting_sync = None
        return _resolve(future, result)  # type: ignore[arg-type]

    def set_sync_future(
        self, member: MemberMetadata, future: asyncio.Future[SyncGroupResult]
    ) -> asyncio.Future[SyncGroupResult]:
        """Park the member's SyncGroup; a repeated SyncGroup shares the first one's future."""
        if member.awaiting_sync is None:
            member.awaiting_sync = future
        return member.awaiting_sync

    def has_all_members_joined(self) -> bool:
        return self.num_members_awaiting_join == len(self.members) and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    @property
    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of any member: how long a join may wait."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined; False when nobody did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    # -- protocols -------------------------------------------------------------------------------
    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Can a member with these protocols join (INCONSISTENT_GROUP_PROTOCOL otherwise)?"""
        if not protocols or not protocol_type:
            return False
        if self.state is GroupState.EMPTY or not self.members:
            return True
        if self.protocol_type != protocol_type:
            return False
        counts = self._supported_protocol_counts()
        return any(counts.get(name, 0) == len(self.members) for name, _ in protocols)

    def _supported_protocol_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for member in self.members.values():
            counts.update(set(member.protocol_names()))
        return counts

    def candidate_protocols(self) -> set[str]:
        counts = self._supported_protocol_counts()
        return {name for name, count in counts.items() if count == len(self.members)}

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer.

        Each member votes for its favourite among the protocols all members support; the most
        votes win. Kafka breaks ties arbitrarily; odradek prefers the leader's order so the
        choice is deterministic.
        """
        if not self.members:
            raise IllegalGroupStateTransition("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        best = max(votes.values())
        tied = {name for name, count in votes.items() if count == best}
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name in leader.protocol_names():
            if name in tied:
                return name
        return min(tied)

    def current_member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        """What the leader receives in its JoinGroup response: every member's metadata for the
        selected protocol."""
        if self.protocol_name is None:
            return ()
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        )

    def init_next_generation(self, now_ms: int) -> None:
        """Finish the join phase: bump the generation and pick the protocol (or go Empty)."""
        if self.members:
            self.generation_id += 1
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self._compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            # The protocol type stays (as in Kafka): an empty *consumer* group's offsets expire
            # counting from when it became empty, unlike a simple consumer's.
            self.generation_id += 1
            self.protocol_name = None
            self.subscribed_topics = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def _compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics |= subscribed_topics(member.metadata_for(self.protocol_name))
        except (ValueError, KeyError):
            return None  # a member whose subscription we cannot read: don't guess
        return frozenset(topics)

    def refresh_subscribed_topics(self) -> None:
        self.subscribed_topics = self._compute_subscribed_topics()

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """For OffsetDelete. When the subscriptions are unreadable, odradek answers True (keeps
        the offsets) where Kafka answers False: deleting offsets in use is the worse mistake."""
        if self.subscribed_topics is None:
            return True
        return topic in self.subscribed_topics

    # -- offsets ---------------------------------------------------------------------------------
    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(+self.pending_offset_commits)

    def apply_offset_commit(self, tp: tuple[str, int], committed: CommittedOffset) -> None:
        """Apply a commit whose record is in the log; appends can complete out of order, and
        the record later in the log is the one a reload would keep."""
        current = self.offsets.get(tp)
        if current is None or committed.append_offset >= current.append_offset:
            self.offsets[tp] = committed

    def remove_expired_offsets(
        self, now_ms: int, retention_ms: int
    ) -> dict[tuple[str, int], CommittedOffset]:
        """Kafka's rules (KIP-211): an *empty* group's offsets expire ``retention_ms`` after
        the group became empty; a Stable consumer group's offsets of topics it no longer
        subscribes to expire ``retention_ms`` after their commit; offsets of a group that has
        never had members (a "simple" consumer committing with generation -1) expire
        ``retention_ms`` after their commit. An explicit per-commit expire timestamp (old
        OffsetCommit versions) wins. Offsets with a commit in flight never expire."""
        subscribed: frozenset[str] = frozenset()
        if self.protocol_type is not None and self.state is GroupState.EMPTY:

            def base(c: CommittedOffset) -> int:
                if self.current_state_timestamp is not None:
                    return self.current_state_timestamp
                return c.commit_timestamp

        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.state is GroupState.STABLE
        ):
            subscribed = self.subscribed_topics

            def base(c: CommittedOffset) -> int:
                return c.commit_timestamp

        elif self.protocol_type is None:

            def base(c: CommittedOffset) -> int:
                return c.commit_timestamp

        else:
            return {}
        expired = {}
        for tp, committed in self.offsets.items():
            if tp[0] in subscribed or self.pending_offset_commits[tp] > 0:
                continue
            if committed.expire_timestamp >= 0:
                due = now_ms >= committed.expire_timestamp
            else:
                due = now_ms - base(committed) >= retention_ms
            if due:
                expired[tp] = committed
        for tp in expired:
            del self.offsets[tp]
        return expired
