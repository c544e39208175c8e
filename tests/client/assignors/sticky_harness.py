"""Java's AbstractStickyAssignorTest machinery, for ``sticky`` and ``cooperative-sticky``.

``Harness.v2`` builds a subscription as a v2+ member sends it (owned partitions and
generation; the eager ``sticky`` assignor also gets them in its user data), and
``settle`` is Java's ``verifyValidityAndBalance``: for the cooperative assignor it first
runs the follow-up rebalances a revocation triggers (checking that no partition is given
to a new owner in the round it is revoked), then checks the final assignment.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.client.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    GroupMetadata,
    StickyAssignor,
    Subscription,
    TopicPartition,
)
from odradek.client.assignors.sticky import _AbstractStickyAssignor
from odradek.client.assignors.wire import encode_sticky_user_data

GENERATION = 1
KINDS = ["sticky", "cooperative-sticky"]


class Harness:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.assignor: _AbstractStickyAssignor = (
            StickyAssignor() if kind == "sticky" else CooperativeStickyAssignor()
        )

    @property
    def cooperative(self) -> bool:
        return self.kind == "cooperative-sticky"

    def v2(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int = GENERATION
    ) -> Subscription:
        if self.cooperative:
            user_data = self.assignor.subscription_user_data(set(topics))
        else:
            user_data = encode_sticky_user_data(owned, generation)
        return Subscription(tuple(topics), user_data, tuple(owned), generation)

    def v1(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> Subscription:
        if self.cooperative:
            self.assignor.on_assignment(
                Assignment(list(owned)), GroupMetadata("group", generation, "consumer1")
            )
            user_data = self.assignor.subscription_user_data(set(topics))
            return Subscription(tuple(topics), user_data, tuple(owned))
        return Subscription(tuple(topics), encode_sticky_user_data(owned, generation), tuple(owned))

    def v0(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> Subscription:
        assert not self.cooperative, "cooperative-sticky needs subscription v1+"
        return Subscription(tuple(topics), encode_sticky_user_data(owned, generation))

    def assign(
        self, partitions: dict[str, int], subs: dict[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        result = self.assignor.assign(partitions, subs)
        return {m: list(a.partitions) for m, a in result.items()}

    @property
    def transferring(self) -> dict[TopicPartition, str] | None:
        assert self.assignor.last_result is not None
        return self.assignor.last_result.transferring

    def settle(
        self,
        subs: dict[str, Subscription],
        assignment: dict[str, list[TopicPartition]],
        partitions: dict[str, int],
    ) -> dict[str, list[TopicPartition]]:
        if self.cooperative:
            for _ in range(5):
                if not revocations(subs, assignment):
                    break
                for member, parts in assignment.items():
                    subs[member] = self.v2(subs[member].topics, parts)
                assignment = self.assign(partitions, subs)
            else:
                raise AssertionError("cooperative assignment did not settle in 4 rebalances")
        verify_validity_and_balance(subs, assignment)
        return assignment


def revocations(subs: dict[str, Subscription], assignment: dict[str, list[TopicPartition]]) -> bool:
    """True if some member loses a partition; asserts none is given away in the same round."""
    added: set[TopicPartition] = set()
    revoked: set[TopicPartition] = set()
    for member, parts in assignment.items():
        owned = set(subs[member].owned_partitions)
        added |= set(parts) - owned
        revoked |= owned - set(parts)
    assert not (added & revoked), f"assigned while being revoked: {added & revoked}"
    return bool(revoked)


def verify_validity_and_balance(
    subs: dict[str, Subscription], assignment: dict[str, list[TopicPartition]]
) -> None:
    """Java's check: subscribed topics only, no partition twice, and two members whose
    counts differ by 2+ share no topic (else a partition could have moved)."""
    assert set(subs) == set(assignment)
    members = sorted(assignment)
    for i, member in enumerate(members):
        mine = assignment[member]
        assert all(tp.topic in subs[member].topics for tp in mine), (member, mine)
        for other in members[i + 1 :]:
            theirs = assignment[other]
            assert not set(mine) & set(theirs), (member, other)
            if abs(len(mine) - len(theirs)) <= 1:
                continue
            assert not {tp.topic for tp in mine} & {tp.topic for tp in theirs}, (member, other)


def is_fully_balanced(assignment: dict[str, list[TopicPartition]]) -> bool:
    sizes = [len(p) for p in assignment.values()]
    return not sizes or max(sizes) - min(sizes) <= 1


def canonical(prefix: str, i: int, max_num: int) -> str:
    """Java's getTopicName/getConsumerName: zero-padded to the width of ``max_num``."""
    return f"{prefix}{i:0{len(str(max_num))}d}"
