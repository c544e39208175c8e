"""OffsetForLeaderEpoch on the leader: where an epoch ends, fenced current epochs, and
unknown partitions, over the wire (the follower side is tested in
tests/integration/cluster/test_replication.py)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

OFFSET_FOR_LEADER_EPOCH = 23


def _ask(raw: RawClient, topic: str, current: int, epoch: int) -> Any:
    response: Any = raw.call(
        OFFSET_FOR_LEADER_EPOCH,
        4,
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}
                    ],
                }
            ],
        },
    )
    return response.topics[0].partitions[0]


def test_end_offset_of_an_epoch(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        producer.produce("epochs", f"v{i}".encode(), partition=0)
    assert producer.flush(20) == 0
    raw = RawClient(broker.port)
    latest = _ask(raw, "epochs", -1, 0)
    assert (latest.error_code, latest.leader_epoch, latest.end_offset) == (ErrorCode.none, 0, 3)
    future = _ask(raw, "epochs", 0, 7)  # never seen: undefined
    assert (future.error_code, future.leader_epoch, future.end_offset) == (ErrorCode.none, -1, -1)
    assert _ask(raw, "epochs", 5, 0).error_code == ErrorCode.unknown_leader_epoch
    assert _ask(raw, "nope", -1, 0).error_code == ErrorCode.unknown_topic_or_partition
