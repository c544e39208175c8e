"""``range``: Kafka's default eager assignor (Java's ``RangeAssignor``), with KIP-881 racks.

Per topic, partitions in numeric order are cut into contiguous ranges, one per subscribed
member in member order (static members by ``group.instance.id`` first, then member id);
the first ``partitions % members`` members get one extra. Topics with the same partition
count and the same subscribers therefore line up ("co-partitioning").

Rack awareness (KIP-881) applies when members send a rack and some partitions have replicas
on only a subset of the racks: a first pass gives each member, within the same per-topic
quotas, the partitions that have a replica in its rack (for co-partitioned topics: the same
partition number of every topic, so co-partitioning is kept); the plain range pass then
places the rest. Balance always wins over rack alignment.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.client.assignors.base import (
    AbstractPartitionAssignor,
    Subscription,
    TopicPartition,
    member_order,
    use_rack_aware_assignment,
)

__all__ = ["RangeAssignor", "use_rack_aware_assignment"]


class _TopicState:
    """One topic's range quotas and what is still unassigned (Java's TopicAssignmentState)."""

    def __init__(
        self,
        topic: str,
        num_partitions: int,
        consumers: list[str],
        consumer_racks: dict[str, str],
        replica_racks: dict[TopicPartition, frozenset[str]],
        prefer_rack_aware_logic: bool,
    ) -> None:
        self.topic = topic
        self.consumers = consumers  # in member order
        self.consumer_rack = {c: consumer_racks.get(c) for c in consumers}
        self.unassigned = [TopicPartition(topic, p) for p in range(num_partitions)]
        self.assigned_count = dict.fromkeys(consumers, 0)
        self.per_consumer = num_partitions // len(consumers) if consumers else 0
        self.with_extra = num_partitions % len(consumers) if consumers else 0
        member_racks = {r for r in self.consumer_rack.values() if r is not None}
        self.partition_racks: dict[TopicPartition, frozenset[str]] = {}
        all_partition_racks: set[str] = set()
        if member_racks:
            for tp in self.unassigned:
                racks = replica_racks.get(tp, frozenset())
                self.partition_racks[tp] = racks
                all_partition_racks |= racks
        self.needs_rack_aware = use_rack_aware_assignment(
            member_racks, all_partition_racks, self.partition_racks, prefer_rack_aware_logic
        )

    def racks_match(self, consumer: str, tp: TopicPartition) -> bool:
        rack = self.consumer_rack[consumer]
        return rack is None or rack in self.partition_racks.get(tp, frozenset())

    def max_assignable(self, consumer: str) -> int:
        limit = self.per_consumer + (1 if self.with_extra > 0 else 0)
        return max(0, limit - self.assigned_count[consumer])

    def on_assigned(self, consumer: str, partitions: list[TopicPartition]) -> None:
        self.assigned_count[consumer] += len(partitions)
        if self.assigned_count[consumer] > self.per_consumer:
            self.with_extra -= 1
        taken = set(partitions)
        self.unassigned = [tp for tp in self.unassigned if tp not in taken]


class RangeAssignor(AbstractPartitionAssignor):
    name = "range"

    def __init__(self, *, prefer_rack_aware_logic: bool = False) -> None:
        # Java keeps this switch for its tests: rack-aware passes even when every
        # partition has replicas on every rack (results are then the same as without).
        self.prefer_rack_aware_logic = prefer_rack_aware_logic

    def assign_partitions(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        partition_racks: dict[TopicPartition, frozenset[str]],
    ) -> dict[str, list[TopicPartition]]:
        ordered = sorted(
            subscriptions, key=lambda m: member_order(m, subscriptions[m].group_instance_id)
        )
        consumer_racks = {m: s.rack for m, s in subscriptions.items() if s.rack is not None}
        states = []
        for topic in sorted(partitions_per_topic):
            members = [m for m in ordered if topic in subscriptions[m].topics]
            states.append(
                _TopicState(
                    topic,
                    partitions_per_topic[topic],
                    members,
                    consumer_racks,
                    partition_racks,
                    self.prefer_rack_aware_logic,
                )
            )
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        if any(s.needs_rack_aware for s in states):
            self._assign_with_rack_matching(states, assignment)
        for state in states:
            _assign_ranges(state, lambda _c, _tp: True, assignment)
        return assignment

    @staticmethod
    def _assign_with_rack_matching(
        states: list[_TopicState], assignment: dict[str, list[TopicPartition]]
    ) -> None:
        # Topics with the same subscribers (and racks) and the same number of partitions
        # (counted where racks are known, as Java does) are placed together.
        groups: dict[tuple, list[_TopicState]] = {}
        for state in states:
            key = (tuple(state.consumer_rack.items()), len(state.partition_racks))
            groups.setdefault(key, []).append(state)
        for (consumer_racks, num_partitions), group in groups.items():
            if len(group) > 1:
                consumers = [c for c, _ in consumer_racks]
                _assign_co_partitioned(consumers, num_partitions, group, assignment)
            elif group[0].needs_rack_aware:
                _assign_ranges(group[0], group[0].racks_match, assignment)


def _assign(
    consumer: str,
    partitions: list[TopicPartition],
    state: _TopicState,
    assignment: dict[str, list[TopicPartition]],
) -> None:
    assignment[consumer].extend(partitions)
    state.on_assigned(consumer, partitions)


def _assign_ranges(
    state: _TopicState,
    may_assign: Callable[[str, TopicPartition], bool],
    assignment: dict[str, list[TopicPartition]],
) -> None:
    for consumer in state.consumers:
        if not state.unassigned:
            break
        limit = state.max_assignable(consumer)
        chosen = [tp for tp in state.unassigned if may_assign(consumer, tp)][:limit]
        if chosen:
            _assign(consumer, chosen, state, assignment)


def _assign_co_partitioned(
    consumers: list[str],
    num_partitions: int,
    states: list[_TopicState],
    assignment: dict[str, list[TopicPartition]],
) -> None:
    """Give partition ``p`` of every topic in ``states`` to the first member whose rack has
    a replica of all of them and that still has room in each topic."""
    remaining = list(consumers)
    for p in range(num_partitions):
        match = next(
            (
                c
                for c in remaining
                if all(
                    s.racks_match(c, TopicPartition(s.topic, p)) and s.max_assignable(c) > 0
                    for s in states
                )
            ),
            None,
        )
        if match is None:
            continue
        for s in states:
            _assign(match, [TopicPartition(s.topic, p)], s, assignment)
        if not any(s.max_assignable(match) > 0 for s in states):
            remaining.remove(match)
            if not remaining:
                break
