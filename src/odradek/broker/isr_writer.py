"""A partition leader's ISR changes, written to ZooKeeper (Kafka 2.x ZooKeeper mode).

The leader itself compare-and-sets the partition-state znode on the version it holds
(from LeaderAndIsr or its own last write), keeping the leader epoch and controller epoch
the controller gave it, then creates an ``/isr_change_notification`` child so the
controller can tell the other brokers. A leader that was deposed holds an old version or
epoch: its write fails (StaleVersion) and the ISR it serves by does not change; the
controller's next LeaderAndIsr settles the partition.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from odradek.broker.partition import ReplicaStates, Role
from odradek.broker.replica_manager import Partition, ReplicaManager
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import PartitionState
from odradek.cluster.zk.errors import StaleVersion

log = logging.getLogger(__name__)


class IsrWriter:
    def __init__(self, zk: ZkClient, states: ReplicaStates, replica_manager: ReplicaManager):
        self.zk = zk
        self.states = states
        self.replica_manager = replica_manager
        self._tasks: set[asyncio.Task[None]] = set()

    def request(self, partition: Partition, new_isr: set[int], reason: str) -> None:
        """The replica manager's hook: write in the background (ZooKeeper blocks)."""
        task = asyncio.get_running_loop().create_task(self._write(partition, new_isr, reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, partition: Partition, new_isr: set[int], reason: str) -> None:
        topic, index = partition.topic, partition.index
        state = self.states.get(topic, index)
        epoch = partition.leader_epoch
        try:
            if state is None or state.role is not Role.LEADER or state.leader_epoch != epoch:
                return  # no longer this broker's to change
            old_isr = sorted(partition.isr)
            isr = sorted(new_isr)
            written = PartitionState(
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                isr=tuple(isr),
                controller_epoch=state.controller_epoch,
            )
            try:
                version = await asyncio.to_thread(
                    self.zk.update_partition_state, topic, index, written, state.zk_version
                )
            except StaleVersion as exc:
                await self._resync(partition, state, epoch, exc)
                return
            except Exception as exc:  # ZooKeeper unreachable
                log.warning(
                    "%s-%d: ISR change %s -> %s not written (zk version %d, leader epoch %d): %s",
                    topic,
                    index,
                    old_isr,
                    isr,
                    state.zk_version,
                    epoch,
                    exc,
                )
                return
            if self.states.get(topic, index) is not state or state.leader_epoch != epoch:
                return  # a LeaderAndIsr arrived meanwhile and carries the newer truth
            state.zk_version = version
            state.isr = list(isr)
            kind = "shrink" if len(isr) < len(old_isr) else "expand"
            log.info("%s-%d: ISR %s from %s to %s: %s", topic, index, kind, old_isr, isr, reason)
            self.replica_manager.apply_isr_change(partition, set(isr))
            try:
                await asyncio.to_thread(self.zk.create_isr_change_notification, {(topic, index)})
            except Exception as exc:
                log.warning("%s-%d: ISR change notification failed: %s", topic, index, exc)
        finally:
            partition.isr_update_pending = False


    async def _resync(self, partition: Partition, state: Any, epoch: int, exc: Exception) -> None:
        """A stale znode version. If the znode still names this broker leader at this
        leader epoch, the controller rewrote it without electing anyone (a LeaderAndIsr
        with an equal epoch is not applied, so none brings the new version): take its
        version and ISR, and the next check writes the change again. Otherwise this
        broker was deposed and waits for the controller's LeaderAndIsr. (Found by the
        fault campaign: a leader stuck for minutes with an ISR of one, every expansion
        refused, acks=all writes timing out.)"""
        topic, index = partition.topic, partition.index
        try:
            found = await asyncio.to_thread(self.zk.get_partition_state, topic, index)
        except Exception as read_exc:
            log.warning("%s-%d: ISR change not written (%s); re-read failed: %s",
                        topic, index, exc, read_exc)  # fmt: skip
            return
        if self.states.get(topic, index) is not state or state.leader_epoch != epoch:
            return  # a LeaderAndIsr arrived meanwhile
        current = found[0] if found is not None else None
        if current is None or current.leader != state.leader or current.leader_epoch != epoch:
            log.warning(
                "%s-%d: ISR change not written (%s): deposed, waiting for the controller",
                topic, index, exc,
            )  # fmt: skip
            return
        old_version = state.zk_version
        state.zk_version = found[1]
        state.isr = sorted(current.isr)
        state.controller_epoch = current.controller_epoch
        if found[1] != old_version:  # (equal: another write of ours got there first)
            log.info(
                "%s-%d: partition state moved from zk version %d to %d at leader epoch %d; "
                "taking its ISR %s",
                topic, index, old_version, found[1], epoch, state.isr,
            )  # fmt: skip
        self.replica_manager.apply_isr_change(partition, set(current.isr))


async def run_isr_expiration(replica_manager: ReplicaManager, lag_time_ms: int) -> None:
    """Kafka's isr-expiration task: every replica.lag.time.max.ms / 2."""
    while True:
        await asyncio.sleep(lag_time_ms / 2000)
        try:
            replica_manager.shrink_isrs(lag_time_ms)
        except Exception:
            log.exception("ISR expiration failed; will retry")
