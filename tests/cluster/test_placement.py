"""Replica placement against Kafka's AdminRackAwareTest vectors (fixed start indexes),
and the distribution properties its RackAwareTest checks, over many random topics."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from odradek.cluster.metadata import MetadataError
from odradek.cluster.placement import (
    BrokerRack,
    assign_replicas_to_brokers,
    rack_alternated_broker_list,
    validate_manual_assignment,
)

RACKS_6 = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}


def with_racks(racks: dict[int, str]) -> list[BrokerRack]:
    return [BrokerRack(b, r) for b, r in sorted(racks.items())]


def test_rack_alternated_broker_list() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    del racks[5]
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 4, 2]


def test_rack_aware_vector() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas_to_brokers(
        with_racks(racks), 7, 3, fixed_start_index=0, start_partition_id=0
    )
    assert got == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


def test_rack_unaware_vector() -> None:
    brokers = [BrokerRack(b) for b in range(5)]
    assert assign_replicas_to_brokers(brokers, 10, 3, fixed_start_index=0) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


@pytest.mark.parametrize("rf", [0, 6])
def test_bad_replication_factor(rf: int) -> None:
    with pytest.raises(MetadataError) as info:
        assign_replicas_to_brokers([BrokerRack(b) for b in range(5)], 10, rf)
    assert info.value.error_name == "INVALID_REPLICATION_FACTOR"


def test_some_brokers_without_rack_is_refused() -> None:
    with pytest.raises(MetadataError, match="Not all brokers have rack information"):
        assign_replicas_to_brokers([BrokerRack(0, "a"), BrokerRack(1)], 2, 2)


def check_distribution(
    assignment: dict[int, list[int]],
    racks: dict[int, str],
    rf: int,
    *,
    leaders_even: bool = True,
    replicas_even: bool = True,
) -> None:
    """RackAwareTest.checkReplicaDistribution: every partition on min(rf, racks) racks,
    and (when the numbers divide) the same leader and replica count on every broker."""
    num_racks = len(set(racks.values()))
    for replicas in assignment.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert len({racks[b] for b in replicas}) == min(rf, num_racks)
    if leaders_even:
        leaders = Counter(replicas[0] for replicas in assignment.values())
        assert set(leaders.values()) == {len(assignment) // len(racks)}
        assert set(leaders) == set(racks)
    if replicas_even:
        counts = Counter(b for replicas in assignment.values() for b in replicas)
        assert set(counts.values()) == {len(assignment) * rf // len(racks)}


@pytest.mark.parametrize(
    ("racks", "partitions", "rf", "start"),
    [
        (RACKS_6, 6, 3, 2),
        (RACKS_6, 6, 3, -1),
        (RACKS_6, 12, 2, -1),
        (RACKS_6, 6, 2, -1),
        ({0: "rack1", 1: "rack2", 4: "rack3"}, 3, 2, -1),
        (
            {
                0: "rack1",
                1: "rack2",
                2: "rack2",
                3: "rack3",
                4: "rack3",
                5: "rack1",
                6: "rack1",
                7: "rack2",
                8: "rack2",
                9: "rack3",
                10: "rack1",
                11: "rack3",
            },
            96,
            3,
            -1,
        ),
    ],
)
def test_rack_aware_distribution(
    racks: dict[int, str], partitions: int, rf: int, start: int
) -> None:
    assignment = assign_replicas_to_brokers(
        with_racks(racks), partitions, rf, fixed_start_index=start
    )
    check_distribution(assignment, racks, rf)


def test_rack_expansion_from_partition_12() -> None:
    racks = {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}
    assignment = assign_replicas_to_brokers(with_racks(racks), 12, 2, start_partition_id=12)
    assert sorted(assignment) == list(range(12, 24))
    check_distribution(assignment, racks, 2)


def test_more_replicas_than_racks() -> None:
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    assignment = assign_replicas_to_brokers(with_racks(racks), 6, 5)
    check_distribution(assignment, racks, 5, leaders_even=False, replicas_even=False)


def test_single_rack_spreads_leaders() -> None:
    racks = dict.fromkeys(range(6), "rack1")
    assignment = assign_replicas_to_brokers(with_racks(racks), 6, 3)
    check_distribution(assignment, racks, 3, replicas_even=True)


def test_spread_over_many_topics() -> None:
    """Random start and shift per topic: over many small topics every broker leads and
    holds about the same share (what the random start is for)."""
    rng = random.Random(7)
    brokers = [BrokerRack(b) for b in range(5)]
    leaders: Counter[int] = Counter()
    replicas: Counter[int] = Counter()
    for _ in range(2000):
        for partition_replicas in assign_replicas_to_brokers(brokers, 1, 3, rng=rng).values():
            leaders[partition_replicas[0]] += 1
            replicas.update(partition_replicas)
            assert len(set(partition_replicas)) == 3
    assert set(leaders) == set(range(5))
    assert max(leaders.values()) - min(leaders.values()) < 0.2 * 400
    assert max(replicas.values()) - min(replicas.values()) < 0.2 * 1200


@pytest.mark.parametrize(
    ("assignment", "fragment"),
    [
        ({0: [1, 2], 1: [2, 9]}, "includes broker 9"),
        ({0: [1, 1]}, "Duplicate replica assignment"),
        ({0: [1, 2], 1: [2]}, "same number of replicas"),
        ({1: [1, 2]}, "consecutive"),
    ],
)
def test_manual_assignment_is_validated(assignment: dict[int, list[int]], fragment: str) -> None:
    with pytest.raises(MetadataError, match=fragment) as info:
        validate_manual_assignment(assignment, {1, 2, 3})
    assert info.value.error_name == "INVALID_REPLICA_ASSIGNMENT"


def test_manual_assignment_accepted() -> None:
    validate_manual_assignment({0: [1, 2], 1: [2, 3]}, {1, 2, 3})
