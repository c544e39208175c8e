"""Where ``odradek consume`` starts reading, and how long its group member may take to leave.

With ``--group`` the command uses :class:`~odradek.client.group_consumer.GroupConsumer`,
which joins, heartbeats, rebalances, auto-commits and leaves on close by itself; this module
only keeps what the group-less path needs besides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.client.fetcher import Consumer

# How long the final commit and LeaveGroup may take before the consumer exits anyway.
LEAVE_TIMEOUT_S = 10.0


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
