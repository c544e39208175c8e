"""Partition and replica state machines over an in-memory stand-in for ZkClient (unit
tests of this layer; the controller tests run them against a real ZooKeeper)."""

from __future__ import annotations

from typing import Any

import pytest

from odradek.cluster.controller.context import (
    ControllerContext,
    LeaderIsr,
    PartitionStateName,
    ReplicaState,
)
from odradek.cluster.controller.partition_state_machine import PartitionStateMachine, Strategy
from odradek.cluster.controller.replica_state_machine import ReplicaStateMachine
from odradek.cluster.controller.request_batch import RequestBatch
from odradek.cluster.zk.codecs import BrokerEndpoint, BrokerRegistration, PartitionState
from odradek.cluster.zk.errors import ControllerMoved, NodeExists, StaleVersion
from odradek.protocol import interbroker as ib
from odradek.protocol.codec import decode_request, encode_request

P = PartitionStateName
R = ReplicaState
TP = ("t", 0)


class MemoryZk:
    """Partition state znodes with versions and the controller-epoch fence."""

    def __init__(self, epoch_version: int = 0) -> None:
        self.states: dict[tuple[str, int], tuple[PartitionState, int]] = {}
        self.epoch_version = epoch_version
        self.writes = 0
        self.batches = 0  # create_partition_states calls

    def _fence(self, version: int | None) -> None:
        if version != self.epoch_version:
            raise ControllerMoved("fenced")

    def create_partition_state(self, topic: str, p: int, state: Any, fence: int) -> int:
        self._fence(fence)
        if (topic, p) in self.states:
            raise NodeExists(f"{topic}/{p}")
        self.states[(topic, p)] = (state, 0)
        self.writes += 1
        return 0

    def create_partition_states(self, states: list[Any], fence: int) -> list[Any]:
        self._fence(fence)
        self.batches += 1
        outcomes: list[Any] = []
        for topic, p, state in states:
            try:
                self.create_partition_state(topic, p, state, fence)
                outcomes.append(None)
            except NodeExists as exc:
                outcomes.append(exc)
        return outcomes

    def get_partition_state(self, topic: str, p: int) -> Any:
        return self.states.get((topic, p))

    def update_partition_state(
        self, topic: str, p: int, state: Any, expected: int, fence: int
    ) -> int:
        self._fence(fence)
        current = self.states[(topic, p)]
        if current[1] != expected:
            raise StaleVersion(f"{topic}/{p}", expected)
        self.states[(topic, p)] = (state, expected + 1)
        self.writes += 1
        return expected + 1


def context(live: set[int], assignment: tuple[int, ...] = (1, 2, 3)) -> ControllerContext:
    ctx = ControllerContext(epoch=5, epoch_zk_version=0)
    for broker in live:
        endpoint = BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker, "PLAINTEXT")
        ctx.live_brokers[broker] = BrokerRegistration(broker, (endpoint,))
        ctx.broker_epochs[broker] = 100 + broker
    ctx.add_topic("t", "AAAAAAAAAAAAAAAAAAAAAQ", {0: assignment})
    return ctx


def machines(ctx: ControllerContext, zk: MemoryZk, unclean: bool = False) -> tuple[Any, Any, Any]:
    batch = RequestBatch(1)
    return (
        PartitionStateMachine(ctx, zk, batch, lambda _t: unclean),  # type: ignore[arg-type]
        ReplicaStateMachine(ctx, zk, batch),  # type: ignore[arg-type]
        batch,
    )


def test_new_partition_goes_online_with_the_first_live_replica() -> None:
    ctx, zk = context({2, 3}), MemoryZk()
    psm, _rsm, batch = machines(ctx, zk)
    psm.handle_state_changes([TP], P.NEW)
    psm.handle_state_changes([TP], P.ONLINE)
    assert ctx.partition_state(TP) is P.ONLINE
    assert zk.states[TP] == (PartitionState(2, 0, (2, 3), 5), 0)
    requests = batch.requests(ctx)
    lair = {r.broker for r in requests if r.api_key == ib.LEADER_AND_ISR}
    um = {r.broker for r in requests if r.api_key == ib.UPDATE_METADATA}
    assert lair == {2, 3} and um == {2, 3}  # broker 1 is not live


