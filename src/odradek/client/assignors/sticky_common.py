"""Shared pieces of the sticky assignors: member data, rack information, orders."""

from __future__ import annotations

from dataclasses import dataclass

from odradek.client.assignors.base import (
    Subscription,
    TopicPartition,
    java_order,
    use_rack_aware_assignment,
)
from odradek.client.assignors.java_order import hashmap_order, string_hash

__all__ = ["MemberData", "RackInfo", "all_partitions", "java_member_order"]


@dataclass(frozen=True)
class MemberData:
    """What a member owned before and in which generation (None: not known)."""

    partitions: tuple[TopicPartition, ...]
    generation: int | None


class RackInfo:
    """Member racks and partition replica racks, when rack-aware assignment applies."""

    def __init__(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        replica_racks: dict[TopicPartition, frozenset[str]],
        prefer_rack_aware_logic: bool,
    ) -> None:
        member_racks = {m: s.rack for m, s in subscriptions.items() if s.rack is not None}
        members_per_rack: dict[str, int] = {}
        for rack in member_racks.values():
            members_per_rack[rack] = members_per_rack.get(rack, 0) + 1
        racks_of: dict[TopicPartition, frozenset[str]] = {}
        if member_racks:
            for topic, count in partitions_per_topic.items():
                for p in range(count):
                    tp = TopicPartition(topic, p)
                    racks_of[tp] = replica_racks.get(tp, frozenset())
        all_partition_racks = set().union(*racks_of.values()) if racks_of else set()
        if use_rack_aware_assignment(
            set(members_per_rack), all_partition_racks, racks_of, prefer_rack_aware_logic
        ):
            self.consumer_racks = member_racks
            self.partition_racks = racks_of
        else:
            self.consumer_racks = {}
            self.partition_racks = {}
        # As in Java, counted whenever some member has a rack, even if racks go unused.
        self.consumers_on_racks = {
            tp: sum(members_per_rack.get(r, 0) for r in racks) for tp, racks in racks_of.items()
        }

    def mismatch(self, member: str, tp: TopicPartition) -> bool:
        rack = self.consumer_racks.get(member)
        return rack is not None and rack not in self.partition_racks.get(tp, frozenset())

    def sort_by_rack_consumers(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Partitions with fewer members on their racks first (stable)."""
        if not self.consumers_on_racks:
            return partitions
        return sorted(partitions, key=lambda tp: self.consumers_on_racks.get(tp, 0))

    def next_rack_consumer(self, tp: TopicPartition, members: list[str], first: int) -> int:
        """Index of the first member from ``first`` (wrapping) on one of ``tp``'s racks."""
        racks = self.partition_racks.get(tp)
        if not racks:
            return -1
        for i in range(len(members)):
            index = (first + i) % len(members)
            if self.consumer_racks.get(members[index]) in racks:
                return index
        return -1


def java_member_order(subscriptions: dict[str, Subscription]) -> list[str]:
    """The order Java's leader walks its ``HashMap`` of member subscriptions."""
    return hashmap_order(sorted(subscriptions, key=java_order), string_hash)


def all_partitions(partitions_per_topic: dict[str, int], topics: list[str]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]
