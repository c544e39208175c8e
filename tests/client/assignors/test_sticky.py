"""``sticky`` and ``cooperative-sticky``: scenarios and expectations from Kafka's
AbstractStickyAssignorTest.java (run for both, as Java does), StickyAssignorTest.java and
CooperativeStickyAssignorTest.java. Java compares some lists in order; assignments here
are sorted, so they are compared as sets."""

from __future__ import annotations

import pytest

from odradek.client.assignors import Assignment, GroupMetadata, Subscription, TopicPartition
from odradek.client.assignors.base import DEFAULT_GENERATION
from odradek.client.assignors.wire import encode_sticky_user_data

from .helpers import null_racks, racks, tp, verify_rack_assignment
from .sticky_harness import (
    GENERATION,
    KINDS,
    Harness,
    canonical,
    is_fully_balanced,
    verify_validity_and_balance,
)

T, T1, T2, T3 = "topic", "topic1", "topic2", "topic3"
C1, C2, C3, C4 = "consumer1", "consumer2", "consumer3", "consumer4"


@pytest.fixture(params=KINDS)
def h(request: pytest.FixtureRequest) -> Harness:
    return Harness(request.param)


def sets(assignment: dict) -> dict:
    return {m: set(p) for m, p in assignment.items()}


def test_one_consumer_no_topic(h: Harness) -> None:
    subs = {"consumer": Subscription(())}
    assert h.assign({}, subs) == {"consumer": []}
    assert h.transferring == {}


def test_one_consumer_nonexistent_topic(h: Harness) -> None:
    subs = {"consumer": Subscription((T,))}
    assert h.assign({T: 0}, subs) == {"consumer": []}
    assert h.transferring == {}


def test_one_consumer_multiple_topics(h: Harness) -> None:
    got = h.assign({T1: 1, T2: 2}, {"consumer": Subscription((T1, T2))})
    assert sets(got) == {"consumer": {tp(T1, 0), tp(T2, 0), tp(T2, 1)}}


def test_two_consumers_one_topic_two_partitions(h: Harness) -> None:
    subs = {C1: Subscription((T,)), C2: Subscription((T,))}
    got = h.assign({T: 2}, subs)
    assert sets(got) == {C1: {tp(T, 0)}, C2: {tp(T, 1)}}
    assert h.transferring == {}
    assert is_fully_balanced(h.settle(subs, got, {T: 2}))


def test_multiple_consumers_mixed_topic_subscriptions(h: Harness) -> None:
    partitions = {T1: 3, T2: 2}
    subs = {C1: Subscription((T1,)), C2: Subscription((T1, T2)), C3: Subscription((T1,))}
    got = h.assign(partitions, subs)
    assert sets(got) == {C1: {tp(T1, 0), tp(T1, 2)}, C2: {tp(T2, 0), tp(T2, 1)}, C3: {tp(T1, 1)}}
    assert h.transferring is None  # the general algorithm ran
    h.settle(subs, got, partitions)


def test_two_consumers_two_topics_six_partitions(h: Harness) -> None:
    subs = {C1: Subscription((T1, T2)), C2: Subscription((T1, T2))}
    got = h.assign({T1: 3, T2: 3}, subs)
    assert sets(got) == {
        C1: {tp(T1, 0), tp(T1, 2), tp(T2, 1)},
        C2: {tp(T1, 1), tp(T2, 0), tp(T2, 2)},
    }


def test_consumer_owning_min_quota_expected_max_quota(h: Harness) -> None:
    partitions = {T1: 2, T2: 3}
    both = (T1, T2)
    subs = {C1: h.v2(both, [tp(T1, 0), tp(T2, 1)]), C2: h.v2(both, [tp(T1, 1), tp(T2, 2)])}
    got = h.assign(partitions, subs)
    assert sets(got) == {C1: {tp(T1, 0), tp(T2, 1), tp(T2, 0)}, C2: {tp(T1, 1), tp(T2, 2)}}
    assert h.transferring == {}
    assert is_fully_balanced(h.settle(subs, got, partitions))


