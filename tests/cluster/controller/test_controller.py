"""The controller against a real ZooKeeper and in-test brokers that record its requests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from odradek.cluster.controller import Controller
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import TopicAssignment, random_kafka_uuid
from odradek.protocol import interbroker as ib
from tests.cluster.controller.fake_broker import (
    SESSION_MS,
    FakeBroker,
    partition_states,
    wait_for,
)
from tests.helpers.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.zookeeper,
    pytest.mark.timeout(120),
    pytest.mark.skipif(not zookeeper_available(), reason="needs ZooKeeper"),
]
LAIR, UM, SR = ib.LEADER_AND_ISR, ib.UPDATE_METADATA, ib.STOP_REPLICA
CONFIG = {"auto.leader.rebalance.enable": "false"}


class Cluster:
    def __init__(self, zk_connect: str) -> None:
        self.zk_connect = zk_connect
        self.brokers: dict[int, FakeBroker] = {}
        self.controllers: list[Controller] = []
        self.admin = ZkClient.connect(zk_connect, session_timeout_ms=SESSION_MS)
        self.admin.create_top_level_paths()

    async def broker(self, broker_id: int) -> FakeBroker:
        self.brokers[broker_id] = await FakeBroker(broker_id, self.zk_connect).start()
        return self.brokers[broker_id]

    async def controller(
        self, broker_id: int, config: dict[str, Any] | None = None, zk: ZkClient | None = None
    ) -> Controller:
        if zk is None:
            zk = await asyncio.to_thread(
                ZkClient.connect, self.zk_connect, session_timeout_ms=SESSION_MS
            )
        controller = Controller(zk, broker_id, config or CONFIG)
        self.controllers.append(controller)
        await controller.start()
        return controller

    async def create_topic(self, topic: str, partitions: dict[int, tuple[int, ...]]) -> None:
        assignment = TopicAssignment(partitions, random_kafka_uuid())
        await asyncio.to_thread(self.admin.create_topic, topic, assignment)

    def state(self, topic: str, partition: int) -> tuple[Any, int] | None:
        return self.admin.get_partition_state(topic, partition)

    async def close(self) -> None:
        for controller in self.controllers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(controller.stop(), 20)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(controller.zk.close)
        for broker in self.brokers.values():
            await broker.die()
        await asyncio.to_thread(self.admin.close)


@contextlib.asynccontextmanager
async def cluster(zk_connect: str) -> AsyncIterator[Cluster]:
    c = await asyncio.to_thread(Cluster, zk_connect)
    try:
        yield c
    finally:
        await c.close()


def run(body: Callable[[str], Awaitable[None]]) -> Callable[[str], None]:
    def test(zk_connect: str) -> None:
        asyncio.run(asyncio.wait_for(body(zk_connect), 100))

    test.__name__ = body.__name__
    test.__doc__ = body.__doc__
    return test


def last_state_for(broker: FakeBroker, api_key: int, tp: tuple[str, int], **expected: Any) -> Any:
    """(request, state): the last ``api_key`` request the broker received that carries a
    state of ``tp``, if that state matches ``expected``; otherwise None."""
    for request in reversed(broker.of(api_key)):
        state = partition_states(request).get(tp)
        if state is not None:
            if all(getattr(state, k) == v for k, v in expected.items()):
                return (request, state)
            return None
    return None


def lair_for(broker: FakeBroker, tp: tuple[str, int], **expected: Any) -> Any:
    """The last LeaderAndIsr state of ``tp`` the broker received, if it matches."""
    return last_state_for(broker, LAIR, tp, **expected)


def um_for(broker: FakeBroker, tp: tuple[str, int], **expected: Any) -> Any:
    """The last UpdateMetadata state of ``tp`` the broker received, if it matches."""
    return last_state_for(broker, UM, tp, **expected)


def live_ids(request: Any) -> set[int]:
    return {int(b.id_) for b in request.live_brokers}


@run
async def test_new_topic_gets_leaders_and_every_broker_hears_of_it(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        controller = await c.controller(1)
        await wait_for(lambda: controller.is_active, "controller 1 active")
        assert controller.epoch == 1
        # Every live broker first gets UpdateMetadata listing the live brokers.
        await wait_for(lambda: all(b.of(UM) for b in (b1, b2, b3)), "initial UpdateMetadata")
        assert live_ids(b1.of(UM)[0]) == {1, 2, 3}

        await c.create_topic("orders", {0: (1, 2), 1: (2, 3)})
        for broker in (b1, b2):
            request, _state = await wait_for(
                lambda broker=broker: lair_for(
                    broker, ("orders", 0), leader=1, isr=(1, 2), leader_epoch=0, is_new=True
                ),
                f"LeaderAndIsr orders-0 at broker {broker.broker_id}",
            )
            assert request.controller_id == 1 and request.controller_epoch == 1
            assert request.broker_epoch == broker.broker_epoch
        for broker in (b2, b3):
            await wait_for(
                lambda broker=broker: lair_for(broker, ("orders", 1), leader=2, isr=(2, 3)),
                f"LeaderAndIsr orders-1 at broker {broker.broker_id}",
            )
        assert lair_for(b3, ("orders", 0)) is None  # not a replica
        for broker in (b1, b2, b3):
            await wait_for(
                lambda broker=broker: (
                    um_for(broker, ("orders", 0), leader=1)
                    and um_for(broker, ("orders", 1), leader=2)
                ),
                f"UpdateMetadata at broker {broker.broker_id}",
            )
        state, version = c.state("orders", 0)
        assert (state.leader, state.leader_epoch, state.isr, state.controller_epoch) == (
            1,
            0,
            (1, 2),
            1,
        )
        assert version == 0


@run
async def test_broker_failure_elects_a_new_leader_from_the_isr(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        controller = await c.controller(1)
        await c.create_topic("t", {0: (2, 3), 1: (2,), 2: (3, 1)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2, isr=(2, 3)), "initial leader")
        await b2.die()
        request, _ = await wait_for(
            lambda: lair_for(b3, ("t", 0), leader=3, isr=(3,), leader_epoch=1),
            "broker 3 to lead t-0 with epoch 1",
        )
        assert request.controller_epoch == controller.epoch
        state, _version = c.state("t", 0)
        assert (state.leader, state.leader_epoch, state.isr) == (3, 1, (3,))
        # No live ISR member and unclean election disabled: no leader, the ISR keeps its
        # last member so only it may lead again.
        state, _version = c.state("t", 1)
        assert (state.leader, state.isr) == (-1, (2,))
        # Every live broker learns of the dead broker and the new leaders.
        for broker in (b1, b3):
            await wait_for(
                lambda broker=broker: (
                    um_for(broker, ("t", 0), leader=3) and live_ids(broker.of(UM)[-1]) == {1, 3}
                ),
                f"UpdateMetadata without broker 2 at broker {broker.broker_id}",
            )
        # Untouched partition keeps its leader and epoch.
        state, _version = c.state("t", 2)
        assert (state.leader, state.leader_epoch) == (3, 0)


@run
async def test_restarted_broker_gets_its_replicas_and_offline_partition_comes_back(
    zk_connect: str,
) -> None:
    async with cluster(zk_connect) as c:
        _b1, b2 = [await c.broker(i) for i in (1, 2)]
        await c.controller(1)
        await c.create_topic("t", {0: (2,)})
        await wait_for(lambda: lair_for(b2, ("t", 0), leader=2), "initial leader")
        await b2.die()
        await wait_for(lambda: c.state("t", 0)[0].leader == -1, "t-0 offline")
        b2 = await c.broker(2)
        await wait_for(lambda: lair_for(b2, ("t", 0), leader=2, isr=(2,)), "broker 2 leads again")
        state, _version = c.state("t", 0)
        assert state.leader == 2 and state.leader_epoch == 2  # offline (1), elected (2)
        assert b2.of(UM) and live_ids(b2.of(UM)[0]) == {1, 2}


@run
async def test_unclean_election_when_enabled(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        config = dict(CONFIG, **{"unclean.leader.election.enable": "true"})
        await c.controller(1, config)
        await c.create_topic("t", {0: (2, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2), "initial leader")
        # Broker 3 falls out of the ISR (as a leader would write), then the leader dies.
        state, version = c.state("t", 0)
        c.admin.update_partition_state(
            "t", 0, type(state)(2, state.leader_epoch, (2,), state.controller_epoch), version
        )
        await b2.die()
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=3, isr=(3,)), "unclean leader 3")
        state, _version = c.state("t", 0)
        assert state.leader_recovery_state == 1


@run
async def test_failover_when_the_controllers_session_expires(zk_connect: str) -> None:
    from tests.helpers.tcp_proxy import TcpProxy

    port = int(zk_connect.split(":")[1].split("/")[0])
    chroot = zk_connect[zk_connect.index("/") :]
    proxy = TcpProxy(port).start()
    try:
        async with cluster(zk_connect) as c:
            b1, b2 = [await c.broker(i) for i in (1, 2)]
            cut_zk = await asyncio.to_thread(
                ZkClient.connect, proxy.address + chroot, session_timeout_ms=SESSION_MS
            )
            first = await c.controller(1, zk=cut_zk)
            await wait_for(lambda: first.is_active, "controller 1 active")
            second = await c.controller(2)
            await c.create_topic("t", {0: (1, 2)})
            await wait_for(lambda: lair_for(b2, ("t", 0), leader=1), "initial leader")
            assert not second.is_active
            old_epoch = first.epoch
            count = len(b2.of(LAIR))
            proxy.cut()
            await wait_for(lambda: second.is_active, "controller 2 takes over", timeout=40)
            assert second.epoch is not None and old_epoch is not None
            assert second.epoch > old_epoch
            # The new controller resends the state to every replica with its epoch.
            for broker in (b1, b2):
                await wait_for(
                    lambda broker=broker: any(
                        r.controller_id == 2 and r.controller_epoch == second.epoch
                        for r in broker.of(LAIR)
                    ),
                    f"LeaderAndIsr from controller 2 at broker {broker.broker_id}",
                )
            assert len(b2.of(LAIR)) > count
            # Cut off, the old controller cannot know; once it reaches ZooKeeper again it
            # learns its session expired and resigns.
            proxy.restore()
            await wait_for(lambda: not first.is_active, "controller 1 resigned", timeout=30)
            assert second.is_active
    finally:
        proxy.close()


@run
async def test_a_zombie_controller_cannot_write_partition_state(zk_connect: str) -> None:
    from odradek.cluster.controller.context import ControllerContext, LeaderIsr
    from odradek.cluster.controller.partition_state_machine import (
        PartitionStateMachine,
        PartitionStateName,
    )
    from odradek.cluster.controller.request_batch import RequestBatch
    from odradek.cluster.zk.errors import ControllerMoved

    async with cluster(zk_connect) as c:
        _b1, _b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        first = await c.controller(1)
        await wait_for(lambda: first.is_active, "controller 1 active")
        stale_version = first.ctx.epoch_zk_version
        await c.create_topic("t", {0: (2, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2), "initial leader")
        await first.stop()
        second = await c.controller(2)
        await wait_for(lambda: second.is_active, "controller 2 active")
        before = c.state("t", 0)
        # A paused controller wakes up with its old epoch and tries an election.
        ctx = ControllerContext(epoch=1, epoch_zk_version=stale_version)
        ctx.live_brokers = {3: c.admin.get_broker(3)}
        ctx.assignment[("t", 0)] = (2, 3)
        ctx.leadership[("t", 0)] = LeaderIsr.of(*before)
        ctx.partition_states[("t", 0)] = PartitionStateName.OFFLINE
        zombie_zk = second.zk
        machine = PartitionStateMachine(ctx, zombie_zk, RequestBatch(1), lambda _topic: False)
        with pytest.raises(ControllerMoved):
            await asyncio.to_thread(
                machine.handle_state_changes, [("t", 0)], PartitionStateName.ONLINE
            )
        assert c.state("t", 0) == before


@run
async def test_topic_deletion_stops_and_deletes_replicas_then_the_znodes(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        controller = await c.controller(1)
        await c.create_topic("gone", {0: (1, 2), 1: (2, 3)})
        await c.create_topic("kept", {0: (3,)})
        await wait_for(lambda: lair_for(b3, ("gone", 1), leader=2), "initial leader")
        await asyncio.to_thread(c.admin.request_topic_deletion, "gone")
        await wait_for(
            lambda: c.admin.get_topics() == ["kept"] and c.admin.get_topic_deletions() == [],
            "gone removed from ZooKeeper",
        )
        assert c.admin.get_entity_config("topics", "gone") == {}
        for broker, partitions in ((b1, {0}), (b2, {0, 1}), (b3, {1})):
            deleted = {
                (t.topic_name, int(p.partition_index))
                for r in broker.of(SR)
                for t in r.topic_states
                for p in t.partition_states
                if p.delete_partition
            }
            assert deleted == {("gone", p) for p in partitions}, broker.broker_id
            # Before that, every broker heard the topic is being deleted (leader -2).
            assert any(
                partition_states(r).get(("gone", 0)) is not None
                and partition_states(r)[("gone", 0)].leader == -2
                for r in broker.of(UM)
            )
        assert "gone" not in controller.ctx.topics()
        assert c.state("kept", 0)[0].leader == 3


@run
async def test_controlled_shutdown_moves_leadership_away(zk_connect: str) -> None:
    from kio.schema.errors import ErrorCode

    async with cluster(zk_connect) as c:
        b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        controller = await c.controller(1)
        await c.create_topic("t", {0: (2, 3), 1: (3, 2), 2: (2,), 3: (2, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 3), leader=2), "initial leaders")
        # t-3's follower fell out of the ISR: leadership cannot move.
        state, version = c.state("t", 3)
        c.admin.update_partition_state(
            "t", 3, type(state)(2, state.leader_epoch, (2,), state.controller_epoch), version
        )
        stale = await controller.controlled_shutdown(2, b2.broker_epoch - 1)
        assert stale.error_code == ErrorCode.stale_broker_epoch
        result = await controller.controlled_shutdown(2, b2.broker_epoch)
        assert result.error_code == ErrorCode.none
        # t-3 has no other ISR member: it stays with broker 2, which retries (t-2 has one
        # replica only and is not counted, as in Kafka).
        assert result.remaining == (("t", 3),)
        state, _ = c.state("t", 0)
        assert (state.leader, state.isr, state.leader_epoch) == (3, (3,), 1)
        state, _ = c.state("t", 1)  # broker 2 was a follower: it leaves the ISR
        assert (state.leader, state.isr) == (3, (3,))
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=3, leader_epoch=1), "new leader")
        await wait_for(
            lambda: any(
                not p.delete_partition and t.topic_name == "t" and p.partition_index == 1
                for r in b2.of(SR)
                for t in r.topic_states
                for p in t.partition_states
            ),
            "StopReplica for the follower on broker 2",
        )
        not_controller = Controller(c.admin, 3, CONFIG)
        answer = await not_controller.controlled_shutdown(2, b2.broker_epoch)
        assert answer.error_code == ErrorCode.not_controller
        assert b1.of(UM)


@run
async def test_preferred_replica_election_restores_leadership(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        await c.controller(1)
        await c.create_topic("t", {0: (2, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2), "initial leader")
        await b2.die()
        await wait_for(lambda: c.state("t", 0)[0].leader == 3, "broker 3 leads")
        b2 = await c.broker(2)
        await wait_for(lambda: lair_for(b2, ("t", 0), leader=3), "broker 2 back as follower")
        # The returning broker rejoins the ISR (as the leader would write).
        state, version = c.state("t", 0)
        c.admin.update_partition_state(
            "t", 0, type(state)(3, state.leader_epoch, (3, 2), state.controller_epoch), version
        )
        await asyncio.to_thread(c.admin.request_preferred_replica_election, {("t", 0)})
        await wait_for(lambda: lair_for(b2, ("t", 0), leader=2, isr=(3, 2)), "broker 2 leads")
        await wait_for(lambda: c.admin.get_preferred_replica_election() == set(), "request removed")
        state, _ = c.state("t", 0)
        assert (state.leader, state.leader_epoch) == (2, 2)


@run
async def test_auto_leader_rebalance(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        config = {
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": "0.5",
        }
        await c.controller(1, config)
        await c.create_topic("t", {0: (2, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2), "initial leader")
        await b2.die()
        await wait_for(lambda: c.state("t", 0)[0].leader == 3, "broker 3 leads")
        b2 = await c.broker(2)
        state, version = c.state("t", 0)
        # The leader takes broker 2 back into the ISR and tells the controller.
        c.admin.update_partition_state(
            "t", 0, type(state)(3, state.leader_epoch, (3, 2), state.controller_epoch), version
        )
        await asyncio.to_thread(c.admin.create_isr_change_notification, {("t", 0)})
        await wait_for(lambda: c.state("t", 0)[0].leader == 2, "rebalanced back to broker 2")


@run
async def test_isr_change_notification_reaches_every_broker(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        b1, _b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        await c.controller(1)
        await c.create_topic("t", {0: (2, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2), "initial leader")
        state, version = c.state("t", 0)
        c.admin.update_partition_state(
            "t", 0, type(state)(2, state.leader_epoch, (2,), state.controller_epoch), version
        )
        await asyncio.to_thread(c.admin.create_isr_change_notification, {("t", 0)})
        await wait_for(lambda: um_for(b1, ("t", 0), isr=(2,)), "UpdateMetadata with the ISR")
        await wait_for(lambda: c.admin.get_isr_change_notifications() == [], "notification removed")


@run
async def test_partitions_added_to_a_topic_come_online(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        await c.controller(1)
        await c.create_topic("t", {0: (2, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2), "initial leader")
        assignment, version = c.admin.get_topic_assignment("t")
        grown = type(assignment)({0: (2, 3), 1: (3, 2)}, assignment.topic_id)
        await asyncio.to_thread(c.admin.set_topic_assignment, "t", grown, version)
        for broker in (b2, b3):
            await wait_for(
                lambda broker=broker: lair_for(broker, ("t", 1), leader=3, isr=(3, 2)),
                f"LeaderAndIsr t-1 at broker {broker.broker_id}",
            )
        assert c.state("t", 0)[0].leader_epoch == 0  # the existing partition is untouched


@run
async def test_deletion_waits_for_a_dead_replica_to_return(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        await c.controller(1)
        await c.create_topic("gone", {0: (2, 3)})
        await wait_for(lambda: lair_for(b3, ("gone", 0), leader=2), "initial leader")
        await b3.die()
        await wait_for(lambda: c.state("gone", 0)[0].isr == (2,), "broker 3 out of the ISR")
        await asyncio.to_thread(c.admin.request_topic_deletion, "gone")
        await wait_for(lambda: any(r for r in b2.of(SR)), "StopReplica to broker 2")
        await asyncio.sleep(0.5)
        assert c.admin.get_topics() == ["gone"]  # broker 3's replica is not deleted yet
        b3 = await c.broker(3)
        await wait_for(lambda: c.admin.get_topics() == [], "deleted once broker 3 is back")
        assert any(
            p.delete_partition
            for r in b3.of(SR)
            for t in r.topic_states
            for p in t.partition_states
        )
        assert not b3.of(LAIR)  # a topic being deleted is not brought back online
