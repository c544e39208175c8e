# ruff: noqa: E501  (expected assignments are kept on one line each, as in the Java tests)
"""``range``: scenarios and expected assignments from Kafka's RangeAssignorTest.java.

The parametrised tests run each scenario under Java's three rack configurations (no
broker racks, no consumer racks, both) with ``preferRackAwareLogic`` on, as Java does:
racks are aligned with consumer order there, so the results must not change.
"""

from __future__ import annotations

import pytest

from odradek.client.assignors import RangeAssignor, Subscription
from odradek.client.assignors.range import use_rack_aware_assignment

from .helpers import (
    ALL_RACKS,
    assignment_sets,
    null_racks,
    racks,
    tp,
    verify_rack_assignment,
)

RACK_CONFIGS = ["NO_BROKER_RACK", "NO_CONSUMER_RACK", "BROKER_AND_CONSUMER_RACK"]


class JavaRackSetup:
    """Java's initializeRacks + subscription(topics, consumerIndex) + partitionInfos."""

    def __init__(self, config: str, max_consumers: int = 3) -> None:
        self.replication_factor = max_consumers
        self.num_broker_racks = max_consumers if config != "NO_BROKER_RACK" else 0
        self.has_consumer_rack = config != "NO_CONSUMER_RACK"
        self.assignor = RangeAssignor(prefer_rack_aware_logic=True)

    def sub(self, topics: list[str], index: int, instance: str | None = None) -> Subscription:
        n = self.num_broker_racks if self.num_broker_racks > 0 else len(ALL_RACKS)
        rack = ALL_RACKS[index % n] if self.has_consumer_rack else None
        return Subscription(tuple(topics), rack_id=rack, group_instance_id=instance)

    def cluster(self, partitions: dict[str, int]) -> dict:
        rf = self.replication_factor
        nbr = self.num_broker_racks
        brokers = rf if nbr <= 0 else nbr * rf
        broker_racks = [None if nbr <= 0 else ALL_RACKS[i % nbr] for i in range(brokers)]
        out = {}
        for topic, count in partitions.items():
            for i in range(count):
                rs = {broker_racks[(i + j) % brokers] for j in range(rf)}
                out[tp(topic, i)] = {r for r in rs if r is not None}
        return out

    def assign(self, partitions: dict[str, int], subs: dict[str, Subscription]) -> dict:
        result = self.assignor.assign(partitions, subs, partition_racks=self.cluster(partitions))
        return assignment_sets(result)


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_one_consumer_no_topic(config: str) -> None:
    s = JavaRackSetup(config)
    assert s.assign({}, {"consumer1": s.sub([], 0)}) == {"consumer1": set()}


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_one_consumer_nonexistent_topic(config: str) -> None:
    s = JavaRackSetup(config)
    assert s.assign({}, {"consumer1": s.sub(["topic1"], 0)}) == {"consumer1": set()}


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_one_consumer_one_topic(config: str) -> None:
    s = JavaRackSetup(config)
    got = s.assign({"topic1": 3}, {"consumer1": s.sub(["topic1"], 0)})
    assert got == {"consumer1": {tp("topic1", 0), tp("topic1", 1), tp("topic1", 2)}}


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_only_assigns_partitions_from_subscribed_topics(config: str) -> None:
    s = JavaRackSetup(config)
    got = s.assign({"topic1": 3, "other": 3}, {"consumer1": s.sub(["topic1"], 0)})
    assert got == {"consumer1": {tp("topic1", 0), tp("topic1", 1), tp("topic1", 2)}}


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_one_consumer_multiple_topics(config: str) -> None:
    s = JavaRackSetup(config)
    got = s.assign({"topic1": 1, "topic2": 2}, {"consumer1": s.sub(["topic1", "topic2"], 0)})
    assert got == {"consumer1": {tp("topic1", 0), tp("topic2", 0), tp("topic2", 1)}}


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_two_consumers_one_topic_one_partition(config: str) -> None:
    s = JavaRackSetup(config)
    subs = {"consumer1": s.sub(["topic1"], 0), "consumer2": s.sub(["topic1"], 1)}
    assert s.assign({"topic1": 1}, subs) == {"consumer1": {tp("topic1", 0)}, "consumer2": set()}


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_two_consumers_one_topic_two_partitions(config: str) -> None:
    s = JavaRackSetup(config)
    subs = {"consumer1": s.sub(["topic1"], 0), "consumer2": s.sub(["topic1"], 1)}
    assert s.assign({"topic1": 2}, subs) == {
        "consumer1": {tp("topic1", 0)},
        "consumer2": {tp("topic1", 1)},
    }


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_multiple_consumers_mixed_topics(config: str) -> None:
    s = JavaRackSetup(config)
    subs = {
        "consumer1": s.sub(["topic1"], 0),
        "consumer2": s.sub(["topic1", "topic2"], 1),
        "consumer3": s.sub(["topic1"], 2),
    }
    assert s.assign({"topic1": 3, "topic2": 2}, subs) == {
        "consumer1": {tp("topic1", 0)},
        "consumer2": {tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)},
        "consumer3": {tp("topic1", 2)},
    }


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_two_consumers_two_topics_six_partitions(config: str) -> None:
    s = JavaRackSetup(config)
    both = ["topic1", "topic2"]
    subs = {"consumer1": s.sub(both, 0), "consumer2": s.sub(both, 1)}
    assert s.assign({"topic1": 3, "topic2": 3}, subs) == {
        "consumer1": {tp("topic1", 0), tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)},
        "consumer2": {tp("topic1", 2), tp("topic2", 2)},
    }


