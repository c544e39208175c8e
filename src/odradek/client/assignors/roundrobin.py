"""``roundrobin`` (Java's ``RoundRobinAssignor``): deal partitions out one by one.

All subscribed partitions, topics in name order and partitions in numeric order, go to the
members in a circle (member order: static members by ``group.instance.id`` first, then
member id), skipping members not subscribed to the partition's topic. With identical
subscriptions the counts differ by at most one.
"""

from __future__ import annotations

from odradek.client.assignors.base import (
    AbstractPartitionAssignor,
    Subscription,
    TopicPartition,
    java_order,
    member_order,
)

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(AbstractPartitionAssignor):
    name = "roundrobin"

    def assign_partitions(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        partition_racks: dict[TopicPartition, frozenset[str]],
    ) -> dict[str, list[TopicPartition]]:
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        circle = sorted(
            subscriptions, key=lambda m: member_order(m, subscriptions[m].group_instance_id)
        )
        topics_of = {m: set(subscriptions[m].topics) for m in circle}
        position = 0
        for topic in sorted(partitions_per_topic, key=java_order):
            # Every topic here has a subscriber, so the search below always ends.
            for partition in range(partitions_per_topic[topic]):
                while topic not in topics_of[circle[position]]:
                    position = (position + 1) % len(circle)
                assignment[circle[position]].append(TopicPartition(topic, partition))
                position = (position + 1) % len(circle)
        return assignment
