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


def lair_for(broker: FakeBroker, tp: tuple[str, int], **expected: Any) -> Any:
    """The last LeaderAndIsr state of ``tp`` the broker received, if it matches."""
    for request in reversed(broker.of(LAIR)):
        state = partition_states(request).get(tp)
        if state is not None:
            if all(getattr(state, k) == v for k, v in expected.items()):
                return (request, state)
            return None
    return None


def um_for(broker: FakeBroker, tp: tuple[str, int], **expected: Any) -> Any:
    for request in reversed(broker.of(UM)):
        state = partition_states(request).get(tp)
        if state is not None:
            if all(getattr(state, k) == v for k, v in expected.items()):
                return (request, state)
            return None
    return None


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
                lambda broker=broker: um_for(broker, ("orders", 0), leader=1)
                and um_for(broker, ("orders", 1), leader=2),
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