@pytest.mark.parametrize("config", RACK_CONFIGS)
@pytest.mark.parametrize("high_instance", ["instance2", None])
def test_static_consumer_ordered_by_instance_id(config: str, high_instance: str | None) -> None:
    # consumer-a sorts before consumer-b, but a static member goes first, and two static
    # members compare by instance id.
    s = JavaRackSetup(config)
    both = ["topic1", "topic2"]
    subs = {
        "consumer-b": s.sub(both, 0, instance="instance1"),
        "consumer-a": s.sub(both, 1, instance=high_instance),
    }
    assert s.assign({"topic1": 3, "topic2": 3}, subs) == {
        "consumer-b": {tp("topic1", 0), tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)},
        "consumer-a": {tp("topic1", 2), tp("topic2", 2)},
    }


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_static_member_range_assignment_persistent(config: str) -> None:
    s = JavaRackSetup(config, max_consumers=5)
    both = ["topic1", "topic2"]
    subs = {f"consumer{i + 1}": s.sub(both, i, instance=f"instance{i + 1}") for i in range(3)}
    subs["consumer4"] = s.sub(both, 3)
    expected = {
        "consumer1": {tp("topic1", 0), tp("topic1", 1), tp("topic2", 0)},
        "consumer2": {tp("topic1", 2), tp("topic2", 1)},
        "consumer3": {tp("topic1", 3), tp("topic2", 2)},
        "consumer4": {tp("topic1", 4), tp("topic2", 3)},
    }
    assert s.assign({"topic1": 5, "topic2": 4}, subs) == expected
    del subs["consumer4"]
    subs["consumer5"] = s.sub(both, 4)
    expected["consumer5"] = expected.pop("consumer4")
    assert s.assign({"topic1": 5, "topic2": 4}, subs) == expected


@pytest.mark.parametrize("config", RACK_CONFIGS)
def test_static_member_assignment_persistent_after_member_id_changes(config: str) -> None:
    s = JavaRackSetup(config)
    both = ["topic1", "topic2"]
    subs = {f"consumer{i + 1}": s.sub(both, i, instance=f"instance{i + 1}") for i in range(3)}

    def by_instance(assigned: dict) -> dict:
        return {subs[m].group_instance_id: parts for m, parts in assigned.items()}

    first = by_instance(s.assign({"topic1": 5, "topic2": 5}, subs))
    assert first == {
        "instance1": {tp("topic1", 0), tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)},
        "instance2": {tp("topic1", 2), tp("topic1", 3), tp("topic2", 2), tp("topic2", 3)},
        "instance3": {tp("topic1", 4), tp("topic2", 4)},
    }
    subs["consumer4"] = subs.pop("consumer3")
    subs["consumer5"] = subs.pop("consumer2")
    assert by_instance(s.assign({"topic1": 5, "topic2": 5}, subs)) == first


