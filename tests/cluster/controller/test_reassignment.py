"""The controller's partition reassignment steps (Kafka's onPartitionReassignment) against
a real ZooKeeper and in-test brokers. The in-test brokers do not replicate, so the test
plays the leader: it writes the ISR expansion and the ``/isr_change_notification``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.cluster.controller.context import ReplicaAssignment
from odradek.cluster.zk import paths
from tests.cluster.controller.fake_broker import partition_states, wait_for
from tests.cluster.controller.test_controller import SR, cluster, lair_for, run
from tests.helpers.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.zookeeper,
    pytest.mark.timeout(120),
    pytest.mark.skipif(not zookeeper_available(), reason="needs ZooKeeper"),
]


def test_reassign_to_keeps_the_origin_and_puts_the_target_first() -> None:
    current = ReplicaAssignment((1, 2, 3))
    moving = current.reassign_to((4, 2, 3))
    assert moving == ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert (moving.origin, moving.target) == ((2, 3, 1), (4, 2, 3))
    # A new target during a move starts from the origin again: 4 is dropped.
    again = moving.reassign_to((5, 1, 2))
    assert again == ReplicaAssignment((5, 1, 2, 3), adding=(5,), removing=(3,))
    # Cancelling is reassigning to the origin.
    assert moving.reassign_to(moving.origin) == ReplicaAssignment((2, 3, 1))


def stops(broker: Any, tp: tuple[str, int]) -> list[bool]:
    """The delete flags of every StopReplica ``broker`` got for ``tp``."""
    return [
        bool(p.delete_partition)
        for request in broker.of(SR)
        for topic in request.topic_states
        for p in topic.partition_states
        if (topic.topic_name, int(p.partition_index)) == tp
    ]


def expand_isr(c: Any, tp: tuple[str, int], isr: tuple[int, ...]) -> None:
    """What the partition's leader does when followers catch up."""
    state, version = c.state(*tp)
    c.admin.update_partition_state(
        tp[0], tp[1], type(state)(state.leader, state.leader_epoch, isr, state.controller_epoch),
        version,
    )
    c.admin.create_isr_change_notification({tp})


