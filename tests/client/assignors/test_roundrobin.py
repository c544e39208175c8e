"""``roundrobin``: scenarios and expected assignments from Kafka's RoundRobinAssignorTest.java
(compared as lists: Java asserts the order too)."""

from __future__ import annotations

from odradek.client.assignors import RoundRobinAssignor, Subscription

from .helpers import tp


def assign(partitions: dict[str, int], subs: dict[str, Subscription]) -> dict:
    result = RoundRobinAssignor().assign(partitions, subs)
    return {m: a.partitions for m, a in result.items()}


def sub(*topics: str, instance: str | None = None) -> Subscription:
    return Subscription(topics, group_instance_id=instance)


def test_one_consumer_no_topic() -> None:
    assert assign({}, {"consumer": sub()}) == {"consumer": []}


def test_one_consumer_nonexistent_topic() -> None:
    assert assign({}, {"consumer": sub("topic")}) == {"consumer": []}


def test_one_consumer_one_topic() -> None:
    got = assign({"topic": 3}, {"consumer": sub("topic")})
    assert got == {"consumer": [tp("topic", 0), tp("topic", 1), tp("topic", 2)]}


def test_only_assigns_partitions_from_subscribed_topics() -> None:
    got = assign({"topic": 3, "other": 3}, {"consumer": sub("topic")})
    assert got == {"consumer": [tp("topic", 0), tp("topic", 1), tp("topic", 2)]}


def test_one_consumer_multiple_topics() -> None:
    got = assign({"topic1": 1, "topic2": 2}, {"consumer": sub("topic1", "topic2")})
    assert got == {"consumer": [tp("topic1", 0), tp("topic2", 0), tp("topic2", 1)]}


def test_two_consumers_one_topic_one_partition() -> None:
    got = assign({"topic": 1}, {"consumer1": sub("topic"), "consumer2": sub("topic")})
    assert got == {"consumer1": [tp("topic", 0)], "consumer2": []}


def test_two_consumers_one_topic_two_partitions() -> None:
    got = assign({"topic": 2}, {"consumer1": sub("topic"), "consumer2": sub("topic")})
    assert got == {"consumer1": [tp("topic", 0)], "consumer2": [tp("topic", 1)]}


def test_multiple_consumers_mixed_topics() -> None:
    subs = {
        "consumer1": sub("topic1"),
        "consumer2": sub("topic1", "topic2"),
        "consumer3": sub("topic1"),
    }
    assert assign({"topic1": 3, "topic2": 2}, subs) == {
        "consumer1": [tp("topic1", 0)],
        "consumer2": [tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)],
        "consumer3": [tp("topic1", 2)],
    }


def test_two_dynamic_consumers_two_topics_six_partitions() -> None:
    subs = {"consumer1": sub("topic1", "topic2"), "consumer2": sub("topic1", "topic2")}
    assert assign({"topic1": 3, "topic2": 3}, subs) == {
        "consumer1": [tp("topic1", 0), tp("topic1", 2), tp("topic2", 1)],
        "consumer2": [tp("topic1", 1), tp("topic2", 0), tp("topic2", 2)],
    }


def test_two_static_consumers_two_topics_six_partitions() -> None:
    subs = {
        "consumer-b": sub("topic1", "topic2", instance="instance1"),
        "consumer-a": sub("topic1", "topic2", instance="instance2"),
    }
    assert assign({"topic1": 3, "topic2": 3}, subs) == {
        "consumer-b": [tp("topic1", 0), tp("topic1", 2), tp("topic2", 1)],
        "consumer-a": [tp("topic1", 1), tp("topic2", 0), tp("topic2", 2)],
    }


def test_one_static_consumer_and_one_dynamic_consumer() -> None:
    subs = {
        "consumer-b": sub("topic1", "topic2", instance="instance1"),
        "consumer-a": sub("topic1", "topic2"),
    }
    assert assign({"topic1": 3, "topic2": 3}, subs) == {
        "consumer-b": [tp("topic1", 0), tp("topic1", 2), tp("topic2", 1)],
        "consumer-a": [tp("topic1", 1), tp("topic2", 0), tp("topic2", 2)],
    }


def test_static_member_round_robin_assignment_persistent() -> None:
    subs = {f"consumer{i}": sub("topic1", "topic2", instance=f"instance{i}") for i in (1, 2, 3)}
    subs["consumer4"] = sub("topic1", "topic2")
    expected = {
        "consumer1": [tp("topic1", 0), tp("topic2", 1)],
        "consumer2": [tp("topic1", 1), tp("topic2", 2)],
        "consumer3": [tp("topic1", 2)],
        "consumer4": [tp("topic2", 0)],
    }
    assert assign({"topic1": 3, "topic2": 3}, subs) == expected
    del subs["consumer4"]
    subs["consumer5"] = sub("topic1", "topic2")
    expected["consumer5"] = expected.pop("consumer4")
    assert assign({"topic1": 3, "topic2": 3}, subs) == expected


def test_static_member_assignment_persistent_after_member_id_changes() -> None:
    subs = {f"consumer{i}": sub("topic1", "topic2", instance=f"instance{i}") for i in (1, 2, 3)}

    def by_instance() -> dict:
        got = assign({"topic1": 5, "topic2": 5}, subs)
        return {subs[m].group_instance_id: parts for m, parts in got.items()}

    first = by_instance()
    assert first == {
        "instance1": [tp("topic1", 0), tp("topic1", 3), tp("topic2", 1), tp("topic2", 4)],
        "instance2": [tp("topic1", 1), tp("topic1", 4), tp("topic2", 2)],
        "instance3": [tp("topic1", 2), tp("topic2", 0), tp("topic2", 3)],
    }
    subs["consumer4"] = subs.pop("consumer3")
    subs["consumer5"] = subs.pop("consumer2")
    assert by_instance() == first
