"""The algorithm behind ``sticky`` and ``cooperative-sticky`` (Java's AbstractStickyAssignor).

Goals, in order: a balanced assignment (partition counts differ by at most one where the
subscriptions allow it), then as few moves as possible from what members owned before.

* Members' previous ownership is cleaned first: a partition claimed by two members of the
  same generation is dropped from both; claimed in different generations, the higher wins.
* If every member subscribes to the same topics, the *constrained* builder runs
  (:mod:`.sticky_constrained`), otherwise the *general* one (:mod:`.sticky_general`).

Where the result depends on the order Java walks a ``HashMap`` of members (or picks the
first partition of a ``HashSet``), that order is reproduced (:mod:`.java_order`), so a
group gets the same assignment from an odradek leader as from a Java one; results never
depend on the order of the input mapping.

Racks (KIP-881): when members send racks and some partitions have replicas on only some
racks, owned partitions on another rack than their member's are given up, unassigned
partitions go first to a member on one of their racks, and rebalancing moves prefer a
member on the partition's rack. Balance still comes first.
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.client.assignors.base import DEFAULT_GENERATION, Subscription, TopicPartition
from odradek.client.assignors.sticky_common import MemberData, RackInfo, java_member_order
from odradek.client.assignors.sticky_constrained import ConstrainedBuilder
from odradek.client.assignors.sticky_general import GeneralBuilder, PartitionMovements

__all__ = ["MemberData", "StickyResult", "sticky_assign"]


@dataclass
class StickyResult:
    assignment: dict[str, list[TopicPartition]]
    # partition -> new owner, for partitions taken from another member; None when the
    # general builder ran (the cooperative assignor then works it out from owned partitions)
    transferring: dict[TopicPartition, str] | None
    movements: PartitionMovements | None


def sticky_assign(
    partitions_per_topic: dict[str, int],
    subscriptions: dict[str, Subscription],
    member_data: dict[str, MemberData],
    replica_racks: dict[TopicPartition, frozenset[str]] | None = None,
    prefer_rack_aware_logic: bool = False,
) -> StickyResult:
    rack_info = RackInfo(
        partitions_per_topic, subscriptions, replica_racks or {}, prefer_rack_aware_logic
    )
    members = java_member_order(subscriptions)
    owned: dict[str, list[TopicPartition]] = {}
    multiply_owned: set[TopicPartition] = set()
    max_generation = DEFAULT_GENERATION
    owner: dict[TopicPartition, str] = {}
    topic_sets = [frozenset(subscriptions[m].topics) for m in members]
    # Java compares each member with the first one whose topic list is non-empty, so a
    # member subscribed to nothing can pass as "equal" and be given partitions it never
    # asked for; comparing the sets exactly avoids that.
    all_equal = len(set(topic_sets)) <= 1
    for member in members:
        data = member_data[member]
        generation = data.generation if data.generation is not None else DEFAULT_GENERATION
        max_generation = max(max_generation, generation)
        mine: list[TopicPartition] = []
        owned[member] = mine
        for tp in data.partitions:
            # Java checks only the topic; a partition number the topic no longer has (it
            # was re-created smaller) is dropped too, so it is never handed out.
            if not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                continue
            other = owner.get(tp)
            if other is None:
                mine.append(tp)
                owner[tp] = member
                continue
            other_generation = subscriptions[other].generation_id
            if other_generation < 0:
                other_generation = DEFAULT_GENERATION
            if generation == other_generation:
                # Both claim it in the same generation: neither keeps it (Java logs an error).
                multiply_owned.add(tp)
                _remove(owned[other], tp)
                owner[tp] = member
            elif generation > other_generation:
                mine.append(tp)
                _remove(owned[other], tp)
                owner[tp] = member
    if all_equal:
        builder = ConstrainedBuilder(partitions_per_topic, owned, multiply_owned, rack_info)
        return StickyResult(builder.build(), builder.transferring, None)
    general = GeneralBuilder(
        partitions_per_topic, subscriptions, owned, member_data, max_generation, rack_info
    )
    return StickyResult(general.build(), None, general.movements)


def _remove(partitions: list[TopicPartition], tp: TopicPartition) -> None:
    if tp in partitions:
        partitions.remove(tp)