def test_max_quota_consumer_more_than_num_expected_max_capacity_members(h: Harness) -> None:
    partitions = {T1: 2, T2: 2}
    both = (T1, T2)
    subs = {
        C1: h.v2(both, [tp(T1, 0), tp(T2, 0)]),
        C2: h.v2(both, [tp(T1, 1), tp(T2, 1)]),
        C3: h.v2(both, []),
    }
    got = h.assign(partitions, subs)
    assert h.transferring == {tp(T2, 0): C3}
    got = h.settle(subs, got, partitions)
    assert sets(got) == {C1: {tp(T1, 0)}, C2: {tp(T1, 1), tp(T2, 1)}, C3: {tp(T2, 0)}}


def test_all_consumers_are_under_min_quota(h: Harness) -> None:
    partitions = {T1: 2, T2: 3}
    both = (T1, T2)
    subs = {C1: h.v2(both, [tp(T1, 0)]), C2: h.v2(both, [tp(T1, 1)]), C3: h.v2(both, [])}
    got = h.assign(partitions, subs)
    assert h.transferring == {}
    got = h.settle(subs, got, partitions)
    assert sets(got) == {C1: {tp(T1, 0), tp(T2, 1)}, C2: {tp(T1, 1), tp(T2, 2)}, C3: {tp(T2, 0)}}


def test_add_remove_consumer_one_topic(h: Harness) -> None:
    partitions = {T: 3}
    subs = {C1: Subscription((T,))}
    got = h.assign(partitions, subs)
    assert sets(got) == {C1: {tp(T, 0), tp(T, 1), tp(T, 2)}}

    subs = {C1: h.v2((T,), got[C1]), C2: h.v2((T,), [])}
    got = h.assign(partitions, subs)
    assert h.transferring == {tp(T, 2): C2}
    got = h.settle(subs, got, partitions)
    assert sets(got) == {C1: {tp(T, 0), tp(T, 1)}, C2: {tp(T, 2)}}

    subs = {C2: h.v2((T,), got[C2])}
    got = h.assign(partitions, subs)
    assert sets(got) == {C2: {tp(T, 0), tp(T, 1), tp(T, 2)}}
    assert h.transferring == {}


def test_topic_balance_after_reassignment(h: Harness) -> None:
    partitions = {T1: 12, T2: 12}
    both = (T1, T2)

    def per_topic(assignment: dict, topic: str) -> set[int]:
        return {sum(1 for p in parts if p.topic == topic) for parts in assignment.values()}

    subs = {C1: Subscription(both)}
    got = h.assign(partitions, subs)
    assert per_topic(got, T1) == per_topic(got, T2) == {12}
    subs = {C1: h.v2(both, got[C1]), C2: h.v2(both, [])}
    got = h.settle(subs, h.assign(partitions, subs), partitions)
    assert per_topic(got, T1) == per_topic(got, T2) == {6}
    subs = {
        C1: h.v2(both, got[C1]),
        C2: h.v2(both, got[C2]),
        C3: h.v2(both, []),
        C4: h.v2(both, []),
    }
    got = h.settle(subs, h.assign(partitions, subs), partitions)
    assert per_topic(got, T1) == per_topic(got, T2) == {3}
    subs = {C3: h.v2(both, got[C3]), C4: h.v2(both, got[C4])}
    got = h.assign(partitions, subs)
    assert h.transferring == {}
    got = h.settle(subs, got, partitions)
    assert per_topic(got, T1) == per_topic(got, T2) == {6}


