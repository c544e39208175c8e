"""The group coordinator follows the leadership of ``__consumer_offsets`` partitions.

The controller's LeaderAndIsr and StopReplica requests go through the real inter-broker
handlers (real logs underneath); cluster mode's internal-topic leadership callbacks drive
a coordinator of the group test harness over its in-memory offsets log, whose "local
leader" answer follows the replica states the handlers keep.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.cluster_mode import InternalTopicLeadership
from odradek.broker.group.offsets import OffsetCommitRequestData
from odradek.broker.handlers.interbroker import InterBrokerHandlers
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.offsets_topic import OFFSETS_TOPIC
from odradek.broker.partition import ReplicaStates
from odradek.broker.replica_manager import ReplicaManager
from odradek.protocol import interbroker
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.broker.group.harness import FakeOffsetsLog, Harness, wait
from tests.broker.test_interbroker_handlers import build, default_config, partition_state

ME = 1
OTHER = 2
G = "moving-group"
OFFSETS_ID = uuid.UUID("00000000-0000-0000-0000-00000000c0ff")


class LeaderFollowingLog(FakeOffsetsLog):
    """The in-memory offsets log, led here exactly when the replica states say so."""

    def __init__(self, states: ReplicaStates) -> None:
        super().__init__()
        self.states = states

    def is_local_leader(self, partition: int) -> bool:
        return self.states.leads(OFFSETS_TOPIC, partition)


def leader_and_isr(topic: str, index: int, leader: int, epoch: int) -> Any:
    state = partition_state(index, leader, epoch, [ME, OTHER], topic=topic)
    cls = interbroker.request_class(interbroker.LEADER_AND_ISR, 7)
    return build(
        cls,
        {
            "controller_id": 0,
            "controller_epoch": 1,
            "broker_epoch": -1,
            "type_": 0,
            "topic_states": [
                {"topic_name": topic, "topic_id": OFFSETS_ID, "partition_states": [state]}
            ],
            "live_leaders": [{"broker_id": leader, "host_name": "127.0.0.1", "port": 9092}],
        },
    )


def stop_replica(topic: str, index: int, epoch: int, *, delete: bool) -> Any:
    cls = interbroker.request_class(interbroker.STOP_REPLICA, 4)
    return build(
        cls,
        {
            "controller_id": 0,
            "controller_epoch": 1,
            "broker_epoch": -1,
            "topic_states": [
                {
                    "topic_name": topic,
                    "partition_states": [
                        {
                            "partition_index": index,
                            "leader_epoch": epoch,
                            "delete_partition": delete,
                        }
                    ],
                }
            ],
        },
    )


class Broker:
    """A broker's inter-broker handlers with a group coordinator hooked to them, wired
    the way the server wires them in cluster mode."""

    def __init__(self, data_dir: Path, harness: Harness | None = None) -> None:
        manager = LogManager(data_dir, LogConfig())
        manager.startup()
        self.states = ReplicaStates()
        self.handlers = InterBrokerHandlers(
            ME,
            replica_manager=ReplicaManager(ME, manager),
            metadata_cache=MetadataCache(ME),
            replica_states=self.states,
            log_config=default_config,
            broker_epoch=lambda: 100,
        )
        self.leadership = InternalTopicLeadership()
        self.handlers.leadership_listeners.append(self.leadership)
        self.log = LeaderFollowingLog(self.states)
        if harness is not None:
            self.log.partitions = harness.log.partitions  # the same stored records
        self.h = Harness(self.log)
        coordinator = self.h.coordinator
        self.leadership.register(
            OFFSETS_TOPIC,
            lambda p, _epoch: coordinator.schedule_load(p),
            lambda p, _epoch: coordinator.unload_partition(p),
        )
        self.partition = coordinator.partition_for(G)

    async def lead(self, epoch: int) -> None:
        response = await self.handlers.handle_leader_and_isr(
            None, leader_and_isr(OFFSETS_TOPIC, self.partition, ME, epoch)
        )
        assert response.error_code == ErrorCode.none

    async def follow(self, epoch: int) -> None:
        response = await self.handlers.handle_leader_and_isr(
            None, leader_and_isr(OFFSETS_TOPIC, self.partition, OTHER, epoch)
        )
        assert response.error_code == ErrorCode.none


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


async def committed_elsewhere(h: Harness) -> Harness:
    """A group G with offset 42 for t-0, stored by a previous coordinator."""
    await h.start()
    result = await h.coordinator.commit_offsets(
        group_id=G,
        member_id="",
        group_instance_id=None,
        generation_id=-1,
        offsets={("t", 0): _commit(42)},
    )
    assert result == {("t", 0): ErrorCode.none}
    return h


def _commit(offset: int) -> OffsetCommitRequestData:
    return OffsetCommitRequestData(offset=offset)


def fetched(h: Harness) -> tuple[ErrorCode, int | None]:
    error, offsets = h.coordinator.fetch_offsets(group_id=G, partitions=[("t", 0)])
    committed = offsets.get(("t", 0))
    return error, committed.offset if committed is not None else None


def test_becoming_leader_loads_the_partitions_groups(tmp_path: Path) -> None:
    async def scenario() -> None:
        previous = await committed_elsewhere(Harness())
        broker = Broker(tmp_path, previous)
        # Not the leader: not the coordinator.
        assert fetched(broker.h)[0] is ErrorCode.not_coordinator
        assert (await broker.h.join(G)).error is ErrorCode.not_coordinator
        await broker.lead(epoch=1)
        # Loading from the moment LeaderAndIsr is answered, until the load finishes.
        assert fetched(broker.h)[0] is ErrorCode.coordinator_load_in_progress
        assert broker.h.heartbeat(G, "m", 1) is ErrorCode.coordinator_load_in_progress
        await broker.h.settle()
        assert fetched(broker.h) == (ErrorCode.none, 42)
        assert broker.partition in broker.h.coordinator.owned_partitions()

    run(scenario())


def test_becoming_follower_unloads_and_answers_parked_requests(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path)
        await broker.lead(epoch=1)
        await broker.h.settle()
        (a, b), generation = await broker.h.stable_group(G, 2)
        parked = broker.h.join(G, a)  # a rebalance: a waits for b
        await broker.h.settle()
        await broker.follow(epoch=2)
        assert (await wait(parked)).error is ErrorCode.not_coordinator
        assert broker.h.heartbeat(G, b, generation) is ErrorCode.not_coordinator
        assert fetched(broker.h)[0] is ErrorCode.not_coordinator
        assert broker.h.coordinator.group(G) is None
        assert broker.partition not in broker.h.coordinator.owned_partitions()
        # Leading again (a later epoch) loads the group back from the log.
        await broker.lead(epoch=3)
        await broker.h.settle()
        assert broker.h.coordinator.group(G) is not None

    run(scenario())


@pytest.mark.parametrize("delete", [False, True])
def test_stop_replica_unloads(tmp_path: Path, delete: bool) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path)
        await broker.lead(epoch=1)
        await broker.h.settle()
        await broker.h.stable_group(G, 1)
        response = await broker.handlers.handle_stop_replica(
            None, stop_replica(OFFSETS_TOPIC, broker.partition, 1, delete=delete)
        )
        assert response.error_code == ErrorCode.none
        assert broker.h.coordinator.group(G) is None
        assert (await broker.h.join(G)).error is ErrorCode.not_coordinator

    run(scenario())


def test_unload_while_loading_stops_the_load(tmp_path: Path) -> None:
    async def scenario() -> None:
        previous = await committed_elsewhere(Harness())
        broker = Broker(tmp_path, previous)
        await broker.lead(epoch=1)
        await broker.follow(epoch=2)  # before the load task has run
        await broker.h.settle()
        assert fetched(broker.h)[0] is ErrorCode.not_coordinator
        assert broker.h.coordinator.group(G) is None
        assert not broker.h.coordinator.is_loading()

    run(scenario())


def test_other_topics_do_not_move_coordinators(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path)
        response = await broker.handlers.handle_leader_and_isr(
            None, leader_and_isr("t", broker.partition, ME, 1)
        )
        assert response.error_code == ErrorCode.none
        assert not broker.h.coordinator.is_loading()
        assert fetched(broker.h)[0] is ErrorCode.not_coordinator

    run(scenario())


def test_a_failing_listener_does_not_fail_the_controllers_request(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path)
        calls: list[int] = []

        def broken(partition: int, _epoch: int) -> None:
            calls.append(partition)
            raise RuntimeError("bug")

        broker.leadership.register(OFFSETS_TOPIC, broken, broken)
        await broker.lead(epoch=1)  # asserts NONE
        assert calls == [broker.partition]

    run(scenario())
