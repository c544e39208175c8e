"""The algorithm behind ``sticky`` and ``cooperative-sticky`` (Java's AbstractStickyAssignor).

Goals, in order: a balanced assignment (partition counts differ by at most one where the
subscriptions allow it), then as few moves as possible from what members owned before.

* Members' previous ownership is cleaned first: a partition claimed by two members of the
  same generation is dropped from both; claimed in different generations, the higher wins.
* If every member subscribes to the same topics, the *constrained* builder runs: with
  ``min = total // members`` and ``max = ceil(total / members)``, each member keeps up to
  its quota of owned partitions (lowest partition numbers first), then the unowned
  partitions are dealt round-robin to the members still below quota.
* Otherwise the *general* builder keeps every still-valid owned partition, gives each
  unassigned partition to the least-loaded eligible member, then moves partitions from
  more- to less-loaded members until balanced, preferring to move a partition back to its
  owner of an earlier generation; if that did not improve the balance score, the moves are
  undone.

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

import math
from dataclasses import dataclass

from odradek.client.assignors.base import (
    DEFAULT_GENERATION,
    Subscription,
    TopicPartition,
    java_order,
    use_rack_aware_assignment,
)
from odradek.client.assignors.java_order import JavaHashSet, hashmap_order, string_hash

__all__ = ["MemberData", "StickyResult", "sticky_assign"]


@dataclass(frozen=True)
class MemberData:
    """What a member owned before and in which generation (None: not known)."""

    partitions: tuple[TopicPartition, ...]
    generation: int | None


@dataclass
class StickyResult:
    assignment: dict[str, list[TopicPartition]]
    # partition -> new owner, for partitions taken from another member; None when the
    # general builder ran (the cooperative assignor then works it out from owned partitions)
    transferring: dict[TopicPartition, str] | None
    movements: _PartitionMovements | None


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
    members = _java_member_order(subscriptions)
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
        builder = _Constrained(partitions_per_topic, owned, multiply_owned, rack_info)
        return StickyResult(builder.build(), builder.transferring, None)
    general = _General(
        partitions_per_topic, subscriptions, owned, member_data, max_generation, rack_info
    )
    return StickyResult(general.build(), None, general.movements)


def _java_member_order(subscriptions: dict[str, Subscription]) -> list[str]:
    """The order Java's leader walks its ``HashMap`` of member subscriptions."""
    return hashmap_order(sorted(subscriptions, key=java_order), string_hash)


def _remove(partitions: list[TopicPartition], tp: TopicPartition) -> None:
    if tp in partitions:
        partitions.remove(tp)


def _all_partitions(
    partitions_per_topic: dict[str, int], topics: list[str]
) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]


