"""Many partitions on the embedded broker: a big CreateTopics does not stall other clients,
an acknowledged create survives SIGKILL, and kept Metadata answers are never stale."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.records.batch import Record, build_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import METADATA, PRODUCE, RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37


def create(client: RawClient, name: str, partitions: int) -> Any:
    response = client.call(
        CREATE_TOPICS,
        5,
        {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
         "timeout": 120_000},
    )  # fmt: skip
    return response.topics[0]  # type: ignore[attr-defined]


def metadata(client: RawClient, names: list[str] | None, version: int = 9) -> dict[str, Any]:
    topics = None if names is None else [{"name": n} for n in names]
    response = client.call(METADATA, version, {"topics": topics,
                                               "allow_auto_topic_creation": False})  # fmt: skip
    return {t.name: t for t in response.topics}  # type: ignore[attr-defined]


def produce(client: RawClient, topic: str, partition: int, value: bytes) -> Any:
    records = bytes(build_batch([Record(value=value)]))
    response = client.call(
        PRODUCE,
        9,
        {"acks": 1, "timeout": 10_000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}]},
    )  # fmt: skip
    return response.responses[0].partition_responses[0]  # type: ignore[attr-defined]


def test_a_big_create_leaves_other_clients_served(broker: BrokerProcess) -> None:
    other = RawClient(broker.port)
    assert create(other, "small", 1).error_code == ErrorCode.none
    # The partition's first append creates its .log and fsyncs its leader-epoch checkpoint:
    # done before the big create, whose thousands of mkdirs would make that one-time
    # fsync wait for the journal (this test is about the create holding the event loop).
    assert produce(other, "small", 0, b"before").error_code == ErrorCode.none
    creator = RawClient(broker.port)
    creator.sock.settimeout(240)
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(create(creator, "big", 5000)))
    started = time.monotonic()
    worker.start()
    answered_during = 0
    deadline = started + 240
    while worker.is_alive() and time.monotonic() < deadline:
        assert metadata(other, ["small"])["small"].error_code == ErrorCode.none
        assert produce(other, "small", 0, b"meanwhile").error_code == ErrorCode.none
        if worker.is_alive():
            answered_during += 1
    worker.join(10)
    took = time.monotonic() - started
    print(f"create of 5,000 partitions: {took:.2f} s, {answered_during} answers meanwhile")
    assert result and result[0].error_code == ErrorCode.none
    # While the 5,000 logs were being created the other connection kept getting answers
    # (the event loop held for the whole create would allow at most one).
    if took > 1.0:
        assert answered_during >= 2, (answered_during, took)
    assert len(metadata(other, ["big"])["big"].partitions) == 5000


def test_an_acknowledged_create_survives_sigkill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        client = RawClient(broker.port)
        client.sock.settimeout(120)
        assert create(client, "durable", 1000).error_code == ErrorCode.none
        broker.kill()  # at once after the acknowledgement
        broker.start()
        client = RawClient(broker.port)
        found = metadata(client, ["durable"])["durable"]
        assert found.error_code == ErrorCode.none
        assert sorted(p.partition_index for p in found.partitions) == list(range(1000))
        for index in (0, 500, 999):
            assert (tmp_path / "data" / f"durable-{index}").is_dir()
            assert produce(client, "durable", index, b"after").error_code == ErrorCode.none
    finally:
        broker.stop()


def test_metadata_answers_are_never_stale(broker: BrokerProcess) -> None:
    client = RawClient(broker.port)
    assert "fresh" not in metadata(client, None)
    assert metadata(client, ["fresh"])["fresh"].error_code == ErrorCode.unknown_topic_or_partition
    # Asked twice: the second answer comes from the kept one, with its own correlation id
    # (RawClient checks it) and the same content.
    assert metadata(client, None).keys() == metadata(client, None).keys()

    assert create(client, "fresh", 3).error_code == ErrorCode.none
    assert len(metadata(client, None)["fresh"].partitions) == 3
    assert len(metadata(client, ["fresh"])["fresh"].partitions) == 3
    assert len(metadata(client, ["fresh"], version=1)["fresh"].partitions) == 3

    grown = client.call(
        CREATE_PARTITIONS,
        2,
        {"topics": [{"name": "fresh", "count": 5, "assignments": None}], "timeout": 5000,
         "validate_only": False},
    )  # fmt: skip
    assert grown.results[0].error_code == ErrorCode.none  # type: ignore[attr-defined]
    assert len(metadata(client, None)["fresh"].partitions) == 5
    assert len(metadata(client, ["fresh"])["fresh"].partitions) == 5

    deleted = client.call(DELETE_TOPICS, 4, {"topic_names": ["fresh"], "timeout": 5000})
    assert deleted.responses[0].error_code == ErrorCode.none  # type: ignore[attr-defined]
    assert "fresh" not in metadata(client, None)
    assert metadata(client, ["fresh"])["fresh"].error_code == ErrorCode.unknown_topic_or_partition

    # Auto-creation is never answered from a kept answer.
    response = client.call(METADATA, 9, {"topics": [{"name": "auto"}],
                                         "allow_auto_topic_creation": True})  # fmt: skip
    assert response.topics[0].name == "auto"  # type: ignore[attr-defined]
    assert "auto" in metadata(client, None)


def test_kept_metadata_answers_are_per_listener(two_listeners: tuple[BrokerProcess, int]) -> None:
    broker, second = two_listeners
    first_client = RawClient(broker.port)
    second_client = RawClient(second, host="127.0.0.2")
    for _ in range(3):  # alternate: each listener keeps getting its own endpoints
        for client, host, port in ((first_client, "127.0.0.1", broker.port),
                                   (second_client, "127.0.0.2", second)):  # fmt: skip
            response = client.call(METADATA, 9, {"topics": None,
                                                 "allow_auto_topic_creation": False})  # fmt: skip
            brokers = [(b.host, b.port) for b in response.brokers]  # type: ignore[attr-defined]
            assert brokers == [(host, port)]