def test_add_remove_two_consumers_two_topics(h: Harness) -> None:
    partitions = {T1: 3, T2: 4}
    both = (T1, T2)
    subs = {C1: Subscription(both), C2: Subscription(both)}
    got = h.assign(partitions, subs)
    assert sets(got) == {
        C1: {tp(T1, 0), tp(T1, 2), tp(T2, 1), tp(T2, 3)},
        C2: {tp(T1, 1), tp(T2, 0), tp(T2, 2)},
    }
    subs = {
        C1: h.v2(both, got[C1]),
        C2: h.v2(both, got[C2]),
        C3: h.v2(both, []),
        C4: h.v2(both, []),
    }
    got = h.assign(partitions, subs)
    assert h.transferring == {tp(T1, 2): C3, tp(T2, 3): C3, tp(T2, 2): C4}
    got = h.settle(subs, got, partitions)
    assert sets(got) == {
        C1: {tp(T1, 0), tp(T2, 1)},
        C2: {tp(T2, 0), tp(T1, 1)},
        C3: {tp(T1, 2), tp(T2, 3)},
        C4: {tp(T2, 2)},
    }
    subs = {C3: h.v2(both, got[C3]), C4: h.v2(both, got[C4])}
    got = h.assign(partitions, subs)
    assert sets(got) == {
        C3: {tp(T1, 2), tp(T2, 3), tp(T1, 0), tp(T2, 1)},
        C4: {tp(T2, 2), tp(T1, 1), tp(T2, 0)},
    }
    assert h.transferring == {}


def test_poor_round_robin_assignment_scenario(h: Harness) -> None:
    partitions = {f"topic{i}": (i % 2) + 1 for i in range(1, 6)}
    every = tuple(partitions)
    some = ("topic1", "topic3", "topic5")
    subs = {
        C1: Subscription(every),
        C2: Subscription(some),
        C3: Subscription(some),
        C4: Subscription(every),
    }
    h.settle(subs, h.assign(partitions, subs), partitions)


def test_add_remove_topic_two_consumers(h: Harness) -> None:
    partitions = {T: 3}
    subs = {C1: Subscription((T,)), C2: Subscription((T,))}
    first = h.assign(partitions, subs)
    assert sorted(len(p) for p in first.values()) == [1, 2]

    partitions[T2] = 3
    subs = {C1: h.v2((T, T2), first[C1]), C2: h.v2((T, T2), first[C2])}
    second = h.assign(partitions, subs)
    assert h.transferring == {}
    second = h.settle(subs, second, partitions)
    assert [len(second[C1]), len(second[C2])] == [3, 3]
    assert set(first[C1]) <= set(second[C1]) and set(first[C2]) <= set(second[C2])

    del partitions[T]
    subs = {C1: h.v2((T2,), second[C1]), C2: h.v2((T2,), second[C2])}
    third = h.assign(partitions, subs)
    assert h.transferring == {}
    assert sorted(len(p) for p in third.values()) == [1, 2]
    assert set(third[C1]) <= set(second[C1]) and set(third[C2]) <= set(second[C2])


def test_reassignment_after_one_consumer_leaves(h: Harness) -> None:
    partitions = {canonical("t", i, 20): i for i in range(1, 20)}
    subs = {
        canonical("c", i, 20): Subscription(tuple(canonical("t", j, 20) for j in range(1, i + 1)))
        for i in range(1, 20)
    }
    got = h.settle(subs, h.assign(partitions, subs), partitions)
    subs = {m: h.v2(s.topics, got[m]) for m, s in subs.items()}
    del subs["c10"]
    h.settle(subs, h.assign(partitions, subs), partitions)
    assert h.assignor.is_sticky()


def test_same_subscriptions(h: Harness) -> None:
    partitions = {canonical("t", i, 15): i for i in range(1, 15)}
    every = tuple(partitions)
    subs = {canonical("c", i, 9): Subscription(every) for i in range(1, 9)}
    got = h.assign(partitions, subs)
    assert h.transferring == {}
    got = h.settle(subs, got, partitions)
    subs = {m: h.v2(every, got[m]) for m in subs}
    del subs[canonical("c", 5, 9)]
    got = h.assign(partitions, subs)
    assert h.transferring == {}
    h.settle(subs, got, partitions)


def test_move_existing_assignments(h: Harness) -> None:
    partitions = {f"topic{i}": 1 for i in range(1, 7)}
    subs = {
        C1: h.v2(("topic1", "topic2"), [tp("topic1", 0)]),
        C2: h.v2(("topic1", "topic2", "topic3", "topic4"), [tp("topic2", 0), tp("topic3", 0)]),
        C3: h.v2(
            ("topic2", "topic3", "topic4", "topic5", "topic6"),
            [tp("topic4", 0), tp("topic5", 0), tp("topic6", 0)],
        ),
    }
    got = h.assign(partitions, subs)
    assert h.transferring is None
    h.settle(subs, got, partitions)


