"""What this broker knows of its role for one partition in a cluster (Kafka's Partition).

The controller decides, through LeaderAndIsr, whether this broker leads or follows a
partition, with which leader epoch, ISR, replica list and partition-state znode version.
:class:`ReplicaState` keeps that decision; the replication phase extends it with the
follower LEOs, the high watermark and acks=all completion. ``leader_epoch`` starts at -1
(Kafka's ``LeaderAndIsr.InitialLeaderEpoch - 1``) so the controller's first request, with
epoch 0, is newer.

:class:`ReplicaStates` is the per-broker table of them; the handlers of the controller's
requests are the only writers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

NO_LEADER = -1  # LeaderAndIsr.NoLeader
LEADER_DURING_DELETE = -2  # LeaderAndIsr.LeaderDuringDelete: the topic is being deleted
EPOCH_DURING_DELETE = -2  # LeaderAndIsr.EpochDuringDelete (StopReplica of a deleted topic)
NO_EPOCH = -1  # LeaderAndIsr.NoEpoch (StopReplica before v3 carries no epoch)


class Role(Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass
class ReplicaState:
    topic: str
    partition: int
    role: Role = Role.FOLLOWER
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)
    # The partition-state znode version the controller read (Kafka's partitionEpoch /
    # zkVersion): an ISR change this broker writes must compare-and-set against it.
    zk_version: int = -1
    controller_epoch: int = -1

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def apply(
        self,
        role: Role,
        *,
        leader: int,
        leader_epoch: int,
        isr: list[int],
        replicas: list[int],
        zk_version: int,
        controller_epoch: int,
        adding: list[int] | None = None,
        removing: list[int] | None = None,
    ) -> None:
        """Take the controller's decision (already checked to be newer)."""
        self.role = role
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.adding_replicas = list(adding or [])
        self.removing_replicas = list(removing or [])
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch


class ReplicaStates:
    """Every partition this broker hosts in cluster mode, by (topic, partition)."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, int], ReplicaState] = {}

    def get(self, topic: str, partition: int) -> ReplicaState | None:
        return self._states.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> ReplicaState:
        key = (topic, partition)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = ReplicaState(topic, partition)
        return state

    def remove(self, topic: str, partition: int) -> ReplicaState | None:
        return self._states.pop((topic, partition), None)

    def leads(self, topic: str, partition: int) -> bool:
        state = self._states.get((topic, partition))
        return state is not None and state.is_leader

    def __len__(self) -> int:
        return len(self._states)


# --- the leader's view of its followers (Kafka's Replica / Partition ISR logic) --------

UNKNOWN_OFFSET = -1  # a follower that has not fetched since this broker became leader


@dataclass
class FollowerState:
    """What the leader knows of one follower, from its fetches (Kafka's ReplicaState)."""

    log_end_offset: int = UNKNOWN_OFFSET
    # When the follower last had everything the leader had (Kafka's lastCaughtUpTimeMs):
    # the ISR shrinks on it, not on when the follower last fetched.
    last_caught_up_ms: float = 0.0
    # The leader's LEO and the time at the follower's previous fetch: a fetch reaching
    # that LEO proves the follower was caught up back then.
    last_fetch_leader_leo: int = UNKNOWN_OFFSET
    last_fetch_ms: float = 0.0
    # The follower's log start offset, as its fetches state it (Fetch v5+): DeleteRecords
    # completes once every live replica has moved its start that far.
    log_start_offset: int = UNKNOWN_OFFSET


class FollowerTracker:
    """Follower LEOs, ISR membership and the high watermark rule of a partition's leader.

    Pure bookkeeping with an injected clock (milliseconds), so the rules are unit-tested
    without a network: the replica manager feeds it each follower fetch and asks it
    which followers to drop from or add to the ISR, and where the high watermark goes.
    """

    def __init__(self, leader_id: int, clock_ms: Callable[[], float]) -> None:
        self.leader_id = leader_id
        self._clock_ms = clock_ms
        self.followers: dict[int, FollowerState] = {}

    def reset(self, replicas: list[int], leader_leo: int) -> None:
        """A new leadership: every follower starts unknown but counted as caught up now
        (Kafka's makeLeader), so it gets replica.lag.time.max.ms to show up."""
        now = self._clock_ms()
        self.followers = {
            r: FollowerState(
                last_caught_up_ms=now, last_fetch_leader_leo=leader_leo, last_fetch_ms=now
            )
            for r in replicas
            if r != self.leader_id
        }

    def record_fetch(
        self, replica: int, fetch_offset: int, leader_leo: int, log_start_offset: int = -1
    ) -> bool:
        """A follower fetched from ``fetch_offset`` (Kafka's updateFetchState); True when
        the log start offset it states moved."""
        state = self.followers.get(replica)
        if state is None:
            state = self.followers[replica] = FollowerState()
        moved = log_start_offset >= 0 and log_start_offset != state.log_start_offset
        if moved:
            state.log_start_offset = log_start_offset
        now = self._clock_ms()
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now)
        elif fetch_offset >= state.last_fetch_leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_leo = leader_leo
        state.last_fetch_ms = now
        return moved

    def low_watermark(
        self, leader_log_start: int, replicas: list[int], alive: Callable[[int], bool]
    ) -> int:
        """The smallest log start offset of the leader and its live followers (Kafka's
        lowWatermarkIfLeader); a follower not heard from holds it at -1."""
        low = leader_log_start
        for replica in replicas:
            if replica == self.leader_id or not alive(replica):
                continue
            state = self.followers.get(replica)
            low = min(low, state.log_start_offset if state else UNKNOWN_OFFSET)
        return low

    def high_watermark(self, isr: set[int] | list[int], leader_leo: int) -> int:
        """The smallest LEO in the ISR (an ISR follower not yet heard from holds it)."""
        candidates = [leader_leo]
        for replica in isr:
            if replica == self.leader_id:
                continue
            state = self.followers.get(replica)
            candidates.append(state.log_end_offset if state else UNKNOWN_OFFSET)
        return min(candidates)

    def out_of_sync(self, isr: set[int] | list[int], lag_time_ms: int) -> set[int]:
        """ISR followers not caught up within ``lag_time_ms`` (Kafka's getOutOfSyncReplicas)."""
        now = self._clock_ms()
        stale = set()
        for replica in isr:
            if replica == self.leader_id:
                continue
            state = self.followers.get(replica)
            if state is None or now - state.last_caught_up_ms > lag_time_ms:
                stale.add(replica)
        return stale

    def can_join_isr(self, replica: int, high_watermark: int, epoch_start_offset: int) -> bool:
        """Caught up to the HW and into this leader's epoch (Kafka's isFollowerInSync)."""
        state = self.followers.get(replica)
        if state is None:
            return False
        return state.log_end_offset >= high_watermark and state.log_end_offset >= epoch_start_offset
