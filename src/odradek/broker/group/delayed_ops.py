"""The group coordinator's waits, as purgatory operations on the shared timing wheel.

* :class:`DelayedJoin` -- a rebalance's join phase: completes as soon as every member has
  (re)joined, or after the group's rebalance timeout (the longest of its members').
* :class:`InitialDelayedJoin` -- the first rebalance of an empty group waits
  ``group.initial.rebalance.delay.ms`` so a fleet of starting consumers lands in one
  generation; every member that arrives meanwhile extends the wait by the same delay, never
  beyond the rebalance timeout in total.
* :class:`DelayedHeartbeat` -- a member's session: expires ``session.timeout.ms`` after its
  last heartbeat (then the member is removed); a new heartbeat completes it and schedules the
  next one. Also guards KIP-394 pending member ids that never come back.
* :class:`DelayedSync` -- after the join, members must send SyncGroup within the rebalance
  timeout or be removed (another rebalance follows).

The decisions live in :class:`~odradek.broker.group.rebalance.Rebalancer`; these classes
only route purgatory callbacks to it, through the :class:`RebalanceDecisions` it implements
(so this module does not depend on the one that uses it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

from odradek.broker.group.group import GroupMetadata, GroupState
from odradek.broker.purgatory import DelayedOperation, DelayedOperationPurgatory

__all__ = [
    "DelayedHeartbeat",
    "DelayedJoin",
    "DelayedSync",
    "InitialDelayedJoin",
    "RebalanceDecisions",
    "join_key",
    "member_key",
    "sync_key",
]


def join_key(group_id: str) -> Hashable:
    return ("join", group_id)


def sync_key(group_id: str) -> Hashable:
    return ("sync", group_id)


def member_key(group_id: str, member_id: str) -> Hashable:
    return ("member", group_id, member_id)


class RebalanceDecisions(Protocol):
    """What the operations below call back into when they may complete or expire."""

    def try_complete_join(
        self, group: GroupMetadata, force_complete: Callable[[], bool]
    ) -> bool: ...

    def on_complete_join(self, group: GroupMetadata) -> None: ...

    def try_complete_heartbeat(self, operation: DelayedHeartbeat) -> bool: ...

    def on_expire_heartbeat(
        self, group: GroupMetadata, member_id: str, is_pending: bool
    ) -> None: ...

    def try_complete_pending_sync(
        self, group: GroupMetadata, generation_id: int, force_complete: Callable[[], bool]
    ) -> bool: ...

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None: ...


class DelayedJoin(DelayedOperation):
    def __init__(self, rebalancer: RebalanceDecisions, group: GroupMetadata, delay_ms: int) -> None:
        super().__init__(max(delay_ms, 0))
        self.rebalancer = rebalancer
        self.group = group

    def try_complete(self) -> bool:
        return self.rebalancer.try_complete_join(self.group, self.force_complete)

    def on_complete(self) -> None:
        self.rebalancer.on_complete_join(self.group)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.group.group_id!r}, {self.delay_ms} ms)"


class InitialDelayedJoin(DelayedJoin):
    def __init__(
        self,
        rebalancer: RebalanceDecisions,
        purgatory: DelayedOperationPurgatory,
        group: GroupMetadata,
        configured_delay_ms: int,
        delay_ms: int,
        remaining_ms: int,
    ) -> None:
        super().__init__(rebalancer, group, delay_ms)
        self.purgatory = purgatory
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False  # only time ends the initial delay

    def on_complete(self) -> None:
        group = self.group
        if group.state is not GroupState.DEAD and group.new_member_added and self.remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.configured_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay_ms, 0)
            self.purgatory.try_complete_else_watch(
                InitialDelayedJoin(
                    self.rebalancer,
                    self.purgatory,
                    group,
                    self.configured_delay_ms,
                    delay,
                    remaining,
                ),
                [join_key(group.group_id)],
            )
        else:
            self.rebalancer.on_complete_join(group)


class DelayedHeartbeat(DelayedOperation):
    def __init__(
        self,
        rebalancer: RebalanceDecisions,
        group: GroupMetadata,
        member_id: str,
        is_pending: bool,
        timeout_ms: int,
    ) -> None:
        super().__init__(max(timeout_ms, 0))
        self.rebalancer = rebalancer
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self) -> bool:
        return self.rebalancer.try_complete_heartbeat(self)

    def on_complete(self) -> None:
        pass  # a heartbeat that arrived in time needs no action

    def on_expiration(self) -> None:
        self.rebalancer.on_expire_heartbeat(self.group, self.member_id, self.is_pending)

    def __repr__(self) -> str:
        return f"DelayedHeartbeat({self.group.group_id!r}, {self.member_id!r}, {self.delay_ms} ms)"


class DelayedSync(DelayedOperation):
    def __init__(
        self,
        rebalancer: RebalanceDecisions,
        group: GroupMetadata,
        generation_id: int,
        delay_ms: int,
    ) -> None:
        super().__init__(max(delay_ms, 0))
        self.rebalancer = rebalancer
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        return self.rebalancer.try_complete_pending_sync(
            self.group, self.generation_id, self.force_complete
        )

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.rebalancer.on_expire_pending_sync(self.group, self.generation_id)
