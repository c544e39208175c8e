"""The sticky assignors' builder for groups whose members all subscribe to the same topics.

With ``min = total // members`` and ``max = ceil(total / members)``, each member keeps up to
its quota of owned partitions (lowest partition numbers first; with racks, only those on
its rack), then unowned partitions are dealt to members still below quota: first to
members on one of the partition's racks, then round-robin.
"""

from __future__ import annotations

import math

from odradek.client.assignors.base import TopicPartition, java_order
from odradek.client.assignors.sticky_common import RackInfo, all_partitions

__all__ = ["ConstrainedBuilder"]


class ConstrainedBuilder:
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
            for tp in all_partitions(self.partitions_per_topic, topics)
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
