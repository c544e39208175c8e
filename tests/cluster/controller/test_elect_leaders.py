"""Controller.elect_leaders (the ElectLeaders API's controller side) against a real
ZooKeeper and in-test brokers, with Kafka's per-partition answers."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from tests.cluster.controller.fake_broker import wait_for
from tests.cluster.controller.test_controller import cluster, lair_for, run
from tests.helpers.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.zookeeper,
    pytest.mark.timeout(120),
    pytest.mark.skipif(not zookeeper_available(), reason="needs ZooKeeper"),
]
PREFERRED, UNCLEAN = 0, 1


@run
async def test_preferred_election_on_request(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        controller = await c.controller(1)
        standby = await c.controller(2)
        await c.create_topic("t", {0: (2, 3), 1: (3, 2)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2), "initial leader")
        await b2.die()
        await wait_for(lambda: c.state("t", 0)[0].leader == 3, "broker 3 leads t-0")
        b2 = await c.broker(2)
        await wait_for(lambda: lair_for(b2, ("t", 0), leader=3), "broker 2 back as follower")

        # Not yet back in the ISR: the preferred replica cannot lead.
        results = await controller.elect_leaders({("t", 0)}, PREFERRED)
        assert results[("t", 0)].error_code == ErrorCode.preferred_leader_not_available
        assert "PreferredReplicaPartitionLeaderElectionStrategy" in str(results[("t", 0)].message)

        state, version = c.state("t", 0)
        c.admin.update_partition_state(
            "t", 0, type(state)(3, state.leader_epoch, (3, 2), state.controller_epoch), version
        )
        wanted = {("t", 0), ("t", 1), ("t", 7), ("nope", 0)}
        results = await controller.elect_leaders(wanted, PREFERRED)
        assert (results[("t", 0)].error_code, results[("t", 0)].leader) == (ErrorCode.none, 2)
        assert results[("t", 1)].error_code == ErrorCode.election_not_needed
        for unknown in (("t", 7), ("nope", 0)):
            assert results[unknown].error_code == ErrorCode.unknown_topic_or_partition
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2, isr=(3, 2)), "broker 2 leads")
        assert c.state("t", 0)[0].leader == 2

        # Only the active controller elects (Kafka: NOT_CONTROLLER elsewhere).
        results = await standby.elect_leaders({("t", 0)}, PREFERRED)
        assert results == {("t", 0): type(results[("t", 0)])(ErrorCode.not_controller)}


@run
async def test_unclean_election_on_request(zk_connect: str) -> None:
    async with cluster(zk_connect) as c:
        _b1, b2, b3 = [await c.broker(i) for i in (1, 2, 3)]
        controller = await c.controller(1)  # unclean.leader.election.enable is false
        await c.create_topic("t", {0: (2, 3)})
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=2), "initial leader")
        results = await controller.elect_leaders({("t", 0)}, UNCLEAN)
        assert results[("t", 0)].error_code == ErrorCode.election_not_needed

        # Broker 3 falls out of the ISR, then the leader dies: no clean leader.
        state, version = c.state("t", 0)
        c.admin.update_partition_state(
            "t", 0, type(state)(2, state.leader_epoch, (2,), state.controller_epoch), version
        )
        await b2.die()
        await wait_for(lambda: c.state("t", 0)[0].leader == -1, "t-0 offline")
        results = await controller.elect_leaders({("t", 0)}, PREFERRED)
        assert results[("t", 0)].error_code == ErrorCode.preferred_leader_not_available

        results = await controller.elect_leaders({("t", 0)}, UNCLEAN)
        assert (results[("t", 0)].error_code, results[("t", 0)].leader) == (ErrorCode.none, 3)
        await wait_for(lambda: lair_for(b3, ("t", 0), leader=3, isr=(3,)), "unclean leader 3")
        state, _version = await asyncio.to_thread(c.state, "t", 0)
        assert state.leader_recovery_state == 1
