"""``sticky`` and ``cooperative-sticky``: balanced assignments that move as little as possible.

* ``sticky`` (Java's ``StickyAssignor``) runs the eager protocol: members give up everything
  before rejoining, so each carries its previous assignment and generation in its
  subscription's user data (``StickyAssignorUserData`` v1) for the leader to stay close to.
* ``cooperative-sticky`` (Java's ``CooperativeStickyAssignor``, KIP-429) runs the cooperative
  protocol: members keep their partitions and report them as ``owned_partitions``. A partition
  that must move to another member is left out of everyone's assignment in this round; its
  owner sees it missing, revokes it and rejoins, and the next rebalance gives it to the new
  owner. Consumption of partitions that stay put never stops.

The algorithm itself is in :mod:`odradek.client.assignors.sticky_core`.
"""

from __future__ import annotations

from collections.abc import Collection

from odradek.client.assignors.base import (
    DEFAULT_GENERATION,
    AbstractPartitionAssignor,
    Assignment,
    GroupMetadata,
    RebalanceProtocol,
    Subscription,
    TopicPartition,
)
from odradek.client.assignors.sticky_core import MemberData, StickyResult, sticky_assign
from odradek.client.assignors.wire import (
    ConsumerProtocolError,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
)

__all__ = ["CooperativeStickyAssignor", "StickyAssignor"]


class _AbstractStickyAssignor(AbstractPartitionAssignor):
    def __init__(self, *, prefer_rack_aware_logic: bool = False) -> None:
        self.last_result: StickyResult | None = None
        # Java's test switch: rack-aware passes even when every partition is on every rack.
        self.prefer_rack_aware_logic = prefer_rack_aware_logic

    def member_data(self, subscription: Subscription) -> MemberData:
        raise NotImplementedError

    def is_sticky(self) -> bool:
        """After :meth:`assign`: no partition of a topic moved both ways between two members
        (Java's ``isSticky``, used by its tests)."""
        result = self.last_result
        return result is None or result.movements is None or result.movements.is_sticky()

    def assign_partitions(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        partition_racks: dict[TopicPartition, frozenset[str]],
    ) -> dict[str, list[TopicPartition]]:
        data = {m: self.member_data(s) for m, s in subscriptions.items()}
        self.last_result = sticky_assign(
            partitions_per_topic, subscriptions, data, partition_racks, self.prefer_rack_aware_logic
        )
        return self.last_result.assignment


class StickyAssignor(_AbstractStickyAssignor):
    name = "sticky"

    def __init__(self, *, prefer_rack_aware_logic: bool = False) -> None:
        super().__init__(prefer_rack_aware_logic=prefer_rack_aware_logic)
        self._member_assignment: list[TopicPartition] | None = None
        self._generation = DEFAULT_GENERATION

    def on_assignment(self, assignment: Assignment, metadata: GroupMetadata) -> None:
        self._member_assignment = list(assignment.partitions)
        self._generation = metadata.generation_id

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        if self._member_assignment is None:
            return None
        return encode_sticky_user_data(self._member_assignment, self._generation)

    def member_data(self, subscription: Subscription) -> MemberData:
        # Eager members revoke everything before joining: what they owned is in user data.
        if not subscription.user_data:
            return MemberData((), None)
        try:
            partitions, generation = decode_sticky_user_data(subscription.user_data)
        except ConsumerProtocolError:
            return MemberData((), DEFAULT_GENERATION)  # unreadable: ignored, as in Java
        return MemberData(tuple(partitions), generation)


class CooperativeStickyAssignor(_AbstractStickyAssignor):
    name = "cooperative-sticky"

    def __init__(self, *, prefer_rack_aware_logic: bool = False) -> None:
        super().__init__(prefer_rack_aware_logic=prefer_rack_aware_logic)
        self._generation = DEFAULT_GENERATION

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]:
        return (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def on_assignment(self, assignment: Assignment, metadata: GroupMetadata) -> None:
        self._generation = metadata.generation_id

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        return encode_cooperative_user_data(self._generation)

    def member_data(self, subscription: Subscription) -> MemberData:
        owned = subscription.owned_partitions
        if subscription.generation is not None:  # subscription v2+ carries it directly
            return MemberData(owned, subscription.generation)
        if subscription.user_data is None:
            return MemberData(owned, None)
        try:
            return MemberData(owned, decode_cooperative_user_data(subscription.user_data))
        except ConsumerProtocolError:
            return MemberData(owned, DEFAULT_GENERATION)

    def assign_partitions(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        partition_racks: dict[TopicPartition, frozenset[str]],
    ) -> dict[str, list[TopicPartition]]:
        assignment = super().assign_partitions(partitions_per_topic, subscriptions, partition_racks)
        transferring = self.last_result.transferring if self.last_result else None
        if transferring is None:
            transferring = _transferring(subscriptions, assignment)
        for tp, new_owner in transferring.items():
            # Withheld this round: the current owner must revoke it first.
            if tp in assignment[new_owner]:
                assignment[new_owner].remove(tp)
        return assignment


def _transferring(
    subscriptions: dict[str, Subscription], assignment: dict[str, list[TopicPartition]]
) -> dict[TopicPartition, str]:
    """Partitions newly given to a member that another member owned and now loses."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for member, partitions in assignment.items():
        owned = set(subscriptions[member].owned_partitions)
        assigned = set(partitions)
        added.update((tp, member) for tp in partitions if tp not in owned)
        revoked.update(tp for tp in owned if tp not in assigned)
    return {tp: member for tp, member in added.items() if tp in revoked}