class _Constrained:
    """All members subscribe to the same topics: fill quotas, keep owned partitions."""

    def __init__(
        self,
        partitions_per_topic: dict[str, int],
        owned: dict[str, list[TopicPartition]],
        multiply_owned: set[TopicPartition],
        rack_info: RackInfo,
    ) -> None:
        self.rack_info = rack_info
        self.partitions_per_topic = partitions_per_topic
        self.owned = owned
        self.multiply_owned = multiply_owned
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.transferring: dict[TopicPartition, str] = {}
        self.under_min: list[str] = []
        self.exactly_min: list[str] = []
        total = sum(partitions_per_topic.values())
        count = len(owned)
        self.min_quota = total // count if count else 0
        self.max_quota = math.ceil(total / count) if count else 0
        self.expected_over_min = total % count if count else 0
        self.current_over_min = 0
        self.assignment: dict[str, list[TopicPartition]] = {m: [] for m in owned}
        self.assigned: set[TopicPartition] = set()

    def build(self) -> dict[str, list[TopicPartition]]:
        self._assign_owned()
        topics = sorted(self.partitions_per_topic, key=java_order)
        unassigned = [
            tp
            for tp in _all_partitions(self.partitions_per_topic, topics)
            if tp not in self.assigned
        ]
        self.under_min.sort(key=java_order)
        self.exactly_min.sort(key=java_order)
        unassigned = self.rack_info.sort_by_rack_consumers(unassigned)
        unassigned = self._assign_rack_aware_round_robin(unassigned)
        self._assign_round_robin(unassigned)
        return self.assignment

    def _keep(self, member: str, partitions: list[TopicPartition]) -> None:
        self.assignment[member].extend(partitions)
        self.assigned.update(partitions)

    def _assign_owned(self) -> None:
        for member, owned in self.owned.items():
            kept = []
            for tp in owned:
                if self.rack_info.mismatch(member, tp):
                    self.maybe_revoked[tp] = member  # on another rack: may move
                else:
                    kept.append(tp)
            mine = sorted(kept, key=lambda tp: (tp.partition, java_order(tp.topic)))
            mine = [tp for tp in mine if tp not in self.multiply_owned]
            if len(mine) < self.min_quota:
                self._keep(member, mine)
                self.under_min.append(member)
            elif len(mine) >= self.max_quota and self.current_over_min < self.expected_over_min:
                self.current_over_min += 1
                if self.current_over_min == self.expected_over_min:
                    self.exactly_min.clear()
                self._keep(member, mine[: self.max_quota])
                for tp in mine[self.max_quota :]:
                    self.maybe_revoked[tp] = member
            else:
                self._keep(member, mine[: self.min_quota])
                for tp in mine[self.min_quota :]:
                    self.maybe_revoked[tp] = member
                if self.current_over_min < self.expected_over_min:
                    self.exactly_min.append(member)

    def _assign_rack_aware_round_robin(
        self, unassigned: list[TopicPartition]
    ) -> list[TopicPartition]:
        """Fill members up to quota with partitions that have a replica on their rack;
        return the partitions left for the plain round-robin."""
        if not self.rack_info.consumer_racks:
            return unassigned
        left = []
        next_index = 0
        for tp in unassigned:
            member = None
            index = self.rack_info.next_rack_consumer(tp, self.under_min, next_index)
            if index >= 0:
                member = self.under_min[index]
                count = len(self.assignment[member]) + 1
                if count >= self.min_quota:
                    self.under_min.remove(member)
                    # At min_quota a member is unfilled only if it may still reach max_quota.
                    if count < self.max_quota and self.current_over_min < self.expected_over_min:
                        self.exactly_min.append(member)
                else:
                    index += 1
                next_index = index % len(self.under_min) if self.under_min else 0
            elif self.exactly_min:
                first = self.rack_info.next_rack_consumer(tp, self.exactly_min, 0)
                if first >= 0:
                    member = self.exactly_min[first]
                    if len(self.assignment[member]) + 1 == self.max_quota:
                        del self.exactly_min[first]
                        self.current_over_min += 1
                        if self.current_over_min == self.expected_over_min:
                            self.exactly_min.clear()
            if member is None:
                left.append(tp)
            else:
                self._assign_new(tp, member)
        return left

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        # Index-based walk over under_min that tolerates removing the current member,
        # restarting from its head when the end is reached (Java re-creates its iterator).
        index = 0
        for tp in unassigned:
            if index < len(self.under_min):
                member = self.under_min[index]
                index += 1
            elif not self.under_min and not self.exactly_min:
                raise AssertionError("sticky assignor: no member left below quota")
            elif not self.under_min:
                member = self.exactly_min.pop(0)
            else:
                index = 0
                member = self.under_min[index]
                index += 1
            count = self._assign_new(tp, member)
            if count == self.min_quota:
                # Only members taken from under_min can land exactly on min_quota here.
                index -= 1
                del self.under_min[index]
                self.exactly_min.append(member)
            elif count == self.max_quota:
                self.current_over_min += 1

    def _assign_new(self, tp: TopicPartition, member: str) -> int:
        self.assignment[member].append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != member) or tp in self.multiply_owned:
            self.transferring[tp] = member
        return len(self.assignment[member])