# ---------------------------------------------------------------- rack-aware (KIP-881)


def verify_non_rack_aware(topics: dict, consumer_topics: list, expected: list) -> None:
    """Java's verifyNonRackAwareAssignment: rack-awareness off or without effect."""
    a = RangeAssignor()
    verify_rack_assignment(a, topics, 3, null_racks(3), racks(3), consumer_topics, expected, -1)
    verify_rack_assignment(a, topics, 3, racks(3), null_racks(3), consumer_topics, expected, -1)
    verify_rack_assignment(a, topics, 3, racks(3), racks(3), consumer_topics, expected, 0)
    verify_rack_assignment(a, topics, 4, racks(4), racks(3), consumer_topics, expected, 0)
    verify_rack_assignment(a, topics, 3, racks(3), ["d", "e", "f"], consumer_topics, expected, -1)
    verify_rack_assignment(a, topics, 3, racks(3), [None, "e", "f"], consumer_topics, expected, -1)
    a.prefer_rack_aware_logic = True
    verify_rack_assignment(a, topics, 3, racks(3), racks(3), consumer_topics, expected, 0)


def test_rack_aware_assignment_with_uniform_subscription() -> None:
    topics = {"t1": 6, "t2": 7, "t3": 2}
    every = ["t1", "t2", "t3"]
    consumer_topics = [every, every, every]
    verify_non_rack_aware(
        topics,
        consumer_topics,
        [
            "t1-0, t1-1, t2-0, t2-1, t2-2, t3-0",
            "t1-2, t1-3, t2-3, t2-4, t3-1",
            "t1-4, t1-5, t2-5, t2-6",
        ],
    )
    a = RangeAssignor()
    verify_rack_assignment(
        a, topics, 1, racks(3), racks(3), consumer_topics,
        ["t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0", "t1-2, t1-5, t2-2, t2-5, t3-1"],
        0,
    )  # fmt: skip
    verify_rack_assignment(
        a, topics, 2, racks(3), racks(3), consumer_topics,
        ["t1-0, t1-2, t2-0, t2-2, t2-3, t3-1", "t1-1, t1-3, t2-1, t2-4, t3-0", "t1-4, t1-5, t2-5, t2-6"],
        1,
    )  # fmt: skip
    verify_rack_assignment(
        a, topics, 3, racks(2), racks(3), consumer_topics,
        ["t1-0, t1-1, t2-0, t2-1, t2-2, t3-0", "t1-2, t1-3, t2-3, t2-4, t3-1", "t1-4, t1-5, t2-5, t2-6"],
        4,
    )  # fmt: skip


def test_rack_aware_assignment_with_non_equal_subscription() -> None:
    topics = {"t1": 6, "t2": 7, "t3": 2}
    every = ["t1", "t2", "t3"]
    consumer_topics = [every, every, ["t1", "t3"]]
    verify_non_rack_aware(
        topics,
        consumer_topics,
        [
            "t1-0, t1-1, t2-0, t2-1, t2-2, t2-3, t3-0",
            "t1-2, t1-3, t2-4, t2-5, t2-6, t3-1",
            "t1-4, t1-5",
        ],
    )
    a = RangeAssignor()
    verify_rack_assignment(
        a, topics, 1, racks(3), racks(3), consumer_topics,
        ["t1-0, t1-3, t2-0, t2-2, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t2-5, t3-0", "t1-2, t1-5, t3-1"],
        2,
    )  # fmt: skip
    verify_rack_assignment(
        a, topics, 2, racks(3), racks(3), consumer_topics,
        ["t1-0, t1-2, t2-0, t2-2, t2-3, t2-5, t3-1", "t1-1, t1-3, t2-1, t2-4, t2-6, t3-0", "t1-4, t1-5"],
        0,
    )  # fmt: skip
    verify_rack_assignment(
        a, topics, 3, racks(2), racks(3), consumer_topics,
        ["t1-0, t1-1, t2-0, t2-1, t2-2, t2-3, t3-0", "t1-2, t1-3, t2-4, t2-5, t2-6, t3-1", "t1-4, t1-5"],
        2,
    )  # fmt: skip


