"""What every consumer-group partition assignor shares: the data it sees and its interface.

This mirrors Java's ``ConsumerPartitionAssignor``. The group leader collects each member's
:class:`Subscription` (decoded from JoinGroup member metadata), asks the assignor chosen by
the coordinator (``partition.assignment.strategy``; the first protocol every member supports)
to split the subscribed partitions, and sends each member its :class:`Assignment` in
SyncGroup. Everything here is pure: no I/O, no clock, deterministic for the same input
whatever the order of the ``subscriptions`` mapping.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_GENERATION",
    "AbstractPartitionAssignor",
    "Assignment",
    "GroupMetadata",
    "PartitionAssignor",
    "RebalanceProtocol",
    "Subscription",
    "TopicPartition",
    "java_order",
    "member_order",
    "partition_order",
    "use_rack_aware_assignment",
]

DEFAULT_GENERATION = -1  # Java's AbstractStickyAssignor.DEFAULT_GENERATION


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RebalanceProtocol(enum.IntEnum):
    """How members give partitions up (the id is what Java sends, see KIP-429)."""

    EAGER = 0  # revoke everything before rejoining
    COOPERATIVE = 1  # keep what you own; revoke only what the assignment takes away


@dataclass(frozen=True)
class Subscription:
    """One member's side of the consumer protocol, as the leader sees it.

    ``generation_id`` is -1 when the member did not send one (protocol v0/v1), as in Java.
    ``group_instance_id`` is not part of the encoded subscription: it comes from the
    JoinGroup member entry (static membership, KIP-345) and orders members in range and
    round-robin.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        # Accept any iterable for convenience but keep the value immutable and hashable.
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(
            self, "owned_partitions", tuple(TopicPartition(*tp) for tp in self.owned_partitions)
        )

    @property
    def generation(self) -> int | None:
        """The generation, or None if absent (negative), like Java's ``Optional``."""
        return self.generation_id if self.generation_id >= 0 else None

    @property
    def rack(self) -> str | None:
        """The rack, or None if absent or empty (Java treats an empty rack as none)."""
        return self.rack_id or None


@dataclass
class Assignment:
    """What the leader gives one member: its partitions and optional assignor bytes."""

    partitions: list[TopicPartition] = field(default_factory=list)
    user_data: bytes | None = None


@dataclass(frozen=True)
class GroupMetadata:
    """What a member learns when an assignment arrives (Java's ``ConsumerGroupMetadata``)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@runtime_checkable
class PartitionAssignor(Protocol):
    """The interface a custom assignor implements (Java's ``ConsumerPartitionAssignor``).

    Required: ``name`` (the protocol name sent in JoinGroup, e.g. ``"range"``) and
    :meth:`assign`. Optional, with the defaults of :class:`AbstractPartitionAssignor`:
    ``supported_protocols`` (first is preferred; a group runs COOPERATIVE only if every
    member's assignor supports it), :meth:`subscription_user_data` (bytes put in the
    member's subscription) and :meth:`on_assignment` (called on every member with its
    assignment, to keep state for the next subscription).
    """

    name: str

    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        partition_racks: Mapping[TopicPartition, Collection[str]] | None = None,
    ) -> dict[str, Assignment]: ...


def java_order(text: str) -> bytes:
    """Sort key equal to Java's ``String.compareTo`` (UTF-16 code units, not code points)."""
    return text.encode("utf-16-be", "surrogatepass")


def partition_order(tp: TopicPartition) -> tuple[bytes, int]:
    """Java's ``TopicPartitionComparator``: topic, then partition number."""
    return java_order(tp.topic), tp.partition


def member_order(member_id: str, group_instance_id: str | None) -> tuple[int, bytes, bytes]:
    """Java's ``MemberInfo.compareTo``: static members (by instance id) before dynamic ones
    (by member id). The member id breaks ties so the order never depends on input order."""
    if group_instance_id is not None:
        return 0, java_order(group_instance_id), java_order(member_id)
    return 1, java_order(member_id), b""


def use_rack_aware_assignment(
    consumer_racks: set[str],
    partition_racks: set[str],
    racks_per_partition: dict[TopicPartition, frozenset[str]],
    prefer_rack_aware_logic: bool = False,
) -> bool:
    """Java's rule: some member rack is also a replica rack, and not every partition has
    replicas on all racks (else every choice is already rack-aligned)."""
    if not consumer_racks or consumer_racks.isdisjoint(partition_racks):
        return False
    if prefer_rack_aware_logic:
        return True
    return not all(racks == partition_racks for racks in racks_per_partition.values())


class AbstractPartitionAssignor(ABC):
    """Base of the built-in assignors (Java's ``AbstractPartitionAssignor``).

    :meth:`assign` keeps only topics some member subscribes to and that have partitions
    (as Java does with cluster metadata), calls :meth:`assign_partitions`, and wraps each
    member's partitions, sorted by topic and partition, in an :class:`Assignment`.
    """

    name: str = ""

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]:
        return (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        """Bytes this member puts in its subscription; None by default."""
        return None

    def on_assignment(self, assignment: Assignment, metadata: GroupMetadata) -> None:
        """Called with this member's assignment after each rebalance; nothing by default."""
        return None

    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        partition_racks: Mapping[TopicPartition, Collection[str]] | None = None,
    ) -> dict[str, Assignment]:
        subscribed = {topic for sub in subscriptions.values() for topic in sub.topics}
        partitions_per_topic = {
            topic: count
            for topic, count in cluster_partitions.items()
            if topic in subscribed and count > 0
        }
        racks = {
            TopicPartition(*tp): frozenset(r for r in replica_racks if r is not None)
            for tp, replica_racks in (partition_racks or {}).items()
        }
        raw = self.assign_partitions(partitions_per_topic, dict(subscriptions), racks)
        return {
            member: Assignment(sorted(raw.get(member, ()), key=partition_order))
            for member in subscriptions
        }

    @abstractmethod
    def assign_partitions(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        partition_racks: dict[TopicPartition, frozenset[str]],
    ) -> Mapping[str, Iterable[TopicPartition]]:
        """Map member id -> partitions; only subscribed topics with partitions are given."""