class _PartitionMovements:
    """Where partitions moved during the general builder's balancing (src -> dst per topic).

    Used to prefer undoing an earlier move over a new one, and to check stickiness: no
    topic may have partitions moving both ways between the same two members.
    """

    def __init__(self) -> None:
        self.by_partition: dict[TopicPartition, tuple[str, str]] = {}
        self.by_topic: dict[str, dict[tuple[str, str], JavaHashSet]] = {}

    def _remove_record(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.by_partition.pop(tp)
        pairs = self.by_topic[tp.topic]
        pairs[pair].discard(tp)
        if not pairs[pair]:
            del pairs[pair]
        if not pairs:
            del self.by_topic[tp.topic]
        return pair

    def _add_record(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.by_partition[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, JavaHashSet()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.by_partition:
            src, _dst = self._remove_record(tp)
            if src != new:  # not simply going back where it came from
                self._add_record(tp, (src, new))
        else:
            self._add_record(tp, (old, new))

    def partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """Move a partition of the same topic that earlier went ``new -> old`` instead,
        so that the net effect is fewer moves."""
        pairs = self.by_topic.get(tp.topic)
        if pairs is None:
            return tp
        if tp in self.by_partition:
            old = self.by_partition[tp][0]
        reverse = pairs.get((new, old))
        if not reverse:
            return tp
        return reverse.first()

    def is_sticky(self) -> bool:
        return not any(
            (dst, src) in pairs for pairs in self.by_topic.values() for src, dst in pairs
        )


class _General:
    """Members subscribe to different topics: keep owned, fill, then rebalance."""

    def __init__(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        owned: dict[str, list[TopicPartition]],
        member_data: dict[str, MemberData],
        max_generation: int,
        rack_info: RackInfo,
    ) -> None:
        self.rack_info = rack_info
        self.partitions_per_topic = partitions_per_topic
        self.subscriptions = subscriptions
        self.member_data = member_data
        self.max_generation = max_generation
        self.current = owned  # member -> partitions, edited in place
        self.topic_consumers: dict[str, list[str]] = {t: [] for t in partitions_per_topic}
        self.consumer_topics: dict[str, list[str]] = {}
        for member in sorted(subscriptions, key=java_order):
            topics = [
                t for t in dict.fromkeys(subscriptions[member].topics) if t in partitions_per_topic
            ]
            self.consumer_topics[member] = topics
            for topic in topics:
                self.topic_consumers[topic].append(member)
            self.current.setdefault(member, [])
        self.partition_consumer = {tp: m for m, tps in self.current.items() for tp in tps}
        topics = sorted(
            self.topic_consumers, key=lambda t: (len(self.topic_consumers[t]), java_order(t))
        )
        self.sorted_all = _all_partitions(partitions_per_topic, topics)
        self.total = sum(partitions_per_topic.values())
        self.revocation_required = False
        self.movements = _PartitionMovements()
        self.active: set[str] = set()  # Java's sortedCurrentSubscriptions, sorted on demand

    # -- ordering helpers
    def _by_load(self) -> list[str]:
        return sorted(self.active, key=lambda m: (len(self.current[m]), java_order(m)))

    def _max_size(self, member: str) -> int:
        return sum(self.partitions_per_topic[t] for t in self.consumer_topics[member])

    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous_assignment()
        assigned = self._assign_owned()
        unassigned = [tp for tp in self.sorted_all if tp not in assigned]
        self.active.update(self.current)
        self._balance(previous, unassigned)
        return self.current

    def _previous_assignment(self) -> dict[TopicPartition, tuple[str, int]]:
        """Owners from generations before the newest, to move partitions back to them."""
        previous: dict[TopicPartition, tuple[str, int]] = {}
        for member in _java_member_order(self.subscriptions):
            data = self.member_data[member]
            if data.generation is not None and data.generation < self.max_generation:
                generation = data.generation
            elif data.generation is None and self.max_generation > DEFAULT_GENERATION:
                generation = DEFAULT_GENERATION
            else:
                continue
            for tp in data.partitions:
                known = previous.get(tp)
                if known is None or generation > known[1]:
                    previous[tp] = (member, generation)
        return previous

    def _assign_owned(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for member in list(self.current):
            subscription = self.subscriptions.get(member)
            if subscription is None:
                for tp in self.current.pop(member):
                    self.partition_consumer.pop(tp, None)
                continue
            kept = []
            for tp in self.current[member]:
                if tp.topic not in self.topic_consumers:
                    self.partition_consumer.pop(tp, None)
                elif tp.topic not in subscription.topics or self.rack_info.mismatch(member, tp):
                    self.revocation_required = True
                else:
                    kept.append(tp)
                    assigned.add(tp)
            self.current[member][:] = kept
        return assigned

    def _is_balanced(self) -> bool:
        order = self._by_load()
        if len(self.current[order[0]]) >= len(self.current[order[-1]]) - 1:
            return True
        holder = {tp: m for m in order for tp in self.current[m]}
        for member in order:
            count = len(self.current[member])
            if count == self._max_size(member):
                continue
            mine = set(self.current[member])
            for topic in self.consumer_topics[member]:
                for p in range(self.partitions_per_topic[topic]):
                    tp = TopicPartition(topic, p)
                    if tp in mine:
                        continue
                    other = holder.get(tp)
                    if other is not None and count + 1 < len(self.current[other]):
                        return False
        return True

    @staticmethod
    def _balance_score(assignment: dict[str, list[TopicPartition]]) -> int:
        sizes = [len(v) for v in assignment.values()]
        return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1 :])

    def _maybe_assign(self, tp: TopicPartition, match_racks: bool) -> bool:
        """Give ``tp`` to the least-loaded member subscribed to it (on one of its racks if
        ``match_racks``); False if there is none."""
        for member in self._by_load():
            if tp.topic in self.consumer_topics[member] and not (
                match_racks and self.rack_info.mismatch(member, tp)
            ):
                self.current[member].append(tp)
                self.partition_consumer[tp] = member
                return True
        return False

    def _topic_can_move(self, topic: str) -> bool:
        return len(self.topic_consumers[topic]) >= 2

    def _member_can_move(self, member: str) -> bool:
        partitions = self.current[member]
        if len(partitions) < self._max_size(member):
            return True
        return any(self._topic_can_move(tp.topic) for tp in partitions)

    def _balance(
        self, previous: dict[TopicPartition, tuple[str, int]], unassigned: list[TopicPartition]
    ) -> None:
        initializing = not self.current[self._by_load()[-1]] if self.active else True
        to_assign = unassigned
        if self.rack_info.consumer_racks:
            to_assign = [
                tp
                for tp in unassigned
                if not (self.topic_consumers[tp.topic] and self._maybe_assign(tp, True))
            ]
        for tp in to_assign:
            if self.topic_consumers[tp.topic]:
                self._maybe_assign(tp, False)

        fixed_partitions = {
            TopicPartition(t, p)
            for t in self.topic_consumers
            if not self._topic_can_move(t)
            for p in range(self.partitions_per_topic[t])
        }
        reassignable = [tp for tp in self.sorted_all if tp not in fixed_partitions]
        unassigned = [tp for tp in unassigned if tp not in fixed_partitions]

        fixed_members: dict[str, list[TopicPartition]] = {}
        for member in sorted(self.consumer_topics, key=java_order):
            if not self._member_can_move(member):
                self.active.discard(member)
                fixed_members[member] = self.current.pop(member)

        before = {m: list(tps) for m, tps in self.current.items()}
        before_owner = dict(self.partition_consumer)
        if not self.revocation_required:
            self._reassign(unassigned, previous)
        moved = self._reassign(reassignable, previous)
        if (
            not initializing
            and moved
            and self._balance_score(self.current) >= self._balance_score(before)
        ):
            # The moves did not make things better: keep the stickier assignment.
            self.current.clear()
            self.current.update(before)
            self.partition_consumer = before_owner
        for member, partitions in fixed_members.items():
            self.current[member] = partitions
            self.active.add(member)

    def _reassign(
        self, partitions: list[TopicPartition], previous: dict[TopicPartition, tuple[str, int]]
    ) -> bool:
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                member = self.partition_consumer.get(tp)
                if member is None or member not in self.active:
                    continue
                earlier = previous.get(tp)
                if (
                    earlier is not None
                    and earlier[0] in self.active
                    and len(self.current[member]) > len(self.current[earlier[0]]) + 1
                ):
                    self._move(tp, earlier[0])
                    performed = modified = True
                    continue
                if self._move_if_unbalanced(tp, member, same_rack_only=True) or (
                    self._move_if_unbalanced(tp, member, same_rack_only=False)
                ):
                    performed = modified = True
        return performed

    def _move_if_unbalanced(self, tp: TopicPartition, member: str, same_rack_only: bool) -> bool:
        """Move ``tp`` to the least-loaded subscriber if some subscriber (on ``tp``'s racks,
        when ``same_rack_only`` and ``member`` is on one of them) has 2+ fewer partitions."""
        racks = self.rack_info.partition_racks.get(tp, frozenset())
        if same_rack_only and self.rack_info.consumer_racks.get(member) not in racks:
            return False
        for other in self.topic_consumers[tp.topic]:
            if other not in self.active:
                continue
            if same_rack_only and self.rack_info.consumer_racks.get(other) not in racks:
                continue
            if len(self.current[member]) > len(self.current[other]) + 1:
                self._move(tp, self._least_loaded_for(tp.topic))
                return True
        return False

    def _least_loaded_for(self, topic: str) -> str:
        return next(m for m in self._by_load() if topic in self.consumer_topics[m])

    def _move(self, tp: TopicPartition, new: str) -> None:
        old = self.partition_consumer[tp]
        actual = self.movements.partition_to_move(tp, old, new)
        source = self.partition_consumer[actual]
        self.movements.move(actual, source, new)
        self.current[source].remove(actual)
        self.current[new].append(actual)
        self.partition_consumer[actual] = new