def test_a_new_topics_partitions_go_online_in_one_batch_of_znode_writes() -> None:
    ctx, zk = context({1, 2, 3}), MemoryZk()
    ctx.add_topic("many", "AAAAAAAAAAAAAAAAAAAAAg", {i: (i % 3 + 1, (i + 1) % 3 + 1)
                                                     for i in range(50)})  # fmt: skip
    tps = [("many", i) for i in range(50)]
    # One was written before (a previous controller died half-way): elected from it.
    zk.states[("many", 7)] = (PartitionState(2, 3, (2,), 4), 2)
    psm, _rsm, batch = machines(ctx, zk)
    psm.handle_state_changes(tps, P.NEW)
    psm.handle_state_changes(tps, P.ONLINE)
    assert zk.batches == 1
    assert all(ctx.partition_state(tp) is P.ONLINE for tp in tps)
    assert zk.states[("many", 4)] == (PartitionState(2, 0, (2, 3), 5), 0)
    assert ctx.leadership[("many", 7)].leader == 2  # kept the leader it found
    assert ctx.leadership[("many", 7)].zk_version == 2
    lair = [r for r in batch.requests(ctx) if r.api_key == ib.LEADER_AND_ISR]
    assert {r.broker for r in lair} == {1, 2, 3}


def test_invalid_transition_is_refused() -> None:
    ctx, zk = context({1}), MemoryZk()
    psm, _rsm, _batch = machines(ctx, zk)
    psm.handle_state_changes([TP], P.ONLINE)  # NonExistent -> Online is not a transition
    assert ctx.partition_state(TP) is P.NON_EXISTENT and zk.writes == 0


def test_offline_election_bumps_the_leader_epoch_and_rereads_a_stale_version() -> None:
    ctx, zk = context({2, 3}), MemoryZk()
    zk.states[TP] = (PartitionState(1, 4, (1, 2, 3), 5), 7)
    ctx.leadership[TP] = LeaderIsr(1, 4, (1, 3), 5, 6)  # older than the znode
    ctx.partition_states[TP] = P.OFFLINE
    psm, _rsm, _batch = machines(ctx, zk)
    psm.handle_state_changes([TP], P.ONLINE, Strategy.OFFLINE)
    assert zk.states[TP] == (PartitionState(2, 5, (2, 3), 5), 8)
    assert ctx.leadership[TP] == LeaderIsr(2, 5, (2, 3), 5, 8)


def test_no_clean_leader_leaves_the_partition_offline_unless_unclean() -> None:
    ctx, zk = context({3}), MemoryZk()
    zk.states[TP] = (PartitionState(1, 0, (1,), 5), 0)
    ctx.partition_states[TP] = P.OFFLINE
    psm, _rsm, _batch = machines(ctx, zk)
    psm.handle_state_changes([TP], P.ONLINE)
    assert ctx.partition_state(TP) is P.OFFLINE and zk.writes == 0
    psm.unclean_enabled = lambda _t: True
    psm.handle_state_changes([TP], P.ONLINE)
    assert zk.states[TP][0] == PartitionState(3, 1, (3,), 5, leader_recovery_state=1)


def test_a_later_controller_epoch_in_the_znode_aborts() -> None:
    ctx, zk = context({2}), MemoryZk()
    zk.states[TP] = (PartitionState(1, 0, (1, 2), 6), 0)
    ctx.partition_states[TP] = P.OFFLINE
    psm, _rsm, _batch = machines(ctx, zk)
    with pytest.raises(ControllerMoved):
        psm.handle_state_changes([TP], P.ONLINE)
    ctx.epoch_zk_version = 3  # and a stale epoch version is fenced by ZooKeeper
    zk.states[TP] = (PartitionState(1, 0, (1, 2), 5), 0)
    with pytest.raises(ControllerMoved):
        psm.handle_state_changes([TP], P.ONLINE)