def test_rack_aware_assignment_with_uniform_partitions() -> None:
    topics = {"t1": 5, "t2": 5, "t3": 5}
    every = ["t1", "t2", "t3"]
    consumer_topics = [every, every, every]
    plain = [
        "t1-0, t1-1, t2-0, t2-1, t3-0, t3-1",
        "t1-2, t1-3, t2-2, t2-3, t3-2, t3-3",
        "t1-4, t2-4, t3-4",
    ]
    verify_non_rack_aware(topics, consumer_topics, plain)
    a = RangeAssignor()
    # co-partitioning wins over rack alignment
    verify_rack_assignment(a, topics, 1, racks(3), racks(3), consumer_topics, plain, 10)
    verify_rack_assignment(a, topics, 2, racks(3), racks(3), consumer_topics, plain, 5)
    verify_rack_assignment(a, topics, 3, racks(2), racks(3), consumer_topics, plain, 3)


def test_rack_aware_assignment_with_uniform_partitions_non_equal_subscription() -> None:
    topics = {"t1": 5, "t2": 5, "t3": 5}
    every = ["t1", "t2", "t3"]
    consumer_topics = [every, every, ["t1", "t3"]]
    verify_non_rack_aware(
        topics,
        consumer_topics,
        [
            "t1-0, t1-1, t2-0, t2-1, t2-2, t3-0, t3-1",
            "t1-2, t1-3, t2-3, t2-4, t3-2, t3-3",
            "t1-4, t3-4",
        ],
    )
    a = RangeAssignor()
    verify_rack_assignment(
        a, topics, 1, racks(3), racks(3), consumer_topics,
        ["t1-0, t1-1, t2-0, t2-1, t2-4, t3-0, t3-1", "t1-2, t1-3, t2-2, t2-3, t3-2, t3-3", "t1-4, t3-4"],
        9,
    )  # fmt: skip
    verify_rack_assignment(
        a, topics, 2, racks(3), racks(3), consumer_topics,
        ["t1-2, t2-0, t2-1, t2-3, t3-2", "t1-0, t1-3, t2-2, t2-4, t3-0, t3-3", "t1-1, t1-4, t3-1, t3-4"],
        0,
    )  # fmt: skip
    verify_rack_assignment(
        a, topics, 3, racks(2), racks(3), consumer_topics,
        ["t1-0, t1-1, t2-0, t2-1, t2-2, t3-0, t3-1", "t1-2, t1-3, t2-3, t2-4, t3-2, t3-3", "t1-4, t3-4"],
        2,
    )  # fmt: skip


