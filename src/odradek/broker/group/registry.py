"""What every part of the group coordinator shares: the groups, the partitions, the checks.

:class:`GroupRegistry` holds the groups of the ``__consumer_offsets`` partitions this broker
coordinates, which partitions are owned or still loading, whether the coordinator is active,
the clock and the settings. It also answers the checks every group request starts with
(:meth:`GroupRegistry.group_error`, Kafka's validateGroupStatus, and
:func:`validate_current_member`) and runs the coordinator's background writes
(:meth:`GroupRegistry.spawn`), so that a shutdown can wait for them.

The membership protocol, the offsets and the admin requests (``membership``, ``offsets``,
``admin``) each hold a reference to the one registry the coordinator creates; none of them
keeps group state of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from odradek.broker.group.config import GroupConfig
from odradek.broker.group.group import GroupMetadata
from odradek.broker.group.offsets_log import OffsetsLogAccess
from odradek.broker.group.partitioning import partition_for

__all__ = ["GroupRegistry", "validate_current_member"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class GroupRegistry:
    """The coordinator's shared state (see the module docstring)."""

    def __init__(
        self, offsets_log: OffsetsLogAccess, config: GroupConfig, clock: Callable[[], int]
    ) -> None:
        self.log = offsets_log
        self.config = config
        self.clock = clock
        self.groups: dict[str, GroupMetadata] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.active = True
        self._tasks: set[asyncio.Task[Any]] = set()

    def partition_for(self, group_id: str) -> int:
        """``abs(group_id.hashCode()) % partitions`` exactly as Kafka (see ``partitioning``)."""
        return partition_for(group_id, self.log.num_partitions)

    def group_error(self, group_id: str | None, *, allow_empty: bool) -> ErrorCode | None:
        """Kafka's validateGroupStatus: id, coordinator active, loaded, and ours."""
        if group_id is None or (not allow_empty and group_id == ""):
            return ErrorCode.invalid_group_id
        if not self.active:
            return ErrorCode.coordinator_not_available
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self.owned or not self.log.is_local_leader(partition):
            return ErrorCode.not_coordinator
        return None

    # == background tasks =========================================================================

    def spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group coordinator background task failed", exc_info=task.exception())

    async def cancel_background_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_for_background_tasks(self) -> None:
        """Wait until every background write has finished (for tests and orderly stops)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def validate_current_member(
    group: GroupMetadata, member_id: str, group_instance_id: str | None
) -> ErrorCode | None:
    """A static member's id must be the current one for its instance (else it was
    replaced: FENCED_INSTANCE_ID); any member id must be known (UNKNOWN_MEMBER_ID)."""
    if group_instance_id is not None:
        current = group.static_member_id(group_instance_id)
        if current is None:
            return ErrorCode.unknown_member_id
        if current != member_id:
            return ErrorCode.fenced_instance_id
    if not group.has(member_id):
        return ErrorCode.unknown_member_id
    return None
