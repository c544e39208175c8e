"""Rack-aware (KIP-881) ``sticky`` and ``cooperative-sticky``: the sequences of Kafka's
AbstractStickyAssignorTest.testRackAwareAssignmentWith{Uniform,NonEqual}Subscription,
replayed step by step on one assignor (Java toggles ``preferRackAwareLogic`` between them).
For ``cooperative-sticky`` the expected lists are what one round hands out, partitions
still being revoked left out."""

from __future__ import annotations

import pytest

from .helpers import null_racks, racks, verify_rack_assignment
from .sticky_harness import KINDS, Harness

TOPICS = {"t1": 6, "t2": 7, "t3": 2}
EVERY = ["t1", "t2", "t3"]
OWNED = [
    "t1-0, t1-1, t1-2, t1-3, t1-4",
    "t1-5, t2-0, t2-1, t2-2, t2-3",
    "t2-4, t2-5, t2-6, t3-0, t3-1",
]


def both_ways(assignor, rf, brokers, consumers, topics, expected, mismatched) -> None:
    """Java's verifyUniformSubscription / verifyNonEqualSubscription: without owned
    partitions, then owning the expected assignment (which must then stay as it is)."""
    verify_rack_assignment(assignor, TOPICS, rf, brokers, consumers, topics, expected, mismatched)
    verify_rack_assignment(
        assignor, TOPICS, rf, brokers, consumers, topics, expected, mismatched, expected
    )


@pytest.mark.parametrize("kind", KINDS)
def test_rack_aware_assignment_with_uniform_subscription(kind: str) -> None:
    a = Harness(kind).assignor
    topics = [EVERY] * 3
    plain = [
        "t1-0, t1-3, t2-0, t2-3, t2-6",
        "t1-1, t1-4, t2-1, t2-4, t3-0",
        "t1-2, t1-5, t2-2, t2-5, t3-1",
    ]
    both_ways(a, 3, null_racks(3), racks(3), topics, plain, -1)
    both_ways(a, 3, racks(3), null_racks(3), topics, plain, -1)
    a.prefer_rack_aware_logic = True
    both_ways(a, 3, racks(3), racks(3), topics, plain, 0)
    both_ways(a, 4, racks(4), racks(3), topics, plain, 0)
    a.prefer_rack_aware_logic = False
    both_ways(a, 3, racks(3), racks(3), topics, plain, 0)
    both_ways(a, 3, racks(3), ["d", "e", "f"], topics, plain, -1)
    both_ways(a, 3, racks(3), [None, "e", "f"], topics, plain, -1)
    # replication factor 1 or 2: brokers hold a subset; the assignment is rack-aligned
    both_ways(a, 1, racks(3), racks(3), topics, plain, 0)
    both_ways(a, 2, racks(3), racks(3), topics, plain, 0)
    # one member on a rack without partitions gets misaligned ones, for balance
    both_ways(a, 3, racks(2), racks(3), topics, plain, 5)
    # owned partitions on the wrong rack are given up
    if kind == "cooperative-sticky":
        first_round = ["t1-0, t1-3", "t2-1", "t2-5, t3-1"]
        verify_rack_assignment(a, TOPICS, 1, racks(3), racks(3), topics, first_round, 0, OWNED)
    else:
        verify_rack_assignment(a, TOPICS, 1, racks(3), racks(3), topics, plain, 0, OWNED)
    # and kept when racks match
    a.prefer_rack_aware_logic = True
    verify_rack_assignment(a, TOPICS, 3, racks(3), racks(3), topics, plain, 0, plain)


@pytest.mark.parametrize("kind", KINDS)
def test_rack_aware_assignment_with_non_equal_subscription(kind: str) -> None:
    a = Harness(kind).assignor
    topics = [EVERY, EVERY, ["t1", "t3"]]
    plain = [
        "t1-5, t2-0, t2-2, t2-4, t2-6",
        "t1-3, t2-1, t2-3, t2-5, t3-0",
        "t1-0, t1-1, t1-2, t1-4, t3-1",
    ]
    both_ways(a, 3, null_racks(3), racks(3), topics, plain, -1)
    both_ways(a, 3, racks(3), null_racks(3), topics, plain, -1)
    a.prefer_rack_aware_logic = True
    both_ways(a, 3, racks(3), racks(3), topics, plain, 0)
    both_ways(a, 4, racks(4), racks(3), topics, plain, 0)
    a.prefer_rack_aware_logic = False
    both_ways(a, 3, racks(3), racks(3), topics, plain, 0)
    both_ways(a, 3, racks(3), ["d", "e", "f"], topics, plain, -1)
    both_ways(a, 3, racks(3), [None, "e", "f"], topics, plain, -1)
    # best effort: misalignments remain when rack choices are few
    rf1 = [
        "t1-3, t2-0, t2-2, t2-3, t2-6",
        "t1-4, t2-1, t2-4, t2-5, t3-0",
        "t1-0, t1-1, t1-2, t1-5, t3-1",
    ]
    both_ways(a, 1, racks(3), racks(3), topics, rf1, 4)
    rf2 = [
        "t1-3, t2-0, t2-2, t2-5, t2-6",
        "t1-0, t2-1, t2-3, t2-4, t3-0",
        "t1-1, t1-2, t1-4, t1-5, t3-1",
    ]
    both_ways(a, 2, racks(3), racks(3), topics, rf2, 0)
    both_ways(a, 3, racks(2), racks(3), topics, plain, 5)

    if kind == "sticky":
        verify_rack_assignment(a, TOPICS, 1, racks(3), racks(3), topics, rf1, 4, OWNED)
        a.prefer_rack_aware_logic = False
        verify_rack_assignment(a, TOPICS, 3, racks(3), racks(3), topics, plain, 0, OWNED)
        a.prefer_rack_aware_logic = True
        verify_rack_assignment(a, TOPICS, 3, racks(3), racks(3), topics, plain, 0, OWNED)
    else:
        intermediate = ["t1-3", "t2-1", "t3-1"]
        verify_rack_assignment(a, TOPICS, 1, racks(3), racks(3), topics, intermediate, 0, OWNED)
        verify_rack_assignment(a, TOPICS, 1, racks(3), racks(3), topics, rf1, 4, intermediate)
        final = [
            "t1-2, t1-3, t1-4, t2-4, t2-5",
            "t2-0, t2-1, t2-2, t2-3, t2-6",
            "t1-0, t1-1, t1-5, t3-0, t3-1",
        ]
        intermediate = ["t1-2, t1-3, t1-4", "t2-0, t2-1, t2-2, t2-3", "t3-0, t3-1"]
        for prefer in (False, True):
            a.prefer_rack_aware_logic = prefer
            verify_rack_assignment(a, TOPICS, 3, racks(3), racks(3), topics, intermediate, 0, OWNED)
            verify_rack_assignment(a, TOPICS, 3, racks(3), racks(3), topics, final, 0, intermediate)