def test_rack_aware_assignment_with_co_partitioning() -> None:
    topics = {"t1": 6, "t2": 6, "t3": 2, "t4": 2}
    consumer_topics = [["t1", "t2"], ["t1", "t2"], ["t3", "t4"], ["t3", "t4"]]
    consumer_racks = ["a", "b", "b", "a"]
    plain = [
        "t1-0, t1-1, t1-2, t2-0, t2-1, t2-2",
        "t1-3, t1-4, t1-5, t2-3, t2-4, t2-5",
        "t3-0, t4-0",
        "t3-1, t4-1",
    ]
    a = RangeAssignor()
    verify_rack_assignment(a, topics, 3, racks(2), consumer_racks, consumer_topics, plain, -1)
    verify_rack_assignment(a, topics, 2, racks(2), consumer_racks, consumer_topics, plain, 0)
    verify_rack_assignment(
        a, topics, 1, racks(2), consumer_racks, consumer_topics,
        ["t1-0, t1-2, t1-4, t2-0, t2-2, t2-4", "t1-1, t1-3, t1-5, t2-1, t2-3, t2-5", "t3-1, t4-1", "t3-0, t4-0"],
        0,
    )  # fmt: skip

    every = ["t1", "t2", "t3", "t4"]
    consumer_topics = [every] * 4
    plain = [
        "t1-0, t1-1, t2-0, t2-1, t3-0, t4-0",
        "t1-2, t1-3, t2-2, t2-3, t3-1, t4-1",
        "t1-4, t2-4",
        "t1-5, t2-5",
    ]
    verify_rack_assignment(a, topics, 3, racks(2), consumer_racks, consumer_topics, plain, -1)
    verify_rack_assignment(a, topics, 2, racks(2), consumer_racks, consumer_topics, plain, 0)
    verify_rack_assignment(
        a, topics, 1, racks(2), consumer_racks, consumer_topics,
        ["t1-0, t1-2, t2-0, t2-2, t3-0, t4-0", "t1-1, t1-3, t2-1, t2-3, t3-1, t4-1", "t1-5, t2-5", "t1-4, t2-4"],
        0,
    )  # fmt: skip
    verify_rack_assignment(
        a, topics, 1, racks(3), consumer_racks, consumer_topics,
        ["t1-0, t1-3, t2-0, t2-3, t3-0, t4-0", "t1-1, t1-4, t2-1, t2-4, t3-1, t4-1", "t1-2, t2-2", "t1-5, t2-5"],
        6,
    )  # fmt: skip


def test_co_partitioned_assignment_with_same_subscription() -> None:
    topics = {"t1": 6, "t2": 6, "t3": 2, "t4": 2, "t5": 4, "t6": 4}
    topic_list = ["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"]
    consumer_topics = [topic_list] * 3
    consumer_racks = ["a", "b", "c"]
    plain = [
        "t1-0, t1-1, t2-0, t2-1, t3-0, t4-0, t5-0, t5-1, t6-0, t6-1",
        "t1-2, t1-3, t2-2, t2-3, t3-1, t4-1, t5-2, t6-2",
        "t1-4, t1-5, t2-4, t2-5, t5-3, t6-3",
    ]
    a = RangeAssignor()
    verify_rack_assignment(a, topics, 3, null_racks(3), consumer_racks, consumer_topics, plain, -1)
    a.prefer_rack_aware_logic = True
    verify_rack_assignment(a, topics, 3, racks(3), consumer_racks, consumer_topics, plain, 0)
    rack_aware = [
        "t1-0, t1-2, t2-0, t2-2, t3-0, t4-0, t5-1, t6-1",
        "t1-1, t1-3, t2-1, t2-3, t3-1, t4-1, t5-2, t6-2",
        "t1-4, t1-5, t2-4, t2-5, t5-0, t5-3, t6-0, t6-3",
    ]
    verify_rack_assignment(a, topics, 2, racks(3), consumer_racks, consumer_topics, rack_aware, 0)


def test_use_rack_aware_assignment_rule() -> None:
    every = {"a", "b", "c"}
    two = {"a", "b"}
    on_all = {tp("topic", i): frozenset(every) for i in range(10)}
    on_subset = {tp("topic", i): frozenset({"abc"[i % 3]}) for i in range(10)}
    for prefer in (False, True):
        assert not use_rack_aware_assignment(set(), set(), on_all, prefer)
        assert not use_rack_aware_assignment(set(), every, on_all, prefer)
        assert not use_rack_aware_assignment(every, set(), {}, prefer)
        assert not use_rack_aware_assignment({"d"}, every, on_all, prefer)
        assert use_rack_aware_assignment(every, every, on_subset, prefer)
        assert use_rack_aware_assignment(two, every, on_subset, prefer)
    assert not use_rack_aware_assignment(every, every, on_all)
    assert not use_rack_aware_assignment(two, every, on_all)
    assert not use_rack_aware_assignment({"a", "d"}, every, on_all)
    assert use_rack_aware_assignment({"a", "d"}, every, on_subset)
    assert use_rack_aware_assignment(every, every, on_all, True)
    assert use_rack_aware_assignment(two, every, on_all, True)
