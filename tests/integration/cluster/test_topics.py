"""Topics in cluster mode: CreateTopics/DeleteTopics write ZooKeeper, Metadata answers
from the metadata cache. Real ZooKeeper; brokers as subprocesses over the wire, and the
handlers called directly where the controller (not on this branch) would act."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.handlers.cluster_topics import ClusterTopicHandlers
from odradek.broker.metadata_cache import MetadataCache
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import BrokerEndpoint, BrokerRegistration
from odradek.protocol import interbroker
from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response
from tests.broker.test_interbroker_handlers import build, partition_state
from tests.helpers.broker import BrokerProcess
from tests.helpers.cluster import wait_for, zk_broker
from tests.helpers.raw import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(120)]

CREATE_TOPICS, DELETE_TOPICS, METADATA = 19, 20, 3


@pytest.fixture
def zk(zk_connect: str) -> Iterator[ZkClient]:
    client = ZkClient.connect(zk_connect, session_timeout_ms=6000)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str, zk: ZkClient) -> Iterator[list[BrokerProcess]]:
    brokers = [zk_broker(tmp_path, zk_connect, broker_id).start() for broker_id in (1, 2)]
    try:
        # A broker listens before it registers in /brokers/ids, and CreateTopics places
        # replicas on the registered brokers only: a request sent the moment broker 2's
        # port opens could see one broker and refuse replication factor 2.
        wait_for(lambda: zk.get_broker_ids() == [1, 2], 30, "both brokers registered")
        yield brokers
    finally:
        for broker in brokers:
            broker.stop()


def create_request(topic: dict[str, Any], timeout_ms: int = 15000) -> dict[str, Any]:
    entry = {"num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []}
    entry.update(topic)
    return {"topics": [entry], "timeout": timeout_ms, "validate_only": False}


def test_create_topics_writes_zookeeper_with_kafka_placement(
    cluster: list[BrokerProcess], zk: ZkClient
) -> None:
    raw = RawClient(cluster[0].port)
    response: Any = raw.call(
        CREATE_TOPICS,
        5,
        create_request(
            {
                "name": "orders",
                "num_partitions": 4,
                "replication_factor": 2,
                "configs": [{"name": "retention.ms", "value": "1000"}],
            }
        ),
    )
    [result] = response.topics
    # Written; the controller elects leaders and the answer waits for them.
    assert result.error_code == ErrorCode.none
    assert (result.num_partitions, result.replication_factor) == (4, 2)
    found = zk.get_topic_assignment("orders")
    assert found is not None
    assignment, _version = found
    assert sorted(assignment.partitions) == [0, 1, 2, 3]
    assert all(sorted(r) == [1, 2] for r in assignment.partitions.values())
    # (i + start) mod n: the preferred leaders alternate.
    leaders = [assignment.partitions[p][0] for p in range(4)]
    assert sorted(leaders) == [1, 1, 2, 2] and leaders[0] != leaders[1]
    assert zk.get_entity_config("topics", "orders") == {"retention.ms": "1000"}
    # Asking again: the topic exists.
    again: Any = raw.call(CREATE_TOPICS, 5, create_request({"name": "orders", "num_partitions": 1}))
    assert again.topics[0].error_code == ErrorCode.topic_already_exists


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        ({"num_partitions": 1, "replication_factor": 3}, ErrorCode.invalid_replication_factor),
        (
            {"assignments": [{"partition_index": 0, "broker_ids": [1, 9]}]},
            ErrorCode.invalid_replica_assignment,
        ),
        (
            {"num_partitions": 1, "configs": [{"name": "cleanup.policy", "value": "x"}]},
            ErrorCode.invalid_config,
        ),
    ],
)
def test_bad_create_topics_creates_nothing(
    cluster: list[BrokerProcess], zk: ZkClient, topic: dict[str, Any], code: ErrorCode
) -> None:
    raw = RawClient(cluster[1].port)
    response: Any = raw.call(CREATE_TOPICS, 5, create_request({"name": "bad", **topic}))
    assert response.topics[0].error_code == code
    assert zk.get_topic_assignment("bad") is None


def test_metadata_and_delete_of_an_unknown_topic(cluster: list[BrokerProcess]) -> None:
    raw = RawClient(cluster[0].port)
    metadata: Any = raw.call(
        METADATA,
        9,
        {
            "topics": [{"name": "nope"}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    assert metadata.controller_id in (-1, 1, 2)  # -1 until the first UpdateMetadata
    assert metadata.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    deleted: Any = raw.call(DELETE_TOPICS, 4, {"topic_names": ["nope"], "timeout": 100})
    assert deleted.responses[0].error_code == ErrorCode.unknown_topic_or_partition


def _handlers(zk: ZkClient, cache: MetadataCache) -> ClusterTopicHandlers:
    settings = {
        "num.partitions": 1,
        "default.replication.factor": 1,
        "auto.create.topics.enable": True,
        "delete.topic.enable": True,
    }
    return ClusterTopicHandlers(1, "cid", zk, cache, settings.__getitem__, lambda _c: None)


def _ctx(api_key: int, version: int) -> Any:
    return types.SimpleNamespace(
        header=types.SimpleNamespace(api_key=api_key, api_version=version, correlation_id=7),
        listener_name="PLAINTEXT",
        authz=None,  # no authorizer: Metadata answers may be kept encoded
    )


def _decoded(answer: Any, version: int = 9) -> Any:
    """A Metadata answer (kept encoded: a ChunkedResponse) as the response entity."""
    frame = b"".join(answer.chunks)
    correlation, response = decode_response(3, version, frame[4:])
    assert correlation == 7 and len(frame) - 4 == int.from_bytes(frame[:4], "big")
    return response


def _update(cache: MetadataCache, states: list[dict[str, Any]]) -> None:
    cls = interbroker.request_class(interbroker.UPDATE_METADATA, 7)
    cache.update(
        build(
            cls,
            {
                "controller_id": 1,
                "controller_epoch": 1,
                "broker_epoch": -1,
                "topic_states": [{"topic_name": "t", "topic_id": None, "partition_states": states}],
                "live_brokers": [
                    {
                        "id_": 1,
                        "endpoints": [
                            {
                                "port": 9,
                                "host": "h",
                                "listener": "PLAINTEXT",
                                "security_protocol": 0,
                            }
                        ],
                        "rack": None,
                    }
                ],
            },
        )
    )


def test_create_topics_waits_for_leaders_in_the_cache(zk: ZkClient) -> None:
    """Kafka's DelayedCreatePartitions: the answer comes once UpdateMetadata shows every
    new partition with a leader (here the test plays the controller)."""
    zk.create_top_level_paths()
    zk.register_broker(BrokerRegistration(1, (BrokerEndpoint("PLAINTEXT", "h", 9, "PLAINTEXT"),)))

    async def scenario() -> tuple[Any, Any]:
        cache = MetadataCache(1)
        handlers = _handlers(zk, cache)
        request = build_request(
            CREATE_TOPICS, 5, create_request({"name": "t", "num_partitions": 2}, 20_000)
        )
        pending = asyncio.ensure_future(handlers.handle_create_topics(_ctx(19, 5), request))
        await asyncio.sleep(0.3)
        assert not pending.done()
        _update(cache, [partition_state(0, 1, 0, [1])])
        await asyncio.sleep(0.1)
        assert not pending.done()  # partition 1 still missing
        _update(cache, [partition_state(1, 1, 0, [1])])
        response = await asyncio.wait_for(pending, 5)
        metadata = await handlers.handle_metadata(
            _ctx(3, 9),
            build_request(
                3,
                9,
                {
                    "topics": [{"name": "t"}],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            ),
        )
        return response, _decoded(metadata)

    response, metadata = asyncio.run(scenario())
    assert response.topics[0].error_code == ErrorCode.none
    assert zk.get_topic_assignment("t") is not None
    [topic] = metadata.topics
    assert [(p.partition_index, p.leader_id, p.error_code) for p in topic.partitions] == [
        (0, 1, ErrorCode.none),
        (1, 1, ErrorCode.none),
    ]
    assert metadata.controller_id == 1
    assert [(b.node_id, b.host, b.port) for b in metadata.brokers] == [(1, "h", 9)]


def test_metadata_reports_leader_not_available(zk: ZkClient) -> None:
    async def scenario() -> Any:
        cache = MetadataCache(1)
        _update(cache, [partition_state(0, -1, 0, [1, 2]), partition_state(1, 2, 0, [1, 2])])
        return await _handlers(zk, cache).handle_metadata(
            _ctx(3, 9),
            build_request(
                3,
                9,
                {
                    "topics": [{"name": "t"}],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            ),
        )

    [topic] = _decoded(asyncio.run(scenario())).topics
    # Partition 1's leader (broker 2) is not among the live brokers: not available either.
    assert [(p.leader_id, p.error_code) for p in topic.partitions] == [
        (-1, ErrorCode.leader_not_available),
        (-1, ErrorCode.leader_not_available),
    ]
    assert list(topic.partitions[0].replica_nodes) == [1, 2]


def test_metadata_topic_entries_are_reused_until_the_cache_changes(zk: ZkClient) -> None:
    request = build_request(
        3,
        9,
        {
            "topics": [{"name": "t"}, {"name": "unknown"}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )

    async def scenario() -> list[Any]:
        cache = MetadataCache(1)
        handlers = _handlers(zk, cache)
        _update(cache, [partition_state(0, 1, 0, [1])])
        first = await handlers.handle_metadata(_ctx(3, 9), request)
        second = await handlers.handle_metadata(_ctx(3, 9), request)
        _update(cache, [partition_state(0, 1, 1, [1])])
        third = await handlers.handle_metadata(_ctx(3, 9), request)
        return [first, second, third]

    first, second, third = asyncio.run(scenario())
    assert first.chunks[1] is second.chunks[1]  # encoded once, then kept
    assert _decoded(first).topics[1].error_code == ErrorCode.unknown_topic_or_partition
    assert third.chunks[1] != first.chunks[1]
    assert _decoded(third).topics[0].partitions[0].leader_epoch == 1  # the change shows


def test_kept_metadata_answers_follow_isr_changes_and_deletions(zk: ZkClient) -> None:
    every_topic = build_request(3, 9, {"topics": None, "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})  # fmt: skip

    async def scenario() -> list[Any]:
        cache = MetadataCache(1)
        handlers = _handlers(zk, cache)
        answers = []
        _update(cache, [partition_state(0, 1, 0, [1])])
        answers.append(await handlers.handle_metadata(_ctx(3, 9), every_topic))
        answers.append(await handlers.handle_metadata(_ctx(3, 9), every_topic))
        state = partition_state(0, 1, 0, [1])
        state["isr"] = []  # an ISR change alone, same leader and epoch
        _update(cache, [state])
        answers.append(await handlers.handle_metadata(_ctx(3, 9), every_topic))
        _update(cache, [partition_state(0, -2, 0, [1])])  # the controller deletes the topic
        answers.append(await handlers.handle_metadata(_ctx(3, 9), every_topic))
        return [_decoded(a) for a in answers]

    kept, again, isr_changed, deleted = asyncio.run(scenario())
    assert [t.name for t in kept.topics] == [t.name for t in again.topics] == ["t"]
    assert list(kept.topics[0].partitions[0].isr_nodes) == [1]
    assert list(isr_changed.topics[0].partitions[0].isr_nodes) == []
    assert [t.name for t in deleted.topics] == []


def test_create_partitions_extends_the_assignment_in_zookeeper(
    cluster: list[BrokerProcess], zk: ZkClient
) -> None:
    raw = RawClient(cluster[0].port)
    raw.call(CREATE_TOPICS, 5, create_request({"name": "grow", "num_partitions": 2,
                                              "replication_factor": 2}, 0))  # fmt: skip
    before, _ = zk.get_topic_assignment("grow") or (None, None)
    assert before is not None and len(before.partitions) == 2

    def grow(count: int, assignments: list[list[int]] | None = None, name: str = "grow") -> Any:
        topic = {"name": name, "count": count, "assignments": None}
        if assignments is not None:
            topic["assignments"] = [{"broker_ids": a} for a in assignments]
        response: Any = raw.call(37, 3, {"topics": [topic], "timeout": 0, "validate_only": False})
        return response.results[0].error_code

    assert grow(4) == ErrorCode.none
    after, _ = zk.get_topic_assignment("grow") or (None, None)
    assert after is not None and sorted(after.partitions) == [0, 1, 2, 3]
    assert {p: after.partitions[p] for p in (0, 1)} == dict(before.partitions)  # untouched
    assert all(sorted(after.partitions[p]) == [1, 2] for p in (2, 3))
    assert after.topic_id == before.topic_id
    assert grow(3) == ErrorCode.invalid_partitions
    assert grow(4) == ErrorCode.invalid_partitions
    assert grow(5, [[1, 9]]) == ErrorCode.invalid_replica_assignment
    assert grow(6, [[1, 2]]) == ErrorCode.invalid_replica_assignment  # 2 added, 1 given
    assert grow(5, [[2, 1]]) == ErrorCode.none
    final, _ = zk.get_topic_assignment("grow") or (None, None)
    assert final is not None and final.partitions[4] == (2, 1)
    assert grow(2, name="missing") == ErrorCode.unknown_topic_or_partition
