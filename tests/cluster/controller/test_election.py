"""Leader election strategies (pure functions), as Kafka's Election rules."""

from __future__ import annotations

from odradek.cluster.controller.election import (
    controlled_shutdown_leader,
    offline_partition_leader,
    preferred_replica_leader,
)


def test_offline_election_takes_the_first_live_isr_member_in_assignment_order() -> None:
    assert offline_partition_leader([1, 2, 3], [3, 2], {2, 3}, False) == (2, (3, 2), False)
    # The ISR loses dead members; the leader must be in the ISR.
    assert offline_partition_leader([1, 2, 3], [1, 3], {2, 3}, False) == (3, (3,), False)


def test_offline_election_without_live_isr_member() -> None:
    assert offline_partition_leader([1, 2], [1], {2}, False) == (None, (1,), False)
    # Unclean: the first live replica, alone in the ISR.
    assert offline_partition_leader([1, 2, 3], [1], {3, 2}, True) == (2, (2,), True)
    assert offline_partition_leader([1, 2], [1], set(), True) == (None, (1,), False)


def test_controlled_shutdown_excludes_shutting_down_brokers() -> None:
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == (2, (2, 3))
    assert controlled_shutdown_leader([1, 2], [1], {1, 2}, {1}) == (None, ())
    # A live replica outside the ISR cannot lead.
    assert controlled_shutdown_leader([1, 2, 3], [1, 3], {1, 2, 3}, {1}) == (3, (3,))


def test_preferred_replica_must_be_live_and_in_isr() -> None:
    assert preferred_replica_leader([2, 1], [1, 2], {1, 2}) == 2
    assert preferred_replica_leader([2, 1], [1], {1, 2}) is None
    assert preferred_replica_leader([2, 1], [1, 2], {1}) is None
    assert preferred_replica_leader([], [1], {1}) is None
