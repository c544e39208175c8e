"""The controller's requests, served by a broker: constructed request objects of the
inter-broker types, handlers called directly, real logs underneath (one layer down)."""

from __future__ import annotations

import asyncio
import dataclasses
import typing
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.handlers.interbroker import InterBrokerHandlers
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.partition import ReplicaStates, Role
from odradek.broker.replica_manager import NOT_LEADER_OR_FOLLOWER, ReplicaManager
from odradek.protocol import interbroker
from odradek.storage import checkpoint as checkpoint_module
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.storage.conftest import make_batch

ME = 1
TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def build(cls: type, values: dict[str, Any]) -> Any:
    """A generated dataclass from plain values: nested lists of dicts become elements;
    keys the version does not have are dropped, so one dict serves every version."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        annotation = f.type
        args = typing.get_args(annotation)
        while args and typing.get_origin(annotation) is not tuple:
            annotation = args[0]
            args = typing.get_args(annotation)
        if isinstance(value, list) and args and dataclasses.is_dataclass(args[0]):
            value = tuple(build(args[0], v) for v in value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def partition_state(
    index: int, leader: int, epoch: int, replicas: list[int], topic: str = "t"
) -> dict[str, Any]:
    return {
        "topic_name": topic,
        "partition_index": index,
        "controller_epoch": 1,
        "leader": leader,
        "leader_epoch": epoch,
        "isr": replicas,
        "partition_epoch": 3,
        "zk_version": 3,
        "replicas": replicas,
        "adding_replicas": [],
        "removing_replicas": [],
        "offline_replicas": [],
        "is_new": True,
    }


def leader_and_isr(
    states: list[dict[str, Any]], *, controller_epoch: int = 1, version: int = 7, **extra: Any
) -> Any:
    cls = interbroker.request_class(interbroker.LEADER_AND_ISR, version)
    values: dict[str, Any] = {
        "controller_id": 0,
        "controller_epoch": controller_epoch,
        "broker_epoch": -1,
        "type_": 0,
        "ungrouped_partition_states": states,
        "topic_states": [{"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": states}],
        "live_leaders": [{"broker_id": 0, "host_name": "127.0.0.1", "port": 9092}],
        **extra,
    }
    return build(cls, values)


def update_metadata(
    states: list[dict[str, Any]], *, controller_epoch: int = 1, version: int = 8
) -> Any:
    cls = interbroker.request_class(interbroker.UPDATE_METADATA, version)
    broker = {
        "id_": 2,
        "v0_host": "127.0.0.2",
        "v0_port": 9093,
        "endpoints": [
            {"port": 9093, "host": "127.0.0.2", "listener": "PLAINTEXT", "security_protocol": 0}
        ],
        "rack": "r2",
    }
    return build(
        cls,
        {
            "controller_id": 2,
            "controller_epoch": controller_epoch,
            "broker_epoch": -1,
            "ungrouped_partition_states": states,
            "topic_states": [{"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": states}],
            "live_brokers": [broker],
        },
    )


def stop_replica(
    partitions: list[tuple[int, int, bool]], *, controller_epoch: int = 1, version: int = 4
) -> Any:
    cls = interbroker.request_class(interbroker.STOP_REPLICA, version)
    return build(
        cls,
        {
            "controller_id": 0,
            "controller_epoch": controller_epoch,
            "broker_epoch": -1,
            "delete_partitions": partitions[0][2],
            "ungrouped_partitions": [
                {"topic_name": "t", "partition_index": i} for i, _e, _d in partitions
            ],
            "topics": [{"name": "t", "partition_indexes": [i for i, _e, _d in partitions]}],
            "topic_states": [
                {
                    "topic_name": "t",
                    "partition_states": [
                        {"partition_index": i, "leader_epoch": e, "delete_partition": d}
                        for i, e, d in partitions
                    ],
                }
            ],
        },
    )


async def default_config(_topic: str) -> LogConfig:
    return LogConfig()


@pytest.fixture
def broker(tmp_path: Path) -> InterBrokerHandlers:
    manager = LogManager(tmp_path, LogConfig())
    manager.startup()
    cache = MetadataCache(ME)
    replicas = ReplicaManager(ME, manager)
    replicas.known_in_cluster = cache.contains
    return InterBrokerHandlers(
        ME,
        replica_manager=replicas,
        metadata_cache=cache,
        replica_states=ReplicaStates(),
        log_config=default_config,
        broker_epoch=lambda: 100,
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def partition_errors(response: Any) -> list[tuple[int, ErrorCode]]:
    if hasattr(response, "topics"):
        return [
            (p.partition_index, p.error_code) for t in response.topics for p in t.partition_errors
        ]
    return [(p.partition_index, p.error_code) for p in response.partition_errors]


@pytest.mark.parametrize("version", [0, 1, 2, 4, 5, 7])
def test_leader_and_isr_makes_leader_and_follower(
    broker: InterBrokerHandlers, version: int
) -> None:
    request = leader_and_isr(
        [partition_state(0, ME, 0, [ME, 2]), partition_state(1, 2, 4, [2, ME])], version=version
    )
    response = run(broker.handle_leader_and_isr(None, request))
    assert response.error_code == ErrorCode.none
    assert partition_errors(response) == [(0, ErrorCode.none), (1, ErrorCode.none)]
    leader = broker.states.get("t", 0)
    follower = broker.states.get("t", 1)
    assert leader is not None and leader.role is Role.LEADER and leader.leader_epoch == 0
    assert leader.isr == [ME, 2] and leader.zk_version == 3
    assert follower is not None and follower.role is Role.FOLLOWER and follower.leader == 2
    assert follower.leader_epoch == 4
    # Both logs exist; the leader recorded its epoch's start in the leader-epoch cache.
    led = broker.replica_manager.partition("t", 0)
    assert led is not None and led.log.leader_epoch_cache.latest_epoch() == 0
    followed = broker.replica_manager.partition("t", 1)
    assert followed is not None
    # Clients may produce to the leader only.
    assert (
        broker.replica_manager.append("t", 0, make_batch([b"a"]), required_acks=1).error_code == 0
    )
    follower_append = broker.replica_manager.append("t", 1, make_batch([b"a"]), required_acks=1)
    assert follower_append.error_code == NOT_LEADER_OR_FOLLOWER
    assert broker.replica_manager.read("t", 1, 0, 1000).error_code == NOT_LEADER_OR_FOLLOWER
    if version >= 5:
        assert response.topics[0].topic_id == TOPIC_ID
        assert followed.log.topic_id == TOPIC_ID


def test_leader_and_isr_stale_leader_epoch_is_refused(broker: InterBrokerHandlers) -> None:
    run(broker.handle_leader_and_isr(None, leader_and_isr([partition_state(0, ME, 5, [ME])])))
    for epoch in (5, 4):  # equal or older: Kafka answers STALE_CONTROLLER_EPOCH
        response = run(
            broker.handle_leader_and_isr(
                None, leader_and_isr([partition_state(0, 2, epoch, [ME, 2])])
            )
        )
        assert partition_errors(response) == [(0, ErrorCode.stale_controller_epoch)]
    state = broker.states.get("t", 0)
    assert state is not None and state.role is Role.LEADER and state.leader_epoch == 5
    # A newer epoch moves leadership away.
    response = run(
        broker.handle_leader_and_isr(None, leader_and_isr([partition_state(0, 2, 6, [ME, 2])]))
    )
    assert partition_errors(response) == [(0, ErrorCode.none)]
    assert state.role is Role.FOLLOWER
    assert broker.replica_manager.append(
        "t", 0, make_batch([b"a"]), required_acks=1
    ).error_code == (NOT_LEADER_OR_FOLLOWER)


def test_leader_and_isr_not_in_replicas(broker: InterBrokerHandlers) -> None:
    response = run(
        broker.handle_leader_and_isr(None, leader_and_isr([partition_state(0, 2, 0, [2, 3])]))
    )
    assert partition_errors(response) == [(0, ErrorCode.unknown_topic_or_partition)]
    assert broker.replica_manager.partition("t", 0) is None


def test_stale_controller_epoch_fences_every_request(broker: InterBrokerHandlers) -> None:
    run(broker.handle_update_metadata(None, update_metadata([], controller_epoch=3)))
    old = run(
        broker.handle_leader_and_isr(
            None, leader_and_isr([partition_state(0, ME, 0, [ME])], controller_epoch=2)
        )
    )
    assert old.error_code == ErrorCode.stale_controller_epoch
    assert partition_errors(old) == [(0, ErrorCode.stale_controller_epoch)]
    assert broker.replica_manager.partition("t", 0) is None
    stale_um = run(broker.handle_update_metadata(None, update_metadata([], controller_epoch=2)))
    assert stale_um.error_code == ErrorCode.stale_controller_epoch
    stale_stop = run(
        broker.handle_stop_replica(None, stop_replica([(0, 0, True)], controller_epoch=2))
    )
    assert stale_stop.error_code == ErrorCode.stale_controller_epoch


def test_stale_broker_epoch_is_refused(broker: InterBrokerHandlers) -> None:
    request = leader_and_isr([partition_state(0, ME, 0, [ME])], broker_epoch=99)
    response = run(broker.handle_leader_and_isr(None, request))
    assert response.error_code == ErrorCode.stale_broker_epoch
    current = leader_and_isr([partition_state(0, ME, 0, [ME])], broker_epoch=100)
    assert run(broker.handle_leader_and_isr(None, current)).error_code == ErrorCode.none


@pytest.mark.parametrize("version", [0, 4, 5, 7, 8])
def test_update_metadata_fills_the_cache(broker: InterBrokerHandlers, version: int) -> None:
    states = [partition_state(0, 2, 1, [2, ME]), partition_state(1, -1, 1, [2, ME])]
    response = run(broker.handle_update_metadata(None, update_metadata(states, version=version)))
    assert response.error_code == ErrorCode.none
    cache = broker.cache
    assert cache.controller_id == 2
    [live] = cache.live_brokers()
    assert (live.broker_id, live.host, live.port) == (2, "127.0.0.2", 9093)
    assert live.rack == ("r2" if version >= 2 else None)
    p0 = cache.partition("t", 0)
    assert p0 is not None and p0.leader == 2 and p0.replicas == (2, ME) and p0.leader_epoch == 1
    assert cache.partition("t", 1) is not None and cache.partition("t", 1).leader == -1
    # A partition the cluster knows but this broker does not host: NOT_LEADER_OR_FOLLOWER.
    rm = broker.replica_manager
    assert (
        rm.append("t", 0, make_batch([b"a"]), required_acks=1).error_code == NOT_LEADER_OR_FOLLOWER
    )
    assert rm.append("nope", 0, make_batch([b"a"]), required_acks=1).error_code == 3
    generation = cache.generation
    # The controller deleting the topic: leader -2 removes it from the cache.
    gone = [partition_state(0, -2, 1, [2, ME]), partition_state(1, -2, 1, [2, ME])]
    run(broker.handle_update_metadata(None, update_metadata(gone, version=version)))
    assert cache.partitions("t") is None and cache.generation == generation + 1


@pytest.mark.parametrize("version", [0, 1, 3, 4])
def test_stop_replica_delete_removes_the_log(
    broker: InterBrokerHandlers, tmp_path: Path, version: int
) -> None:
    run(broker.handle_leader_and_isr(None, leader_and_isr([partition_state(0, ME, 2, [ME])])))
    assert (tmp_path / "t-0").exists()
    response = run(broker.handle_stop_replica(None, stop_replica([(0, 2, True)], version=version)))
    assert response.error_code == ErrorCode.none
    assert partition_errors(response) == [(0, ErrorCode.none)]
    assert broker.replica_manager.partition("t", 0) is None
    assert broker.states.get("t", 0) is None
    assert not (tmp_path / "t-0").exists()


def test_stop_replica_without_delete_stops_leading_and_keeps_the_log(
    broker: InterBrokerHandlers, tmp_path: Path
) -> None:
    run(broker.handle_leader_and_isr(None, leader_and_isr([partition_state(0, ME, 2, [ME])])))
    assert (
        broker.replica_manager.append("t", 0, make_batch([b"a"]), required_acks=1).error_code == 0
    )
    # An older leader epoch is fenced; the partition keeps leading.
    fenced = run(broker.handle_stop_replica(None, stop_replica([(0, 1, False)])))
    assert partition_errors(fenced) == [(0, ErrorCode.fenced_leader_epoch)]
    assert broker.states.leads("t", 0)
    response = run(broker.handle_stop_replica(None, stop_replica([(0, 2, False)])))
    assert partition_errors(response) == [(0, ErrorCode.none)]
    assert not broker.states.leads("t", 0)
    assert broker.replica_manager.partition("t", 0) is None
    assert (tmp_path / "t-0").exists()  # the data stays


def test_a_replica_stopped_without_delete_serves_again_after_leader_and_isr(
    broker: InterBrokerHandlers,
) -> None:
    """A broker restarted within its session is told to follow, then StopReplica (the
    controller handling its old incarnation), then follow again: the log must take
    appends again, not stay closed (found by the fault campaign)."""
    run(broker.handle_leader_and_isr(None, leader_and_isr([partition_state(0, ME, 2, [ME])])))
    first = broker.replica_manager.append("t", 0, make_batch([b"a"]), required_acks=1)
    assert first.error_code == 0
    run(broker.handle_stop_replica(None, stop_replica([(0, 2, False)])))
    run(broker.handle_leader_and_isr(None, leader_and_isr([partition_state(0, ME, 3, [ME])])))
    result = broker.replica_manager.append("t", 0, make_batch([b"b"]), required_acks=1)
    assert result.error_code == 0
    partition = broker.replica_manager.partition("t", 0)
    assert partition is not None and partition.log.log_end_offset == 2


def test_controlled_shutdown_needs_the_controller(broker: InterBrokerHandlers) -> None:
    cls = interbroker.request_class(interbroker.CONTROLLED_SHUTDOWN, 3)
    request = cls(broker_id=2, broker_epoch=7)
    response = run(broker.handle_controlled_shutdown(None, request))
    assert response.error_code == ErrorCode.not_controller
    calls = []

    async def hook(broker_id: int, broker_epoch: int) -> tuple[int, list[tuple[str, int]]]:
        calls.append((broker_id, broker_epoch))
        return 0, [("t", 3)]

    broker.controlled_shutdown_hook = hook
    response = run(broker.handle_controlled_shutdown(None, request))
    assert calls == [(2, 7)]
    assert response.error_code == ErrorCode.none
    assert [(p.topic_name, p.partition_index) for p in response.remaining_partitions] == [("t", 3)]
    # The response encodes in its wire format.
    assert interbroker.encode_body(response)


def test_stop_replica_of_a_partition_never_hosted(broker: InterBrokerHandlers) -> None:
    # A topic deleted while this broker was down: nothing to remove, still NONE (Kafka).
    response = run(broker.handle_stop_replica(None, stop_replica([(5, -2, True)])))
    assert partition_errors(response) == [(5, ErrorCode.none)]


def test_leader_and_isr_for_many_partitions_reads_each_topic_config_once(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    manager.startup()
    asked: list[str] = []

    async def counting_config(topic: str) -> LogConfig:
        asked.append(topic)
        return LogConfig(segment_bytes=1 << 20)

    handlers = InterBrokerHandlers(
        ME,
        replica_manager=ReplicaManager(ME, manager),
        metadata_cache=MetadataCache(ME),
        replica_states=ReplicaStates(),
        log_config=counting_config,
        broker_epoch=lambda: 100,
    )
    states = [partition_state(i, ME if i % 2 else 2, 0, [ME, 2]) for i in range(60)]
    response = run(handlers.handle_leader_and_isr(None, leader_and_isr(states)))
    assert partition_errors(response) == [(i, ErrorCode.none) for i in range(60)]
    assert asked == ["t"]  # once for the topic, not once per partition
    for i in range(60):
        partition = handlers.replica_manager.partition("t", i)
        assert partition is not None and partition.log.config.segment_bytes == 1 << 20
        assert partition.log.topic_id == TOPIC_ID
    assert handlers.replica_manager.partition("t", 1).log.leader_epoch_cache.latest_epoch() == 0  # type: ignore[union-attr]
    # A topic whose config cannot be read fails its partitions alone.

    async def failing_config(topic: str) -> LogConfig:
        raise RuntimeError("ZooKeeper unreachable")

    handlers.log_config = failing_config
    response = run(
        handlers.handle_leader_and_isr(None, leader_and_isr([partition_state(60, ME, 0, [ME])]))
    )
    assert partition_errors(response) == [(60, ErrorCode.kafka_storage_error)]
    assert handlers.replica_manager.partition("t", 60) is None


def test_becoming_leader_of_a_non_empty_log_costs_no_checkpoint_write(
    broker: InterBrokerHandlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler runs on the event loop, once per partition of the request: the new
    epoch's entry stays in memory until the log's flush writes and syncs it."""
    run(broker.handle_leader_and_isr(None, leader_and_isr([partition_state(0, ME, 0, [ME, 2])])))
    appended = broker.replica_manager.append("t", 0, make_batch([b"a"]), required_acks=1)
    assert appended.error_code == 0
    log_ = broker.replica_manager.partition("t", 0).log  # type: ignore[union-attr]
    log_.flush()
    checkpoint = log_.directory / "leader-epoch-checkpoint"
    before = checkpoint.read_text()
    writes: list[object] = []
    monkeypatch.setattr(checkpoint_module.os, "fsync", lambda fd: writes.append(fd))
    request = leader_and_isr([partition_state(0, ME, 3, [ME, 2])], controller_epoch=2)
    response = run(broker.handle_leader_and_isr(None, request))
    assert partition_errors(response) == [(0, ErrorCode.none)]
    assert log_.leader_epoch_cache.entries == [(0, 0), (3, 1)]
    assert writes == [] and checkpoint.read_text() == before
    monkeypatch.undo()
    log_.flush()
    assert checkpoint.read_text() == "0\n2\n0 0\n3 1\n"
