"""The advertised version table: restrictable, consistent with kio and with what clients need."""

from __future__ import annotations

import pytest

from odradek.protocol.schemas import request_type as load_request_schema
from odradek.protocol.schemas import response_type as load_response_schema
from odradek.protocol.versions import (
    API_VERSIONS,
    FETCH,
    METADATA,
    PRODUCE,
    SUPPORTED,
    advertised,
    api_name,
    build_api_versions_response,
    is_flexible,
    is_supported,
)


def test_every_advertised_version_has_a_class() -> None:
    # kio's, or interbroker's for the four ZooKeeper-era RPCs kio no longer has.
    for api_key, (low, high) in SUPPORTED.items():
        assert low <= high
        for version in range(low, high + 1):
            load_request_schema(api_key, version)
            load_response_schema(api_key, version)


def test_every_range_includes_a_non_flexible_version_for_aiokafka() -> None:
    # DescribeCluster (60) is flexible from v0 in Kafka itself, WriteTxnMarkers (27) is
    # broker-to-broker and kio starts it at the flexible v1; the SCRAM credential APIs
    # (50, 51, KIP-554), DescribeProducers (61), DescribeTransactions (65) and
    # ListTransactions (66) are flexible from v0 (operators' tools only), so are
    # AlterPartitionReassignments (45) and ListPartitionReassignments (46, KIP-455);
    # aiokafka sends none of them.
    for api_key, (low, _high) in SUPPORTED.items():
        if api_key not in (27, 45, 46, 50, 51, 60, 61, 65, 66):
            assert not is_flexible(api_key, low), api_name(api_key)


def test_record_batch_v2_minima_and_no_topic_id_versions() -> None:
    assert SUPPORTED[PRODUCE][0] == 3 and SUPPORTED[FETCH][0] == 4
    assert SUPPORTED[FETCH][1] <= 12 and SUPPORTED[METADATA][1] <= 9
    assert SUPPORTED[PRODUCE][1] <= 11


@pytest.mark.parametrize(
    ("client", "api_key", "version"),
    [
        # Versions the clients were seen sending (FACTS.md); each must be in range or the
        # client must be able to step down to our maximum.
        ("aiokafka", API_VERSIONS, 0),
        ("aiokafka", METADATA, 5),
        ("aiokafka", PRODUCE, 7),
        ("aiokafka", FETCH, 11),
        ("aiokafka", 2, 3),
        ("aiokafka", 10, 1),
        ("aiokafka", 11, 5),
        ("aiokafka", 14, 3),
        ("aiokafka", 12, 1),
        ("aiokafka", 13, 1),
        ("aiokafka", 8, 3),
        ("aiokafka", 9, 3),
        ("aiokafka", 22, 0),
        ("kcat", METADATA, 4),
        ("kcat", PRODUCE, 7),
        ("kcat", FETCH, 11),
        ("kcat", 2, 2),
        ("kafka-python", API_VERSIONS, 4),
        ("librdkafka", API_VERSIONS, 3),
        ("librdkafka", 24, 0),
        ("librdkafka", 26, 1),
        ("librdkafka", 28, 3),
    ],
)
def test_versions_clients_send_are_accepted(client: str, api_key: int, version: int) -> None:
    assert is_supported(api_key, version), f"{client} sends {api_name(api_key)} v{version}"


def test_kafka_python_infers_a_modern_broker() -> None:
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    inferred = infer_broker_version_from_api_versions(SUPPORTED)
    # >= 2.5 turns on idempotence, fetch sessions and epoch bumps; >= 3.0 the modern
    # group timeouts.
    assert inferred >= (3, 0)


def test_advertised_restricts_and_always_keeps_api_versions() -> None:
    table = advertised([METADATA, PRODUCE])
    assert table == {
        API_VERSIONS: SUPPORTED[API_VERSIONS],
        PRODUCE: SUPPORTED[PRODUCE],
        METADATA: SUPPORTED[METADATA],
    }
    assert advertised() == SUPPORTED and advertised() is not SUPPORTED
    with pytest.raises(ValueError, match="999"):
        advertised([999])


def test_is_flexible_follows_kafka_and_extends_past_kio() -> None:
    assert not is_flexible(FETCH, 11) and is_flexible(FETCH, 12)
    assert not is_flexible(API_VERSIONS, 2) and is_flexible(API_VERSIONS, 3)
    assert is_flexible(API_VERSIONS, 77)  # a future version: flexible like the newest
    assert not is_flexible(PRODUCE, 0)  # older than kio knows: like the oldest
    with pytest.raises(KeyError):
        is_flexible(9999, 0)


def test_api_versions_response_lists_the_table() -> None:
    response = build_api_versions_response(3, {API_VERSIONS: (0, 4), FETCH: (4, 12)})
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
        (FETCH, 4, 12),
        (API_VERSIONS, 0, 4),
    ]
    assert build_api_versions_response(0, {}).api_keys == ()


def test_api_names() -> None:
    assert api_name(18) == "ApiVersions"
    assert api_name(3) == "Metadata"
    assert api_name(12345) == "Unknown(12345)"
