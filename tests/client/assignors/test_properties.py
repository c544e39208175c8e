"""Properties every built-in assignor keeps, checked on generated groups (hypothesis)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client.assignors import (
    BUILTIN_ASSIGNORS,
    Subscription,
    TopicPartition,
    assignor_for,
)
from odradek.client.assignors.java_order import hashmap_order, partition_hash, string_hash

from .sticky_harness import Harness, revocations, verify_validity_and_balance

TOPICS = ["t0", "t1", "t2", "t3"]


@st.composite
def groups(draw: st.DrawFn, equal: bool = False) -> tuple[dict[str, int], dict[str, Subscription]]:
    cluster = {
        t: draw(st.integers(1, 8))
        for t in draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
    }
    names = draw(
        st.lists(st.from_regex(r"[a-e]{1,3}", fullmatch=True), min_size=1, max_size=6, unique=True)
    )
    shared = tuple(draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)))
    subs = {}
    for name in names:
        topics = shared if equal else tuple(draw(st.lists(st.sampled_from(TOPICS), unique=True)))
        instance = draw(st.none() | st.sampled_from(["i1", "i2", "i3", "i4"]))
        subs[name] = Subscription(topics, group_instance_id=instance)
    return cluster, subs


def expected_partitions(
    cluster: dict[str, int], subs: dict[str, Subscription]
) -> set[TopicPartition]:
    wanted = {t for s in subs.values() for t in s.topics}
    return {TopicPartition(t, p) for t, n in cluster.items() if t in wanted for p in range(n)}


def check_valid(cluster: dict[str, int], subs: dict[str, Subscription], result: dict) -> None:
    assert set(result) == set(subs)
    seen: list[TopicPartition] = []
    for member, assignment in result.items():
        assert all(tp.topic in subs[member].topics for tp in assignment.partitions)
        seen.extend(assignment.partitions)
    assert len(seen) == len(set(seen)), "a partition was assigned twice"
    assert set(seen) == expected_partitions(cluster, subs)


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(sorted(BUILTIN_ASSIGNORS)))
def test_every_subscribed_partition_assigned_once_to_a_subscriber(group, name: str) -> None:
    cluster, subs = group
    check_valid(cluster, subs, assignor_for(name).assign(cluster, subs))


@settings(max_examples=100, deadline=None)
@given(groups(), st.sampled_from(sorted(BUILTIN_ASSIGNORS)), st.randoms(use_true_random=False))
def test_result_does_not_depend_on_input_order(group, name: str, rnd: random.Random) -> None:
    cluster, subs = group
    items = list(subs.items())
    rnd.shuffle(items)
    first = assignor_for(name).assign(cluster, subs)
    again = assignor_for(name).assign(dict(reversed(list(cluster.items()))), dict(items))
    assert first == again


@settings(max_examples=150, deadline=None)
@given(groups(equal=True), st.sampled_from(["roundrobin", "sticky", "cooperative-sticky"]))
def test_balanced_when_all_subscribe_to_the_same_topics(group, name: str) -> None:
    cluster, subs = group
    sizes = [len(a.partitions) for a in assignor_for(name).assign(cluster, subs).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(groups())
def test_range_balances_each_topic_among_its_subscribers(group) -> None:
    cluster, subs = group
    result = assignor_for("range").assign(cluster, subs)
    for topic in cluster:
        counts = [
            sum(1 for tp in result[m].partitions if tp.topic == topic)
            for m, s in subs.items()
            if topic in s.topics
        ]
        if counts:
            assert max(counts) - min(counts) <= 1


@settings(max_examples=100, deadline=None)
@given(groups(), st.sampled_from(["sticky", "cooperative-sticky"]))
def test_sticky_no_partition_could_move_to_a_member_with_two_fewer(group, kind: str) -> None:
    cluster, subs = group
    h = Harness(kind)
    got = h.assign(cluster, subs)
    verify_validity_and_balance(subs, got)


@settings(max_examples=100, deadline=None)
@given(groups(), st.sampled_from(["sticky", "cooperative-sticky"]))
def test_sticky_assignment_is_a_fixed_point(group, kind: str) -> None:
    """Members that already own a balanced assignment keep exactly it."""
    cluster, subs = group
    h = Harness(kind)
    got = h.settle(subs, h.assign(cluster, subs), cluster)
    subs = {m: h.v2(s.topics, got[m]) for m, s in subs.items()}
    again = h.assign(cluster, subs)
    assert {m: set(p) for m, p in again.items()} == {m: set(p) for m, p in got.items()}


@settings(max_examples=100, deadline=None)
@given(groups(equal=True), st.sampled_from(["sticky", "cooperative-sticky"]), st.data())
def test_sticky_members_keep_their_partitions_when_one_leaves(group, kind: str, data) -> None:
    cluster, subs = group
    if len(subs) < 2:
        return
    h = Harness(kind)
    got = h.settle(subs, h.assign(cluster, subs), cluster)
    leaver = data.draw(st.sampled_from(sorted(subs)))
    subs = {m: h.v2(s.topics, got[m]) for m, s in subs.items() if m != leaver}
    after = h.assign(cluster, subs)
    for member in subs:
        assert set(got[member]) <= set(after[member])


@settings(max_examples=150, deadline=None)
@given(groups(), groups(), st.sampled_from(sorted(BUILTIN_ASSIGNORS)))
def test_cooperative_never_gives_a_partition_away_in_the_round_it_is_revoked(
    before, after, previous_assignor: str
) -> None:
    """Whatever members owned (here: another assignor's result on another group), the
    cooperative assignor's result never hands a revoked partition to a new owner, and
    follow-up rebalances reach a valid assignment."""
    cluster, old_subs = before
    owned = assignor_for(previous_assignor).assign(cluster, old_subs)
    cluster2, new_subs = after
    h = Harness("cooperative-sticky")
    subs = {
        m: h.v2(s.topics, owned[m].partitions if m in owned else []) for m, s in new_subs.items()
    }
    got = h.assign(cluster2, subs)
    revocations(subs, got)  # asserts added & revoked is empty
    final = h.settle(subs, got, cluster2)
    check_valid(cluster2, subs, {m: type("A", (), {"partitions": p}) for m, p in final.items()})


def test_java_hash_codes() -> None:
    assert string_hash("hello") == 99162322
    assert string_hash("polygenelubricants") == -(2**31)
    assert string_hash("") == 0
    # TopicPartition("t", 0): 31 * (31 + 0) + "t".hashCode()
    assert partition_hash(TopicPartition("t", 0)) == 31 * 31 + ord("t")


def test_hashmap_order_follows_buckets_not_names() -> None:
    # "Aa" and "BB" share a hash code, so they keep insertion order within their bucket.
    assert string_hash("Aa") == string_hash("BB")
    assert hashmap_order(["BB", "Aa"], string_hash) == ["BB", "Aa"]
    keys = [f"consumer{i}" for i in range(1, 5)]
    order = hashmap_order(keys, string_hash)
    assert sorted(order) == keys
    # spread(h) & 15 picks the bucket for a 16-slot table
    buckets = [
        ((string_hash(k) & 0xFFFFFFFF) ^ ((string_hash(k) & 0xFFFFFFFF) >> 16)) & 15 for k in order
    ]
    assert buckets == sorted(buckets)


@st.composite
def racked_groups(draw: st.DrawFn, equal: bool = False):
    cluster, subs = draw(groups(equal=equal))
    rack = st.sampled_from(["a", "b", "c"])
    subs = {
        m: Subscription(
            s.topics, rack_id=draw(st.none() | rack), group_instance_id=s.group_instance_id
        )
        for m, s in subs.items()
    }
    replicas = {
        TopicPartition(t, p): draw(st.frozensets(rack, max_size=2))
        for t, n in cluster.items()
        for p in range(n)
    }
    return cluster, subs, replicas


@settings(max_examples=150, deadline=None)
@given(racked_groups(), st.sampled_from(sorted(BUILTIN_ASSIGNORS)), st.booleans())
def test_racks_never_break_validity(group, name: str, prefer: bool) -> None:
    cluster, subs, replicas = group
    assignor = assignor_for(name)
    assignor.prefer_rack_aware_logic = prefer
    check_valid(cluster, subs, assignor.assign(cluster, subs, partition_racks=replicas))


@settings(max_examples=100, deadline=None)
@given(racked_groups(equal=True), st.sampled_from(["roundrobin", "sticky", "cooperative-sticky"]))
def test_racks_never_break_balance(group, name: str) -> None:
    cluster, subs, replicas = group
    result = assignor_for(name).assign(cluster, subs, partition_racks=replicas)
    sizes = [len(a.partitions) for a in result.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(racked_groups(), st.sampled_from(sorted(BUILTIN_ASSIGNORS)))
def test_cooperative_with_racks_never_gives_away_a_partition_being_revoked(
    group, previous: str
) -> None:
    cluster, subs, replicas = group
    owned = assignor_for(previous).assign(cluster, subs)  # ignores racks: some misaligned
    h = Harness("cooperative-sticky")
    subs = {
        m: Subscription(s.topics, None, tuple(owned[m].partitions), 1, s.rack_id)
        for m, s in subs.items()
    }
    result = h.assignor.assign(cluster, subs, partition_racks=replicas)
    revocations(subs, {m: a.partitions for m, a in result.items()})