@run
async def test_move_waits_for_the_isr_then_moves_the_leader_and_deletes(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        b1, b2, b3, b4 = [await c.broker(i) for i in (1, 2, 3, 4)]
        controller = await c.controller(1)
        await c.create_topic("t", {0: (1, 2)})
        await wait_for(lambda: lair_for(b2, ("t", 0), leader=1), "initial leader")
        epoch0 = c.state("t", 0)[0].leader_epoch

        results = await controller.alter_partition_reassignments({("t", 0): (3, 4)})
        assert results[("t", 0)].error_code == ErrorCode.none
        # A1/A2: RS = TRS + ORS with AR/RR in ZooKeeper; the leader keeps leading at a
        # new epoch and the new replicas hear of it as followers.
        assignment, _v = c.admin.get_topic_assignment("t")
        assert assignment.partitions[0] == (3, 4, 1, 2)
        assert (assignment.adding_replicas[0], assignment.removing_replicas[0]) == ((3, 4), (1, 2))
        got = await wait_for(lambda: lair_for(b3, ("t", 0), leader=1), "new replica told")
        assert got[1].leader_epoch == epoch0 + 1
        assert tuple(got[1].replicas) == (3, 4, 1, 2)
        assert (tuple(got[1].adding_replicas), tuple(got[1].removing_replicas)) == ((3, 4), (1, 2))
        assert got[1].is_new
        assert lair_for(b1, ("t", 0), leader=1, leader_epoch=epoch0 + 1) is not None
        listed = await controller.list_partition_reassignments(None)
        assert listed == {("t", 0): ReplicaAssignment((3, 4, 1, 2), (3, 4), (1, 2))}

        # Only 3 caught up: still waiting.
        await asyncio.to_thread(expand_isr, c, ("t", 0), (1, 2, 3))
        await wait_for(lambda: c.admin.get_isr_change_notifications() == [], "notification seen")
        assert c.admin.get_topic_assignment("t")[0].partitions[0] == (3, 4, 1, 2)

        # Both caught up: leader moves to 3 (first of TRS in the ISR), 1 and 2 are
        # stopped, taken out of the ISR and deleted; the assignment is TRS.
        await asyncio.to_thread(expand_isr, c, ("t", 0), (1, 2, 3, 4))
        await wait_for(
            lambda: c.admin.get_topic_assignment("t")[0].partitions[0] == (3, 4), "final assignment"
        )
        final = c.admin.get_topic_assignment("t")[0]
        assert (dict(final.adding_replicas), dict(final.removing_replicas)) == ({}, {})
        state = c.state("t", 0)[0]
        assert (state.leader, set(state.isr)) == (3, {3, 4})
        await wait_for(lambda: True in stops(b1, ("t", 0)), "old leader deleted")
        await wait_for(lambda: True in stops(b2, ("t", 0)), "old follower deleted")
        assert stops(b3, ("t", 0)) == [] and stops(b4, ("t", 0)) == []
        await wait_for(lambda: lair_for(b4, ("t", 0), leader=3, isr=(3, 4)), "4 follows 3")
        assert await controller.list_partition_reassignments(None) == {}


@run
async def test_cancel_reverts_and_deletes_the_added_replica(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, _b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        controller = await c.controller(1)
        await c.create_topic("t", {0: (1, 2)})
        await wait_for(lambda: c.state("t", 0) is not None, "partition state")
        nothing = await controller.alter_partition_reassignments({("t", 0): None})
        assert nothing[("t", 0)].error_code == ErrorCode.no_reassignment_in_progress

        await controller.alter_partition_reassignments({("t", 0): (1, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=1), "3 follows")
        assert c.admin.get_topic_assignment("t")[0].partitions[0] == (1, 3, 2)
        results = await controller.alter_partition_reassignments({("t", 0): None})
        assert results[("t", 0)].error_code == ErrorCode.none
        final = c.admin.get_topic_assignment("t")[0]
        assert (final.partitions[0], dict(final.adding_replicas)) == ((1, 2), {})
        await wait_for(lambda: True in stops(b3, ("t", 0)), "the added replica deleted")
        assert c.state("t", 0)[0].leader == 1
        assert await controller.list_partition_reassignments(None) == {}


@run
async def test_invalid_requests_change_nothing(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        for i in (1, 2, 3):
            await c.broker(i)
        controller = await c.controller(1)
        standby = await c.controller(2)
        await c.create_topic("t", {0: (1, 2)})
        await wait_for(lambda: c.state("t", 0) is not None, "partition state")
        before = c.admin.get_topic_assignment("t")
        results = await controller.alter_partition_reassignments(
            {("t", 0): (1, 9), ("t", 5): (1, 2), ("nope", 0): (1,)}
        )
        assert results[("t", 0)].error_code == ErrorCode.invalid_replica_assignment
        assert "not alive" in str(results[("t", 0)].message)
        assert results[("t", 5)].error_code == ErrorCode.unknown_topic_or_partition
        assert results[("nope", 0)].error_code == ErrorCode.unknown_topic_or_partition
        for bad in ((), (1, 1), (1, -2)):
            got = await controller.alter_partition_reassignments({("t", 0): bad})
            assert got[("t", 0)].error_code == ErrorCode.invalid_replica_assignment
        assert c.admin.get_topic_assignment("t") == before
        assert await standby.alter_partition_reassignments({("t", 0): (2, 3)}) == (
            ErrorCode.not_controller
        )
        assert await standby.list_partition_reassignments(None) == ErrorCode.not_controller


@run
async def test_legacy_znode_is_picked_up_and_deleted(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, _b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        await c.controller(1)
        await c.create_topic("t", {0: (1, 2), 1: (2, 1)})
        await wait_for(lambda: c.state("t", 1) is not None, "partition state")
        # t-1 asks for what it has: done at once; t-0 waits for broker 3.
        await asyncio.to_thread(
            c.admin.create_partition_reassignment, {("t", 0): (1, 3), ("t", 1): (2, 1)}
        )
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=1), "3 follows")
        await wait_for(
            lambda: c.admin.get_partition_reassignment() == {("t", 0): (1, 3)}, "t-1 done"
        )
        await asyncio.to_thread(expand_isr, c, ("t", 0), (1, 2, 3))
        await wait_for(
            lambda: c.admin.get_topic_assignment("t")[0].partitions[0] == (1, 3), "t-0 done"
        )
        await wait_for(
            lambda: c.admin._get(paths.REASSIGN_PARTITIONS) is None, "znode deleted"
        )


@run
async def test_new_controller_finishes_a_reassignment(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        first = await c.controller(1)
        await c.create_topic("t", {0: (1, 2)})
        await wait_for(lambda: c.state("t", 0) is not None, "partition state")
        await first.alter_partition_reassignments({("t", 0): (2, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=1), "3 follows")
        await first.stop()
        second = await c.controller(2)
        await wait_for(lambda: second.is_active, "controller 2 active")
        listed = await second.list_partition_reassignments({("t", 0), ("t", 3)})
        assert listed == {("t", 0): ReplicaAssignment((2, 3, 1), (3,), (1,))}
        await asyncio.to_thread(expand_isr, c, ("t", 0), (1, 2, 3))
        await wait_for(
            lambda: c.admin.get_topic_assignment("t")[0].partitions[0] == (2, 3), "done"
        )
        state = c.state("t", 0)[0]
        assert (state.leader, set(state.isr)) == (2, {2, 3})
        got = await wait_for(lambda: lair_for(b2, ("t", 0), leader=2), "2 leads")
        assert tuple(got[1].replicas) == (2, 3)
        assert partition_states(got[0])[("t", 0)].leader == 2


@run
async def test_a_malformed_legacy_znode_is_deleted(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        await c.broker(1)
        await c.controller(1)
        await c.create_topic("t", {0: (1,)})
        await wait_for(lambda: c.state("t", 0) is not None, "partition state")
        await asyncio.to_thread(c.admin._zk.create, paths.REASSIGN_PARTITIONS, b"{not json")
        await wait_for(lambda: c.admin._get(paths.REASSIGN_PARTITIONS) is None, "znode deleted")
        assert c.admin.get_topic_assignment("t")[0].partitions[0] == (1,)