def test_offline_replica_leaves_the_isr_and_a_dead_leader_leaves_no_leader() -> None:
    ctx, zk = context({1, 2}), MemoryZk()
    zk.states[TP] = (PartitionState(3, 2, (3, 1), 5), 4)
    for broker in (1, 2, 3):
        ctx.replica_states[(TP, broker)] = R.ONLINE
    _psm, rsm, batch = machines(ctx, zk)
    rsm.handle_state_changes([(TP, 3)], R.OFFLINE)
    assert zk.states[TP][0] == PartitionState(-1, 3, (1,), 5)
    rsm.handle_state_changes([(TP, 1)], R.OFFLINE)
    assert zk.states[TP][0] == PartitionState(-1, 4, (1,), 5)  # the last ISR member stays
    assert ctx.replica_state(TP, 1) is R.OFFLINE
    stop = [r for r in batch.requests(ctx) if r.api_key == ib.STOP_REPLICA]
    assert [r.broker for r in stop] == [1]  # broker 3 is not live


def test_controlled_shutdown_strategy_and_preferred_strategy() -> None:
    ctx, zk = context({1, 2, 3}), MemoryZk()
    zk.states[TP] = (PartitionState(1, 0, (1, 2, 3), 5), 0)
    ctx.partition_states[TP] = P.ONLINE
    ctx.shutting_down.add(1)
    psm, _rsm, _batch = machines(ctx, zk)
    psm.handle_state_changes([TP], P.ONLINE, Strategy.CONTROLLED_SHUTDOWN)
    assert zk.states[TP][0] == PartitionState(2, 1, (2, 3), 5)
    ctx.shutting_down.clear()
    zk.states[TP] = (PartitionState(2, 1, (2, 3, 1), 5), 1)
    psm.handle_state_changes([TP], P.ONLINE, Strategy.PREFERRED)
    assert zk.states[TP][0] == PartitionState(1, 2, (2, 3, 1), 5)
    writes = zk.writes
    psm.handle_state_changes([TP], P.ONLINE, Strategy.PREFERRED)  # already preferred
    assert zk.writes == writes


def test_batched_requests_carry_controller_and_broker_epochs_through_the_codec() -> None:
    ctx, zk = context({1, 2, 3}), MemoryZk()
    psm, _rsm, batch = machines(ctx, zk)
    psm.handle_state_changes([TP], P.NEW)
    psm.handle_state_changes([TP], P.ONLINE)
    batch.add_stop_replica([3], ("t", 0), delete=True)
    for request in batch.requests(ctx):
        frame = encode_request(request.version, 1, "controller-1", request.request)
        header, decoded = decode_request(frame[4:])
        assert decoded == request.request and header.api_key == request.api_key
        assert decoded.controller_id == 1 and decoded.controller_epoch == 5
        assert decoded.broker_epoch == 100 + request.broker
    assert batch.is_empty()


def test_a_bounced_broker_is_not_stopped_after_being_told_to_follow() -> None:
    """Failure then start-up of a broker restarted within one event: its StopReplica
    (no delete) must not reach it after the LeaderAndIsr that makes it follow again
    (found by the fault campaign: the restarted broker stayed out of the ISR)."""
    ctx = context({1, 2, 3})
    batch = RequestBatch(1)
    state = LeaderIsr(1, 3, (1, 2), 5, 7)
    batch.add_stop_replica([3], TP, delete=False)
    batch.add_stop_replica([2], TP, delete=False)
    batch.add_leader_and_isr([3], TP, state)
    sent = [(r.broker, r.api_key) for r in batch.requests(ctx)]
    assert (3, ib.LEADER_AND_ISR) in sent and (3, ib.STOP_REPLICA) not in sent
    assert (2, ib.STOP_REPLICA) in sent  # only the superseded one goes
    # A deletion is not superseded.
    batch.add_stop_replica([3], TP, delete=True)
    batch.add_leader_and_isr([3], TP, state)
    assert (3, ib.STOP_REPLICA) in [(r.broker, r.api_key) for r in batch.requests(ctx)]
