"""The group coordinator: Kafka's classic consumer-group protocol over ``__consumer_offsets``.

A group belongs to partition ``partition_for(group_id)`` of the offsets topic; the broker
leading that partition is the group's coordinator. The coordinator keeps every group of the
partitions it owns in memory and writes everything that must survive a move to the log:

* **offsets** -- one ``OffsetCommitKey -> OffsetCommitValue`` record per committed partition,
  on every commit; tombstones when offsets expire or are deleted;
* **group metadata** -- one ``GroupMetadataKey -> GroupMetadataValue`` record (generation,
  protocol, leader, members with their subscriptions and assignments) whenever a rebalance
  completes (the leader's assignment is stored before anybody receives it), when a group
  becomes empty, and when a static member is replaced; a tombstone when the group is deleted.

:meth:`GroupCoordinator.load_partition` rebuilds groups and offsets from those records, so
a fresh coordinator on another broker continues where the old one stopped (members keep
their ids and assignments and just have to heartbeat in time). See ``offsets_records`` for
the formats and ``group`` for the state machine.

:class:`GroupCoordinator` is the assembly: it owns the partitions (loading them from the log,
unloading them when leadership moves), the lifecycle and the periodic offset expiration, and
hands each request to the part that owns its concept -- ``membership`` (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup), ``rebalance`` (rebalance and session timers), ``offsets`` (commit,
fetch, delete, expiry), ``admin`` (list, describe, delete groups) -- all sharing one
``registry`` (the groups, the partitions, the checks) and writing through ``offsets_log``.

Requests that must wait (JoinGroup until the group has rejoined, SyncGroup until the
leader's assignment is stored) park an asyncio future on the member; timeouts (join,
initial delay, session, pending sync) are purgatory operations on the broker's timing wheel.
Everything runs on one event loop: between two ``await`` s nothing else touches a group, and
after every ``await`` the code re-checks the group's state and generation.

Errors are Kafka's codes (``kio.schema.errors.ErrorCode``), in the results; nothing in here
raises for bad client input.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from odradek.broker.group.admin import GroupAdmin
from odradek.broker.group.config import GroupConfig
from odradek.broker.group.group import GroupMetadata
from odradek.broker.group.membership import Membership
from odradek.broker.group.offsets import OffsetStore
from odradek.broker.group.offsets_log import OffsetsLogAccess
from odradek.broker.group.persistence import PartitionRebuilder
from odradek.broker.group.rebalance import Rebalancer
from odradek.broker.group.registry import GroupRegistry
from odradek.broker.timing_wheel import Timer, TimerTask

__all__ = ["GroupCoordinator", "wall_clock_ms"]

log = logging.getLogger(__name__)

_LOAD_YIELD_EVERY = 1024  # records between two yields to the event loop while loading


class _PeriodicTask(TimerTask):
    """Re-arms itself on the timer and runs ``job`` every ``interval_ms``."""

    def __init__(self, timer: Timer, interval_ms: int, job: Callable[[], None]) -> None:
        super().__init__(interval_ms)
        self.timer = timer
        self.job = job
        self.stopped = False

    def run(self) -> None:
        if self.stopped:
            return
        try:
            self.job()
        finally:
            if not self.stopped:
                self.timer.add(self)


def wall_clock_ms() -> int:
    """The default coordinator clock: wall time, because commit timestamps are persisted and
    compared after restarts (and on other brokers)."""
    return time.time_ns() // 1_000_000


class GroupCoordinator:
    """Consumer groups and committed offsets for the offsets partitions this broker leads."""

    def __init__(
        self,
        offsets_log: OffsetsLogAccess,
        timer: Timer,
        config: GroupConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.timer = timer
        self.config = config or GroupConfig()
        self.registry = GroupRegistry(offsets_log, self.config, clock)
        self.rebalancer = Rebalancer(self.registry, timer)
        self.membership = Membership(self.registry, self.rebalancer)
        self.offsets = OffsetStore(self.registry, self.rebalancer)
        self.admin = GroupAdmin(self.registry, self.rebalancer)
        self._partition_epoch: dict[int, int] = {}
        self._expiration: _PeriodicTask | None = None
        # The request API: each request is answered by the part that owns its concept.
        self.join_group = self.membership.join_group
        self.sync_group = self.membership.sync_group
        self.heartbeat = self.membership.heartbeat
        self.leave_group = self.membership.leave_group
        self.commit_offsets = self.offsets.commit_offsets
        self.fetch_offsets = self.offsets.fetch_offsets
        self.delete_offsets = self.offsets.delete_offsets
        self.expire_offsets = self.offsets.expire_offsets
        self.on_partitions_deleted = self.offsets.on_partitions_deleted
        self.list_groups = self.admin.list_groups
        self.describe_group = self.admin.describe_group
        self.delete_groups = self.admin.delete_groups
        self.partition_for = self.registry.partition_for
        self.wait_for_background_tasks = self.registry.wait_for_background_tasks

    # == lifecycle ================================================================================

    def startup(self) -> None:
        """Start the periodic offset expiration (``offsets.retention.check.interval.ms``)."""
        if self._expiration is None:
            self._expiration = _PeriodicTask(
                self.timer,
                self.config.offsets_retention_check_interval_ms,
                lambda: self.registry.spawn(self.expire_offsets()),
            )
            self.timer.add(self._expiration)

    async def shutdown(self) -> None:
        """Answer parked requests NOT_COORDINATOR, stop timers, cancel background writes."""
        self.registry.active = False
        if self._expiration is not None:
            self._expiration.stopped = True
            self._expiration.cancel()
        for partition in sorted(self.registry.owned | self.registry.loading):
            self.unload_partition(partition)
        self.rebalancer.shutdown()
        await self.registry.cancel_background_tasks()

    @property
    def active(self) -> bool:
        return self.registry.active

    def owned_partitions(self) -> frozenset[int]:
        return frozenset(self.registry.owned)

    def is_loading(self, partition: int | None = None) -> bool:
        loading = self.registry.loading
        return bool(loading) if partition is None else partition in loading

    def group(self, group_id: str) -> GroupMetadata | None:
        """The in-memory group (for tests and introspection); None when unknown."""
        return self.registry.groups.get(group_id)

    def groups(self) -> list[GroupMetadata]:
        return list(self.registry.groups.values())

    # == loading ==================================================================================

    async def load_partition(self, partition: int) -> None:
        """Become coordinator of ``partition``: rebuild its groups and offsets from the log.

        Requests for its groups get COORDINATOR_LOAD_IN_PROGRESS meanwhile. Malformed records
        are logged and skipped. If the partition is unloaded while loading, loading stops.
        """
        if partition in self.registry.owned or partition in self.registry.loading:
            return
        await self._load(partition, self._begin_loading(partition))

    def schedule_load(self, partition: int) -> asyncio.Task[None] | None:
        """``load_partition`` in the background, but the partition counts as loading at
        once: a request arriving before the load starts gets COORDINATOR_LOAD_IN_PROGRESS,
        not NOT_COORDINATOR (Kafka's scheduleLoadGroupAndOffsets). None if already ours."""
        if partition in self.registry.owned or partition in self.registry.loading:
            return None
        return self.registry.spawn(self._load(partition, self._begin_loading(partition)))

    def _begin_loading(self, partition: int) -> int:
        epoch = self._partition_epoch.get(partition, 0) + 1
        self._partition_epoch[partition] = epoch
        self.registry.loading.add(partition)
        return epoch

    async def _load(self, partition: int, epoch: int) -> None:
        started = time.monotonic()
        try:
            rebuilder = PartitionRebuilder(partition)
            for log_offset, key, value in self.registry.log.read(partition):
                rebuilder.add(log_offset, key, value)
                if rebuilder.records % _LOAD_YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # a big partition must not stall the broker
                    if self._partition_epoch.get(partition) != epoch:
                        return  # unloaded meanwhile
            if self._partition_epoch.get(partition) != epoch:
                return
            for group in rebuilder.groups(self.registry.clock()):
                self._install_loaded_group(group)
            self.registry.owned.add(partition)
            log.info(
                "loaded %d records of __consumer_offsets-%d in %.3fs",
                rebuilder.records,
                partition,
                time.monotonic() - started,
            )
        finally:
            if self._partition_epoch.get(partition) == epoch:
                self.registry.loading.discard(partition)

    def _install_loaded_group(self, group: GroupMetadata) -> None:
        self.registry.groups[group.group_id] = group
        # Loaded members must prove they are alive within their session timeout.
        for member in list(group.members.values()):
            self.rebalancer.complete_and_schedule_next_heartbeat_expiration(group, member)
        if group.size > self.registry.config.group_max_size:
            self.rebalancer.maybe_prepare_rebalance(
                group, "loaded group is larger than group.max.size"
            )

    def unload_partition(self, partition: int) -> None:
        """Stop coordinating ``partition`` (leadership moved): its groups go Dead here and
        parked requests are answered NOT_COORDINATOR so clients look for the new one."""
        self._partition_epoch[partition] = self._partition_epoch.get(partition, 0) + 1
        self.registry.loading.discard(partition)
        self.registry.owned.discard(partition)
        for group_id, group in list(self.registry.groups.items()):
            if self.registry.partition_for(group_id) == partition:
                del self.registry.groups[group_id]
                self.rebalancer.on_group_unloaded(group)
