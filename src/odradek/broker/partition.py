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
