"""Leader election strategies, as Kafka's Election/PartitionLeaderElectionAlgorithms.

Pure functions of the assignment (replicas in preferred order), the ISR and the live
brokers: each returns the new leader (or None when none can be chosen) and the new ISR.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def offline_partition_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    unclean_enabled: bool,
) -> tuple[int | None, tuple[int, ...], bool]:
    """The first replica in assignment order that is live and in the ISR. Only when
    there is none and ``unclean.leader.election.enable`` is set, the first live replica
    (which may lack acknowledged records). Returns ``(leader, new_isr, unclean)``."""
    live_isr = tuple(r for r in isr if r in live)
    for replica in assignment:
        if replica in live and replica in isr:
            return replica, live_isr, False
    if unclean_enabled:
        for replica in assignment:
            if replica in live:
                return replica, (replica,), True
    return None, tuple(isr), False


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> tuple[int | None, tuple[int, ...]]:
    """A live ISR member that is not shutting down; the ISR loses the shutting-down
    brokers (Kafka's controlledShutdownPartitionLeaderElection)."""
    new_isr = tuple(r for r in isr if r not in shutting_down)
    for replica in assignment:
        if replica in live and replica in isr and replica not in shutting_down:
            return replica, new_isr
    return None, new_isr


def preferred_replica_leader(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> int | None:
    """The first replica of the assignment, if it is live and in the ISR; the ISR stays."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def reassign_partition_leader(
    target: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> int | None:
    """The first replica of the reassignment's target that is live and in the ISR; the
    ISR stays (Kafka's reassignPartitionLeaderElection)."""
    for replica in target:
        if replica in live and replica in isr:
            return replica
    return None
