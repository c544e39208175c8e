"""ControllerContext: what the controller knows about the cluster, the one source of truth.

Loaded from ZooKeeper when a broker becomes controller and kept current by the events
it processes; only the controller's event task touches it (see ``event_manager``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from odradek.cluster.zk.codecs import BrokerRegistration, PartitionState

TopicPartition = tuple[str, int]
NO_LEADER = -1  # LeaderAndIsr.NoLeader


class PartitionStateName(Enum):
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"


class ReplicaState(Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"


@dataclass(frozen=True, slots=True)
class LeaderIsr:
    """A partition's state znode as last read or written, with its znode version (the
    value every compare-and-set must present)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int
    leader_recovery_state: int = 0

    @classmethod
    def of(cls, state: PartitionState, zk_version: int) -> LeaderIsr:
        return cls(
            state.leader,
            state.leader_epoch,
            tuple(state.isr),
            state.controller_epoch,
            zk_version,
            state.leader_recovery_state,
        )

    def znode(self) -> PartitionState:
        return PartitionState(
            self.leader,
            self.leader_epoch,
            self.isr,
            self.controller_epoch,
            self.leader_recovery_state,
        )


def _distinct(replicas: Iterable[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(replicas))


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's full assignment, as Kafka's ReplicaAssignment: during a reassignment
    ``replicas`` is RS = TRS + ORS (target first, so the target's first replica is the
    preferred leader), ``adding`` the replicas being added (TRS - ORS) and ``removing``
    those being removed (ORS - TRS)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def origin(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: Iterable[int]) -> ReplicaAssignment:
        """Kafka's reassignTo: a new target replaces any earlier one; the origin stays."""
        target = tuple(target)
        origin = self.origin
        full = _distinct(target + origin)
        return ReplicaAssignment(
            full,
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target),
        )


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    topic_ids: dict[str, str | None] = field(default_factory=dict)
    assignment: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    leadership: dict[TopicPartition, LeaderIsr] = field(default_factory=dict)
    partition_states: dict[TopicPartition, PartitionStateName] = field(default_factory=dict)
    replica_states: dict[tuple[TopicPartition, int], ReplicaState] = field(default_factory=dict)
    topics_to_delete: set[str] = field(default_factory=set)
    # Partitions with a reassignment under way: (adding, removing) replicas. The
    # assignment above holds RS = TRS + ORS meanwhile.
    reassigning: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict
    )
    being_reassigned: set[TopicPartition] = field(default_factory=set)

    # --- queries ------------------------------------------------------------------

    @property
    def live_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def live_not_shutting_down(self) -> set[int]:
        return set(self.live_brokers) - self.shutting_down

    def is_live(self, broker: int) -> bool:
        return broker in self.live_brokers

    def topics(self) -> set[str]:
        return set(self.topic_ids)

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.assignment if tp[0] == topic)

    def all_partitions(self) -> list[TopicPartition]:
        return sorted(self.assignment)

    def partitions_on_broker(self, broker: int) -> list[TopicPartition]:
        return sorted(tp for tp, replicas in self.assignment.items() if broker in replicas)

    def partitions_led_by(self, broker: int) -> list[TopicPartition]:
        return sorted(tp for tp, li in self.leadership.items() if li.leader == broker)

    def partition_state(self, tp: TopicPartition) -> PartitionStateName:
        return self.partition_states.get(tp, PartitionStateName.NON_EXISTENT)

    def replica_state(self, tp: TopicPartition, broker: int) -> ReplicaState:
        return self.replica_states.get((tp, broker), ReplicaState.NON_EXISTENT)

    def full_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        adding, removing = self.reassigning.get(tp, ((), ()))
        return ReplicaAssignment(self.assignment.get(tp, ()), adding, removing)

    def set_full_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.assignment[tp] = assignment.replicas
        if assignment.is_being_reassigned:
            self.reassigning[tp] = (assignment.adding, assignment.removing)
        else:
            self.reassigning.pop(tp, None)

    def partitions_in(self, state: PartitionStateName) -> list[TopicPartition]:
        return sorted(tp for tp, s in self.partition_states.items() if s is state)

    # --- changes ------------------------------------------------------------------

    def add_topic(
        self, topic: str, topic_id: str | None, partitions: dict[int, tuple[int, ...]]
    ) -> None:
        self.topic_ids[topic] = topic_id
        for partition, replicas in partitions.items():
            self.assignment[(topic, partition)] = tuple(replicas)

    def remove_topic(self, topic: str) -> None:
        self.topic_ids.pop(topic, None)
        self.topics_to_delete.discard(topic)
        for tp in self.partitions_of(topic):
            self.assignment.pop(tp, None)
            self.leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            self.reassigning.pop(tp, None)
            self.being_reassigned.discard(tp)
        for key in [k for k in self.replica_states if k[0][0] == topic]:
            del self.replica_states[key]

    def clear(self) -> None:
        """Forget everything: a resigned controller must not act on stale state."""
        fresh = ControllerContext()
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(fresh, name))
