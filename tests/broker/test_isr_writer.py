"""The leader's ISR writer against a stand-in ZooKeeper (unit tests of this layer; the
cluster tests run it against a real one)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from odradek.broker.isr_writer import IsrWriter
from odradek.broker.partition import ReplicaStates, Role
from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.zk.codecs import PartitionState
from odradek.cluster.zk.errors import StaleVersion
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager

ME = 3


class MemoryZk:
    """One partition-state znode with a version."""

    def __init__(self, state: PartitionState, version: int) -> None:
        self.state, self.version = state, version
        self.writes: list[PartitionState] = []

    def get_partition_state(self, _topic: str, _p: int) -> tuple[PartitionState, int]:
        return self.state, self.version

    def update_partition_state(self, _t: str, _p: int, state: Any, expected: int) -> int:
        if expected != self.version:
            raise StaleVersion("/brokers/topics/t/partitions/0/state", expected)
        self.state, self.version = state, self.version + 1
        self.writes.append(state)
        return self.version

    def create_isr_change_notification(self, _partitions: Any) -> None:
        pass


def _leader(tmp_path: Path, zk: MemoryZk, zk_version: int) -> tuple[IsrWriter, Any, Any]:
    manager = LogManager(tmp_path, LogConfig())
    manager.startup()
    replicas = ReplicaManager(ME, manager)
    partition = replicas.become_leader(
        "t", 0, LogConfig(), leader_epoch=2, isr=[ME], replicas=[1, 2, ME]
    )
    states = ReplicaStates()
    state = states.get_or_create("t", 0)
    state.apply(Role.LEADER, leader=ME, leader_epoch=2, isr=[ME], replicas=[1, 2, ME],
                zk_version=zk_version, controller_epoch=5)  # fmt: skip
    return IsrWriter(zk, states, replicas), partition, state  # type: ignore[arg-type]


def test_a_stale_version_at_the_same_leader_epoch_is_taken_and_the_change_written_again(
    tmp_path: Path,
) -> None:
    """The controller rewrote the znode (version 4) without a new leader epoch; the leader
    holds version 3. It must take version 4 and succeed on the next attempt instead of
    failing every ISR expansion for ever (found by the fault campaign)."""
    zk = MemoryZk(PartitionState(leader=ME, leader_epoch=2, isr=(ME,), controller_epoch=6), 4)
    writer, partition, state = _leader(tmp_path, zk, zk_version=3)

    async def expand() -> None:
        writer.request(partition, {2, ME}, "replica 2 caught up")
        await asyncio.gather(*writer._tasks)

    asyncio.run(expand())
    assert zk.writes == [] and state.zk_version == 4 and state.controller_epoch == 6
    assert partition.isr == {ME} and not partition.isr_update_pending
    asyncio.run(expand())
    assert [w.isr for w in zk.writes] == [(2, ME)]
    assert partition.isr == {2, ME} and state.zk_version == 5


def test_a_newer_leader_epoch_in_the_znode_is_not_taken(tmp_path: Path) -> None:
    zk = MemoryZk(PartitionState(leader=1, leader_epoch=3, isr=(1,), controller_epoch=6), 4)
    writer, partition, state = _leader(tmp_path, zk, zk_version=3)

    async def expand() -> None:
        writer.request(partition, {2, ME}, "replica 2 caught up")
        await asyncio.gather(*writer._tasks)

    asyncio.run(expand())
    assert zk.writes == [] and state.zk_version == 3 and partition.isr == {ME}
