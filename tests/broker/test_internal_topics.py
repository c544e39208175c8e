"""Naming an internal topic's coordinator from the metadata cache, and creating the topic
on first use (Kafka's getCoordinator + AutoTopicCreationManager), one layer down: the
cache fed by constructed UpdateMetadata requests, topic creation recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from odradek.broker.internal_topics import InternalTopicCoordinators, InternalTopicSpec
from odradek.broker.metadata_cache import MetadataCache
from odradek.cluster.metadata import MetadataError
from odradek.protocol import interbroker
from tests.broker.test_interbroker_handlers import TOPIC_ID, build, partition_state

OFFSETS = "__consumer_offsets"
SPEC = InternalTopicSpec(
    OFFSETS, 50, 2, "offsets.topic.replication.factor", {"cleanup.policy": "compact"}
)


def broker(broker_id: int, *listeners: tuple[str, str, int]) -> dict[str, Any]:
    return {
        "id_": broker_id,
        "endpoints": [
            {"listener": name, "host": host, "port": port, "security_protocol": 0}
            for name, host, port in listeners
        ],
        "rack": None,
    }


def update(cache: MetadataCache, brokers: list[dict[str, Any]], leaders: dict[int, int]) -> None:
    states = [
        {**partition_state(p, leader, 1, [1, 2], topic=OFFSETS), "topic_name": OFFSETS}
        for p, leader in leaders.items()
    ]
    cls = interbroker.request_class(interbroker.UPDATE_METADATA, 8)
    cache.update(
        build(
            cls,
            {
                "controller_id": 1,
                "controller_epoch": 1,
                "broker_epoch": -1,
                "topic_states": [
                    {"topic_name": OFFSETS, "topic_id": TOPIC_ID, "partition_states": states}
                ]
                if states
                else [],
                "live_brokers": brokers,
            },
        )
    )


class Recorder:
    def __init__(self, error: MetadataError | None = None) -> None:
        self.calls: list[tuple[str, int, int, dict[str, str]]] = []
        self.error = error

    async def __call__(self, name: str, parts: int, rf: int, configs: Mapping[str, str]) -> None:
        self.calls.append((name, parts, rf, dict(configs)))
        if self.error is not None:
            raise self.error


TWO = [
    broker(1, ("PLAINTEXT", "127.0.0.1", 9091), ("INTERNAL", "127.0.0.2", 19091)),
    broker(2, ("PLAINTEXT", "127.0.0.1", 9092)),
]


def test_missing_topic_is_created_once_and_there_is_no_coordinator_yet() -> None:
    async def scenario() -> None:
        cache, created = MetadataCache(1), Recorder()
        update(cache, TWO, {})
        lookup = InternalTopicCoordinators(cache, created)
        assert lookup.coordinator(SPEC, 3, "PLAINTEXT") is None
        assert lookup.coordinator(SPEC, 3, "PLAINTEXT") is None  # in flight: not again
        await asyncio.sleep(0.01)
        assert created.calls == [(OFFSETS, 50, 2, {"cleanup.policy": "compact"})]
        assert lookup.partition_count(OFFSETS) is None

    asyncio.run(scenario())


@pytest.mark.parametrize("error", ["TOPIC_ALREADY_EXISTS", "REQUEST_TIMED_OUT"])
def test_a_failed_creation_is_tried_again_on_the_next_question(error: str) -> None:
    async def scenario() -> None:
        cache, created = MetadataCache(1), Recorder(MetadataError(error, "no"))
        update(cache, TWO, {})
        lookup = InternalTopicCoordinators(cache, created)
        lookup.coordinator(SPEC, 0, "PLAINTEXT")
        await asyncio.sleep(0.01)
        lookup.coordinator(SPEC, 0, "PLAINTEXT")
        await asyncio.sleep(0.01)
        assert len(created.calls) == 2

    asyncio.run(scenario())


def test_too_few_live_brokers_creates_nothing() -> None:
    async def scenario() -> None:
        cache, created = MetadataCache(1), Recorder()
        update(cache, TWO[:1], {})
        lookup = InternalTopicCoordinators(cache, created)
        assert lookup.coordinator(SPEC, 0, "PLAINTEXT") is None
        await asyncio.sleep(0.01)
        assert created.calls == []

    asyncio.run(scenario())


def test_the_leader_is_named_for_the_listener_asked_on() -> None:
    cache = MetadataCache(2)
    update(cache, TWO, {0: 1, 1: 2, 2: -1, 3: 7})
    lookup = InternalTopicCoordinators(cache, Recorder())
    assert lookup.partition_count(OFFSETS) == 4
    assert lookup.coordinator(SPEC, 0, "PLAINTEXT") == (1, "127.0.0.1", 9091)
    assert lookup.coordinator(SPEC, 0, "INTERNAL") == (1, "127.0.0.2", 19091)
    assert lookup.coordinator(SPEC, 1, "PLAINTEXT") == (2, "127.0.0.1", 9092)
    # Broker 2 has no INTERNAL listener; partition 2 has no leader; 3's leader is not alive.
    assert lookup.coordinator(SPEC, 1, "INTERNAL") is None
    assert lookup.coordinator(SPEC, 2, "PLAINTEXT") is None
    assert lookup.coordinator(SPEC, 3, "PLAINTEXT") is None
