"""The sticky assignors' builder for groups whose members subscribe to different topics.

Keeps every still-valid owned partition, gives each unassigned partition to the
least-loaded eligible member, then moves partitions from more- to less-loaded members
until balanced, preferring to move a partition back to its owner of an earlier
generation; if the moves did not improve the balance score, they are undone.
"""

from __future__ import annotations

from odradek.client.assignors.base import (
    DEFAULT_GENERATION,
    Subscription,
    TopicPartition,
    java_order,
)
from odradek.client.assignors.java_order import JavaHashSet
from odradek.client.assignors.sticky_common import (
    MemberData,
    RackInfo,
    all_partitions,
    java_member_order,
)

__all__ = ["GeneralBuilder", "PartitionMovements"]


class PartitionMovements:
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


class GeneralBuilder:
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
        self.sorted_all = all_partitions(partitions_per_topic, topics)
        self.total = sum(partitions_per_topic.values())
        self.revocation_required = False
        self.movements = PartitionMovements()
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
        for member in java_member_order(self.subscriptions):
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