def test_stickiness(h: Harness) -> None:
    partitions = {T1: 3}
    subs = {c: Subscription((T1,)) for c in (C1, C2, C3, C4)}
    got = h.assign(partitions, subs)
    assert h.transferring == {}
    got = h.settle(subs, got, partitions)
    before = {m: p[0] for m, p in got.items() if p}
    assert all(len(p) <= 1 for p in got.values())
    subs = {c: h.v2((T1,), got[c]) for c in (C2, C3, C4)}
    got = h.assign(partitions, subs)
    assert h.transferring == {}
    got = h.settle(subs, got, partitions)
    for member, parts in got.items():
        assert len(parts) == 1
        assert member not in before or before[member] in parts


def test_assignment_updated_for_deleted_topic(h: Harness) -> None:
    got = h.assign({T1: 1, T3: 100}, {"consumer": Subscription((T1, T2, T3))})
    assert h.transferring == {}
    assert list(got) == ["consumer"] and len(got["consumer"]) == 101


def test_no_exception_thrown_when_only_subscribed_topic_deleted(h: Harness) -> None:
    got = h.assign({T: 3}, {"consumer": Subscription((T,))})
    subs = {"consumer": h.v2((T,), got["consumer"])}
    assert h.assign({}, subs) == {"consumer": []}
    assert h.transferring == {}


def test_all_consumers_reach_expected_quota_and_are_considered_filled(h: Harness) -> None:
    partitions = {T: 4}
    subs = {C1: h.v2((T,), [tp(T, 0), tp(T, 1)]), C2: h.v2((T,), [tp(T, 2)]), C3: h.v2((T,), [])}
    got = h.assign(partitions, subs)
    assert sets(got) == {C1: {tp(T, 0), tp(T, 1)}, C2: {tp(T, 2)}, C3: {tp(T, 3)}}
    assert h.transferring == {}


@pytest.mark.parametrize("stale", [9, DEFAULT_GENERATION])
def test_owned_partitions_invalidated_for_consumer_with_stale_or_no_generation(
    h: Harness, stale: int
) -> None:
    partitions = {T: 3, T2: 3}
    claimed = [tp(T, 0), tp(T, 2), tp(T2, 1)]
    subs = {C1: h.v2((T, T2), claimed, 10), C2: h.v2((T, T2), claimed, stale)}
    got = h.assign(partitions, subs)
    assert sets(got) == {C1: set(claimed), C2: {tp(T, 1), tp(T2, 0), tp(T2, 2)}}
    assert h.transferring == {}


def test_partition_claimed_by_multiple_consumers_in_same_generation(h: Harness) -> None:
    partitions = {T: 3}
    subs = {
        C1: h.v2((T,), [tp(T, 0), tp(T, 1)]),
        C2: h.v2((T,), [tp(T, 0), tp(T, 2)]),
        C3: h.v2((T,), []),
    }
    got = h.assign(partitions, subs)
    assert h.transferring == {tp(T, 0): C3}
    if h.cooperative:
        # topic-0 counts as owned: nobody gets it until both claimants have revoked it
        assert sets(got) == {C1: {tp(T, 1)}, C2: {tp(T, 2)}, C3: set()}
    else:
        assert sets(got) == {C1: {tp(T, 1)}, C2: {tp(T, 2)}, C3: {tp(T, 0)}}
    got = h.settle(subs, got, partitions)
    assert sets(got) == {C1: {tp(T, 1)}, C2: {tp(T, 2)}, C3: {tp(T, 0)}}


def test_claimed_by_multiple_consumers_with_unequal_partitions_per_consumer(h: Harness) -> None:
    partitions = {T: 4}
    subs = {
        C1: h.v2((T,), [tp(T, 0), tp(T, 1)]),
        C2: h.v2((T,), [tp(T, 0), tp(T, 2)]),
        C3: h.v2((T,), []),
    }
    got = h.assign(partitions, subs)
    c3 = set() if h.cooperative else {tp(T, 0)}
    assert sets(got) == {C1: {tp(T, 1), tp(T, 3)}, C2: {tp(T, 2)}, C3: c3}


