"""``odradek consume --group``: keeping a consumer in its group while it prints records."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.client.fetcher import Consumer
    from odradek.client.group_member import GroupMember


async def seek_to_start(
    consumer: Consumer, partitions: list[tuple[str, int]], start: str | int
) -> None:
    if not partitions:
        return
    if start == "earliest":
        await consumer.seek_to_beginning(*partitions)
    elif start == "latest":
        await consumer.seek_to_end(*partitions)
    else:
        assert isinstance(start, int)
        for tp in partitions:
            consumer.seek(*tp, start)


class Membership:
    """``--group``: keeps a :class:`GroupMember` in the group while records are read —
    heartbeats, a commit of the consumed positions every few seconds and at the end, and a
    new assignment after each rebalance. A partition starts at the group's committed offset,
    or, without one, where ``--from-beginning``/``--offset`` say (auto.offset.reset)."""

    # As Kafka's consumer defaults: enable.auto.commit with auto.commit.interval.ms=5000.
    AUTO_COMMIT_INTERVAL_S = 5.0
    # How long the final commit and LeaveGroup may take before the consumer exits anyway.
    LEAVE_TIMEOUT_S = 10.0

    def __init__(self, member: GroupMember, consumer: Consumer, start: str | int) -> None:
        self.member = member
        self.consumer = consumer
        self.start = start
        self.last_heartbeat = self.last_commit = time.monotonic()

    async def join(self) -> None:
        assigned = await self.member.join()
        self.consumer.assign(assigned)
        committed = await self.member.committed()
        for tp, entry in committed.items():
            self.consumer.seek(*tp, entry.offset)
        await seek_to_start(
            self.consumer, [tp for tp in assigned if tp not in committed], self.start
        )
        self.last_heartbeat = time.monotonic()

    async def tick(self) -> None:
        now = time.monotonic()
        if now - self.last_heartbeat >= self.member.heartbeat_interval_ms / 1000:
            self.last_heartbeat = now
            if not await self.member.heartbeat():
                await self.commit(best_effort=True)  # what was read before the rebalance
                await self.join()
                return
        if now - self.last_commit >= self.AUTO_COMMIT_INTERVAL_S and not await self.commit():
            await self.join()  # a rebalance began since the last heartbeat

    async def commit(self, *, best_effort: bool = False) -> bool:
        """Commit the positions of this member's partitions; False when the group has moved
        on to a new generation (the caller rejoins; the next owner starts at the last
        successful commit, as with Kafka's consumer)."""
        from odradek.client.errors import ClientError, KafkaError
        from odradek.client.group_member import REJOIN_ERRORS

        self.last_commit = time.monotonic()
        offsets = {}
        for tp in self.member.assignment:
            try:
                offsets[tp] = self.consumer.position(*tp)
            except (ClientError, ValueError):
                continue  # nothing read there yet
        try:
            await self.member.commit(offsets)
        except KafkaError as exc:
            if best_effort or exc.code in REJOIN_ERRORS:
                return False
            raise
        return True

    async def close(self) -> None:
        """Commit what was read and leave; the caller's own error, if any, wins."""
        from odradek.client.errors import ClientError, KafkaError

        try:
            await self.commit(best_effort=True)
            await self.member.leave()
        except (ClientError, KafkaError, OSError):
            pass
