"""Admin requests that would exhaust the broker are refused before anything is written."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import METADATA, RawClient

pytestmark = pytest.mark.integration

CREATE_TOPICS, CREATE_PARTITIONS = 19, 37


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[RawClient]:
    raw = RawClient(broker.port)
    raw.call(METADATA, 9, {"topics": [{"name": "v"}], "allow_auto_topic_creation": True})
    yield raw
    raw.sock.close()


def test_absurd_partition_counts_are_refused_at_once(client: RawClient) -> None:
    created = client.call(
        CREATE_TOPICS,
        5,
        {"topics": [{"name": "huge", "num_partitions": 10_000_000, "replication_factor": 1}],
         "timeout": 5000},
    )  # fmt: skip
    result = created.topics[0]  # type: ignore[attr-defined]
    assert result.error_code == ErrorCode.invalid_partitions
    assert "open-file limit" in (result.error_message or "")
    # Nothing half-created: the topic does not exist.
    metadata = client.call(METADATA, 9, {"topics": [{"name": "huge"}],
                                         "allow_auto_topic_creation": False})  # fmt: skip
    assert metadata.topics[0].error_code == ErrorCode.unknown_topic_or_partition  # type: ignore[attr-defined]

    grown = client.call(
        CREATE_PARTITIONS,
        2,
        {"topics": [{"name": "v", "count": 10_000_000, "assignments": None}], "timeout": 5000,
         "validate_only": False},
    )  # fmt: skip
    assert grown.results[0].error_code == ErrorCode.invalid_partitions  # type: ignore[attr-defined]