def test_ensure_partitions_assigned_to_highest_generation(h: Harness) -> None:
    partitions = {T: 3, T2: 3, T3: 3}
    every = (T, T2, T3)
    subs = {
        C1: h.v2(every, [tp(T, 0), tp(T2, 0), tp(T3, 0)], 10),
        C2: h.v2(every, [tp(T, 1), tp(T2, 1), tp(T3, 1)], 9),
        C3: h.v2(every, [tp(T2, 1), tp(T3, 0), tp(T3, 2)], 8),
    }
    got = h.assign(partitions, subs)
    assert sets(got) == {
        C1: {tp(T, 0), tp(T2, 0), tp(T3, 0)},
        C2: {tp(T, 1), tp(T2, 1), tp(T3, 1)},
        C3: {tp(T, 2), tp(T2, 2), tp(T3, 2)},
    }
    assert h.transferring == {}


def test_no_reassignment_on_current_members(h: Harness) -> None:
    partitions = {T: 3, T1: 3, T2: 3, T3: 3}
    every = (T, T2, T3, T1)
    subs = {
        C1: h.v2(every, [], DEFAULT_GENERATION),
        C2: h.v2(every, [tp(T, 0), tp(T2, 0), tp(T1, 0)], 9),
        C3: h.v2(every, [tp(T3, 2), tp(T2, 2), tp(T1, 1)], 8),
        C4: h.v2(every, [tp(T3, 1), tp(T, 1), tp(T, 2)], 7),
    }
    got = h.assign(partitions, subs)
    assert set(got[C1]) == {tp(T1, 2), tp(T2, 1), tp(T3, 0)}
    assert h.transferring == {}
    assert is_fully_balanced(h.settle(subs, got, partitions))


def test_owned_partitions_invalidated_for_consumer_with_multiple_generation(h: Harness) -> None:
    partitions = {T: 3, T2: 3}
    subs = {
        C1: h.v2((T, T2), [tp(T, 0), tp(T2, 1), tp(T, 1)], 10),
        C2: h.v2((T, T2), [tp(T, 0), tp(T2, 1), tp(T2, 2)], 8),
    }
    got = h.assign(partitions, subs)
    assert sets(got) == {
        C1: {tp(T, 0), tp(T2, 1), tp(T, 1)},
        C2: {tp(T, 2), tp(T2, 2), tp(T2, 0)},
    }
    assert h.transferring == {}


def test_uniform_subscription_without_racks(h: Harness) -> None:
    # testRackAwareAssignmentWithUniformSubscription, configurations without usable racks
    partitions = {"t1": 6, "t2": 7, "t3": 2}
    subs = {f"consumer{i}": Subscription(("t1", "t2", "t3")) for i in range(3)}
    got = h.assign(partitions, subs)
    as_text = [", ".join(sorted(f"{p.topic}-{p.partition}" for p in got[m])) for m in sorted(got)]
    assert as_text == [
        "t1-0, t1-3, t2-0, t2-3, t2-6",
        "t1-1, t1-4, t2-1, t2-4, t3-0",
        "t1-2, t1-5, t2-2, t2-5, t3-1",
    ]


# ------------------------------------------------------------------ StickyAssignorTest


def test_sticky_member_data_honours_user_data() -> None:
    h = Harness("sticky")
    owned = [tp(T1, 0), tp(T2, 1)]
    sub = Subscription((T,), h.v2((T,), owned, GENERATION - 1).user_data, (), GENERATION)
    data = h.assignor.member_data(sub)
    assert list(data.partitions) == owned and data.generation == GENERATION - 1


def test_sticky_member_data_with_inconsistent_data() -> None:
    h = Harness("sticky")
    h.assignor.on_assignment(Assignment([tp(T, 1)]), GroupMetadata("group", GENERATION, C1))
    user_data = h.assignor.subscription_user_data({T})
    data = h.assignor.member_data(Subscription((T,), user_data, (tp(T, 0),)))
    assert list(data.partitions) == [tp(T, 1)] and data.generation == GENERATION


@pytest.mark.parametrize("all_equal", [True, False])
def test_sticky_assignment_with_conflicting_previous_generations(all_equal: bool) -> None:
    h = Harness("sticky")
    partitions = {T: 4, T2: 4, T3: 4}
    every = (T, T2, T3)
    c1_topics = every if all_equal else (T,)
    c2_topics = every if all_equal else (T, T2)
    tps = {(t, p): tp(t, p) for t in every for p in range(4)}
    c1 = (
        [tps[T, 0], tps[T, 1], tps[T, 2], tps[T2, 2], tps[T2, 3], tps[T3, 0]]
        if all_equal
        else [tps[T, 0], tps[T, 1], tps[T, 2], tps[T, 3]]
    )
    c2 = [tps[T, 0], tps[T, 1], tps[T2, 0], tps[T2, 1], tps[T2, 2], tps[T2, 3]]
    c3 = [tps[T, 2], tps[T, 3], tps[T3, 0], tps[T3, 1], tps[T3, 2], tps[T3, 3]]
    subs = {C1: h.v2(c1_topics, c1, 1), C2: h.v2(c2_topics, c2, 2), C3: h.v2(every, c3, 2)}
    got = h.assign(partitions, subs)
    assert [len(got[c]) for c in (C1, C2, C3)] == [4, 4, 4]
    assert set(got[C2]) <= set(c2) and set(got[C3]) <= set(c3)
    verify_validity_and_balance(subs, got)


def test_sticky_schema_backward_compatibility() -> None:
    # consumer2 sends StickyAssignorUserData v0: its previous assignment, no generation
    h = Harness("sticky")
    subs = {
        C1: h.v2((T,), [tp(T, 0), tp(T, 2)], 1),
        C2: Subscription((T,), encode_sticky_user_data([tp(T, 1)])),
        C3: Subscription((T,)),
    }
    got = h.assign({T: 3}, subs)
    assert [len(got[c]) for c in (C1, C2, C3)] == [1, 1, 1]
    assert set(got[C1]) <= {tp(T, 0), tp(T, 2)} and set(got[C2]) <= {tp(T, 1)}


def test_sticky_assignor_with_old_version_subscriptions() -> None:
    h = Harness("sticky")
    subs = {
        C1: h.v0((T1,), [tp(T1, 0)], GENERATION),
        C2: h.v1((T1,), [tp(T1, 1)], GENERATION),
        C3: h.v2((T1,), []),
    }
    got = h.assign({T1: 3}, subs)
    assert sets(got) == {C1: {tp(T1, 0)}, C2: {tp(T1, 1)}, C3: {tp(T1, 2)}}


# --------------------------------------------------------- CooperativeStickyAssignorTest


def test_cooperative_encode_and_decode_generation() -> None:
    h = Harness("cooperative-sticky")
    sub = Subscription((T,), h.assignor.subscription_user_data({T}))
    assert h.assignor.member_data(sub).generation == DEFAULT_GENERATION
    h.assignor.on_assignment(Assignment([]), GroupMetadata("dummy-group-id", 10, "dummy-member-id"))
    sub = Subscription((T,), h.assignor.subscription_user_data({T}))
    assert h.assignor.member_data(sub).generation == 10


def test_cooperative_decode_generation_absent() -> None:
    assert Harness("cooperative-sticky").assignor.member_data(Subscription((T,))).generation is None


def test_cooperative_member_data_prefers_subscription_fields() -> None:
    h = Harness("cooperative-sticky")
    h.assignor.on_assignment(Assignment([tp(T, 1)]), GroupMetadata("group", GENERATION, C1))
    user_data = h.assignor.subscription_user_data({T})
    data = h.assignor.member_data(Subscription((T,), user_data, (tp(T, 0),)))
    assert list(data.partitions) == [tp(T, 0)] and data.generation == GENERATION
    for in_user_data in (GENERATION, GENERATION - 1):
        h.assignor.on_assignment(Assignment([]), GroupMetadata("group", in_user_data, C1))
        sub = Subscription((T,), h.assignor.subscription_user_data({T}), (), GENERATION)
        data = h.assignor.member_data(sub)
        assert list(data.partitions) == [] and data.generation == GENERATION


def test_cooperative_assignor_with_old_version_subscriptions() -> None:
    h = Harness("cooperative-sticky")
    subs = {
        C1: h.v1((T1,), [tp(T1, 0)], GENERATION),
        C2: h.v1((T1,), [tp(T1, 1)], GENERATION),
        C3: h.v2((T1,), []),
    }
    got = h.assign({T1: 3}, subs)
    assert sets(got) == {C1: {tp(T1, 0)}, C2: {tp(T1, 1)}, C3: {tp(T1, 2)}}
    assert is_fully_balanced(h.settle(subs, got, {T1: 3}))


def test_cooperative_withholds_moving_partitions_then_hands_them_over() -> None:
    # KIP-429: the partition moving to the new member is left out of the first round.
    h = Harness("cooperative-sticky")
    partitions = {T: 3}
    subs = {C1: h.v2((T,), [tp(T, 0), tp(T, 1), tp(T, 2)]), C2: h.v2((T,), [])}
    first = h.assign(partitions, subs)
    assert sets(first) == {C1: {tp(T, 0), tp(T, 1)}, C2: set()}
    subs = {C1: h.v2((T,), first[C1]), C2: h.v2((T,), first[C2])}
    second = h.assign(partitions, subs)
    assert sets(second) == {C1: {tp(T, 0), tp(T, 1)}, C2: {tp(T, 2)}}


def test_owned_partition_beyond_the_topics_partition_count_is_dropped(h: Harness) -> None:
    # The topic was re-created with fewer partitions: t0-1 no longer exists.
    subs = {"a": h.v2(("t0",), [TopicPartition("t0", 1)]), "aa": h.v2((), [])}
    got = h.assign({"t0": 1}, subs)
    assert got == {"a": [TopicPartition("t0", 0)], "aa": []}


# Vectors of testRackAwareAssignmentWith{Uniform,NonEqual}Subscription in the
# configurations where racks cannot be used (no broker racks, no consumer racks, or no
# common rack), each run without and then with the expected assignment as owned partitions
# (Java's verifyUniformSubscription / verifyNonEqualSubscription).
RACKLESS = [
    (null_racks(3), racks(3)),
    (racks(3), null_racks(3)),
    (racks(3), ["d", "e", "f"]),
    (racks(3), [None, "e", "f"]),
]


@pytest.mark.parametrize(("broker_racks", "consumer_racks"), RACKLESS)
@pytest.mark.parametrize("kind", KINDS)
def test_uniform_subscription_vectors(kind: str, broker_racks, consumer_racks) -> None:
    every = ["t1", "t2", "t3"]
    expected = [
        "t1-0, t1-3, t2-0, t2-3, t2-6",
        "t1-1, t1-4, t2-1, t2-4, t3-0",
        "t1-2, t1-5, t2-2, t2-5, t3-1",
    ]
    for owned in ((), expected):
        verify_rack_assignment(
            Harness(kind).assignor, {"t1": 6, "t2": 7, "t3": 2}, 3, broker_racks,
            consumer_racks, [every] * 3, expected, -1, owned,
        )  # fmt: skip


@pytest.mark.parametrize(("broker_racks", "consumer_racks"), RACKLESS)
@pytest.mark.parametrize("kind", KINDS)
def test_non_equal_subscription_vectors(kind: str, broker_racks, consumer_racks) -> None:
    every = ["t1", "t2", "t3"]
    expected = [
        "t1-5, t2-0, t2-2, t2-4, t2-6",
        "t1-3, t2-1, t2-3, t2-5, t3-0",
        "t1-0, t1-1, t1-2, t1-4, t3-1",
    ]
    for owned in ((), expected):
        verify_rack_assignment(
            Harness(kind).assignor, {"t1": 6, "t2": 7, "t3": 2}, 3, broker_racks,
            consumer_racks, [every, every, ["t1", "t3"]], expected, -1, owned,
        )  # fmt: skip
