"""LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown: Kafka 3.9 wire formats."""

from __future__ import annotations

import dataclasses
import typing
import uuid

import pytest

from odradek.protocol import interbroker as ib
from odradek.protocol.build import build
from odradek.protocol.codec import decode_request, decode_response, encode_request, encode_response
from odradek.protocol.error_responses import error_response
from odradek.protocol.headers import RequestHeader, request_header_version
from odradek.protocol.versions import METADATA, SUPPORTED, advertised, api_name, is_flexible

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")

ALL_VERSIONS = [
    (api_key, version, kind)
    for api_key, (low, high) in ib.INTERBROKER_VERSIONS.items()
    for version in range(low, high + 1)
    for kind in ("request", "response")
]


def _sample(cls: type, depth: int = 0) -> object:
    """An instance with a distinct non-default value in every field."""
    hints = typing.get_type_hints(cls)
    values: dict[str, object] = {}
    for number, field in enumerate(dataclasses.fields(cls), start=1):
        hint = hints[field.name]
        if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(hint) is tuple:
            inner = typing.get_args(hint)[0]
            if dataclasses.is_dataclass(inner):
                values[field.name] = (_sample(inner, depth + 1), _sample(inner, depth + 1))
            else:
                values[field.name] = (number, number + 100, -1)
        else:
            kafka_type = field.metadata["kafka_type"]
            values[field.name] = {
                "bool": True,
                "string": f"{field.name}-é{depth}",
                "uuid": TOPIC_ID,
                "error_code": 3,
                "int64": 2**40 + number,
            }.get(kafka_type, number + 10 * depth)
    return build(cls, values)


def _class(api_key: int, version: int, kind: str) -> type:
    return (
        ib.request_class(api_key, version)
        if kind == "request"
        else ib.response_class(api_key, version)
    )


def _decode(api_key: int, version: int, kind: str, data: bytes) -> object:
    if kind == "request":
        return ib.decode_request_body(api_key, version, data)
    return ib.decode_response_body(api_key, version, data)


@pytest.mark.parametrize(("api_key", "version", "kind"), ALL_VERSIONS)
def test_round_trip_every_version(api_key: int, version: int, kind: str) -> None:
    cls = _class(api_key, version, kind)
    entity = _sample(cls)
    data = ib.encode_body(entity)
    assert _decode(api_key, version, kind, data) == entity
    # Every field carries a value, so every prefix is too short to be a whole body.
    for cut in (1, len(data) // 2, len(data) - 1):
        with pytest.raises(Exception):  # noqa: B017 - whatever the primitive readers raise
            _decode(api_key, version, kind, data[:cut])


def test_flexible_versions_follow_kafka() -> None:
    first_flexible = {
        ib.LEADER_AND_ISR: 4,
        ib.STOP_REPLICA: 2,
        ib.UPDATE_METADATA: 6,
        ib.CONTROLLED_SHUTDOWN: 3,
    }
    for api_key, (low, high) in ib.INTERBROKER_VERSIONS.items():
        for version in range(low, high + 1):
            expected = version >= first_flexible[api_key]
            assert ib.request_class(api_key, version).__flexible__ is expected
            assert ib.response_class(api_key, version).__flexible__ is expected
    assert ib.INTERBROKER_VERSIONS == {4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (0, 3)}
    assert ib.request_header_version(ib.CONTROLLED_SHUTDOWN, 0) == 0
    assert ib.request_header_version(ib.CONTROLLED_SHUTDOWN, 1) == 1
    assert ib.request_header_version(ib.LEADER_AND_ISR, 4) == 2


def test_in_the_version_table_but_advertised_only_with_a_handler() -> None:
    for api_key, bounds in ib.INTERBROKER_VERSIONS.items():
        assert SUPPORTED[api_key] == bounds
        assert api_key not in advertised([METADATA])
        assert api_key in advertised([METADATA, api_key])


@pytest.mark.parametrize(("api_key", "version", "kind"), ALL_VERSIONS)
def test_framed_through_the_codec(api_key: int, version: int, kind: str) -> None:
    """Built with build.py, framed by the codec, read back by the untrusted-bytes reader."""
    entity = _sample(_class(api_key, version, kind))
    if kind == "request":
        frame = encode_request(version, 7, "controller-1", entity)
        header, decoded = decode_request(bytearray(frame[4:]))
        assert (header.api_key, header.api_version, header.correlation_id) == (
            api_key,
            version,
            7,
        )
        expected_client = (
            None if (api_key, version) == (ib.CONTROLLED_SHUTDOWN, 0) else "controller-1"
        )
        assert header.client_id == expected_client
    else:
        request_header = RequestHeader(api_key, version, 9, "x")
        frame = encode_response(request_header, entity)
        correlation_id, decoded = decode_response(api_key, version, frame[4:])
        assert correlation_id == 9
    assert decoded == entity


def test_controlled_shutdown_v0_uses_request_header_v0() -> None:
    entity = build(ib.request_class(ib.CONTROLLED_SHUTDOWN, 0), {"broker_id": 3})
    frame = encode_request(0, 5, "ignored", entity)
    # size, api key 7, version 0, correlation id 5, broker id 3: no client id at all.
    assert frame == bytes.fromhex("0000000c 0007 0000 00000005 00000003".replace(" ", ""))
    assert request_header_version(ib.CONTROLLED_SHUTDOWN, 0) == 0
    assert request_header_version(ib.CONTROLLED_SHUTDOWN, 1) == 1
    assert request_header_version(ib.UPDATE_METADATA, 6) == 2
    assert api_name(ib.LEADER_AND_ISR) == "LeaderAndIsr"
    assert is_flexible(ib.STOP_REPLICA, 2) and not is_flexible(ib.STOP_REPLICA, 1)


def test_error_response_for_interbroker_apis() -> None:
    request = build(ib.request_class(ib.UPDATE_METADATA, 7), {"controller_id": 1})
    response = error_response(ib.UPDATE_METADATA, 7, request, 11)
    assert int(response.error_code) == 11


def test_versions_outside_kafkas_range_are_refused() -> None:
    with pytest.raises(LookupError):
        ib.request_class(ib.LEADER_AND_ISR, 8)
    with pytest.raises(LookupError):
        ib.request_class(99, 0)


def test_build_refuses_unknown_field_names() -> None:
    with pytest.raises(Exception, match="zk_versoin"):
        build(ib.request_class(ib.UPDATE_METADATA, 5), {"zk_versoin": 1})


def test_hostile_array_length_is_refused_without_allocating() -> None:
    # ControllerId, ControllerEpoch, then an array "of 2**31-1 partition states".
    data = bytes.fromhex("00000001 00000002 7fffffff")
    with pytest.raises(Exception):  # noqa: B017
        ib.decode_request_body(ib.LEADER_AND_ISR, 0, data)


# --- byte-exact vectors, written out by hand from the JSON schemas --------------------


def hexbytes(text: str) -> bytes:
    return bytes.fromhex("".join(part.split("#")[0] for part in text.splitlines()))


def test_leader_and_isr_v0_request_bytes() -> None:
    entity = build(
        ib.request_class(ib.LEADER_AND_ISR, 0),
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "ungrouped_partition_states": [
                {
                    "topic_name": "t",
                    "partition_index": 0,
                    "controller_epoch": 2,
                    "leader": 1,
                    "leader_epoch": 3,
                    "isr": [1, 2],
                    "partition_epoch": 4,
                    "replicas": [1, 2],
                }
            ],
            "live_leaders": [{"broker_id": 1, "host_name": "h", "port": 9092}],
        },
    )
    expected = hexbytes("""
        00000001          # ControllerId 1
        00000002          # ControllerEpoch 2
        00000001          # UngroupedPartitionStates: 1 element (int32 length)
        0001 74           # TopicName "t" (int16 length)
        00000000          # PartitionIndex 0
        00000002          # ControllerEpoch 2
        00000001          # Leader 1
        00000003          # LeaderEpoch 3
        00000002 00000001 00000002   # Isr [1, 2]
        00000004          # PartitionEpoch (ZkVersion) 4
        00000002 00000001 00000002   # Replicas [1, 2]
        00000001          # LiveLeaders: 1 element
        00000001 0001 68 00002384    # BrokerId 1, HostName "h", Port 9092
    """)
    assert ib.encode_body(entity) == expected
    assert ib.decode_request_body(ib.LEADER_AND_ISR, 0, expected) == entity


def test_leader_and_isr_v7_request_bytes() -> None:
    entity = build(
        ib.request_class(ib.LEADER_AND_ISR, 7),
        {
            "controller_id": 1,
            "controller_epoch": 2,
            "broker_epoch": 5,
            "type_": 1,
            "topic_states": [
                {
                    "topic_name": "t",
                    "topic_id": TOPIC_ID,
                    "partition_states": [
                        {
                            "partition_index": 0,
                            "controller_epoch": 2,
                            "leader": 1,
                            "leader_epoch": 3,
                            "isr": [1],
                            "partition_epoch": 4,
                            "replicas": [1],
                            "is_new": True,
                            "leader_recovery_state": 1,
                        }
                    ],
                }
            ],
            "live_leaders": [{"broker_id": 1, "host_name": "h", "port": 9092}],
        },
    )
    expected = hexbytes("""
        00000001            # ControllerId 1
        00                  # isKRaftController false
        00000002            # ControllerEpoch 2
        0000000000000005    # BrokerEpoch 5
        01                  # Type 1
        02                  # TopicStates: compact array, 1 element
        02 74               # TopicName "t" (compact string)
        00112233445566778899aabbccddeeff   # TopicId
        02                  # PartitionStates: 1 element
        00000000 00000002 00000001 00000003   # index, controller epoch, leader, epoch
        02 00000001         # Isr [1]
        00000004            # PartitionEpoch 4
        02 00000001         # Replicas [1]
        01                  # AddingReplicas []
        01                  # RemovingReplicas []
        01                  # IsNew true
        01                  # LeaderRecoveryState 1
        00                  # partition state: no tagged fields
        00                  # topic state: no tagged fields
        02                  # LiveLeaders: 1 element
        00000001 02 68 00002384 00
        00                  # request: no tagged fields
    """)
    assert ib.encode_body(entity) == expected
    assert ib.decode_request_body(ib.LEADER_AND_ISR, 7, expected) == entity


def test_leader_and_isr_v5_response_bytes() -> None:
    entity = build(
        ib.response_class(ib.LEADER_AND_ISR, 5),
        {
            "error_code": 0,
            "topics": [
                {
                    "topic_id": TOPIC_ID,
                    "partition_errors": [{"partition_index": 2, "error_code": 6}],
                }
            ],
        },
    )
    expected = hexbytes("""
        0000                # ErrorCode NONE
        02                  # Topics: 1 element
        00112233445566778899aabbccddeeff
        02 00000002 0006 00 # PartitionErrors: index 2, NOT_LEADER_OR_FOLLOWER, no tags
        00 00               # topic tags, response tags
    """)
    assert ib.encode_body(entity) == expected
    assert ib.decode_response_body(ib.LEADER_AND_ISR, 5, expected) == entity


def test_stop_replica_v3_request_bytes() -> None:
    entity = build(
        ib.request_class(ib.STOP_REPLICA, 3),
        {
            "controller_id": 2,
            "controller_epoch": 7,
            "broker_epoch": -1,
            "topic_states": [
                {
                    "topic_name": "ab",
                    "partition_states": [
                        {"partition_index": 1, "leader_epoch": -2, "delete_partition": True}
                    ],
                }
            ],
        },
    )
    expected = hexbytes("""
        00000002 00000007 ffffffffffffffff   # ControllerId, ControllerEpoch, BrokerEpoch -1
        02 03 6162                           # TopicStates: 1; TopicName "ab"
        02 00000001 fffffffe 01 00           # PartitionStates: 1; index 1, epoch -2, delete
        00 00                                # topic tags, request tags
    """)
    assert ib.encode_body(entity) == expected
    assert ib.decode_request_body(ib.STOP_REPLICA, 3, expected) == entity


def test_stop_replica_v0_request_bytes() -> None:
    entity = build(
        ib.request_class(ib.STOP_REPLICA, 0),
        {
            "controller_id": 1,
            "controller_epoch": 1,
            "delete_partitions": False,
            "ungrouped_partitions": [{"topic_name": "t", "partition_index": 3}],
        },
    )
    expected = hexbytes("00000001 00000001 00 00000001 0001 74 00000003")
    assert ib.encode_body(entity) == expected


def test_update_metadata_v8_request_bytes_with_tagged_type() -> None:
    entity = build(
        ib.request_class(ib.UPDATE_METADATA, 8),
        {
            "controller_id": 1,
            "type_": 2,
            "controller_epoch": 1,
            "live_brokers": [
                {
                    "id_": 1,
                    "endpoints": [
                        {"port": 1, "host": "h", "listener": "L", "security_protocol": 0}
                    ],
                }
            ],
        },
    )
    expected = hexbytes("""
        00000001 00 00000001 ffffffffffffffff   # ControllerId, isKRaft, epoch, BrokerEpoch -1
        01                      # TopicStates: empty compact array
        02 00000001             # LiveBrokers: 1; Id 1
        02 00000001 0268 024c 0000 00   # Endpoints: port 1, "h", "L", PLAINTEXT, no tags
        00                      # Rack null (compact nullable string)
        00                      # broker tags
        01 00 01 02             # 1 tagged field: tag 0 (Type), 1 byte, value 2
    """)
    assert ib.encode_body(entity) == expected
    assert ib.decode_request_body(ib.UPDATE_METADATA, 8, expected) == entity
    untagged = build(ib.request_class(ib.UPDATE_METADATA, 8), {"controller_id": 1})
    assert ib.encode_body(untagged).endswith(b"\x01\x01\x00")  # no topics, no brokers, no tags


def test_update_metadata_v2_request_bytes_with_null_rack() -> None:
    entity = build(
        ib.request_class(ib.UPDATE_METADATA, 2),
        {
            "controller_id": 1,
            "controller_epoch": 1,
            "ungrouped_partition_states": [],
            "live_brokers": [
                {
                    "id_": 4,
                    "endpoints": [{"port": 9092, "host": "h", "security_protocol": 1}],
                    "rack": None,
                }
            ],
        },
    )
    expected = hexbytes("""
        00000001 00000001 00000000      # ControllerId, ControllerEpoch, no partitions
        00000001 00000004               # LiveBrokers: 1; Id 4
        00000001 00002384 0001 68 0001  # Endpoints: 1; port 9092, "h", SSL
        ffff                            # Rack null
    """)
    assert ib.encode_body(entity) == expected
    assert ib.decode_request_body(ib.UPDATE_METADATA, 2, expected) == entity


def test_controlled_shutdown_bytes() -> None:
    v0 = build(ib.request_class(ib.CONTROLLED_SHUTDOWN, 0), {"broker_id": 3})
    assert ib.encode_body(v0) == hexbytes("00000003")
    v3 = build(ib.request_class(ib.CONTROLLED_SHUTDOWN, 3), {"broker_id": 3, "broker_epoch": 9})
    assert ib.encode_body(v3) == hexbytes("00000003 0000000000000009 00")
    response = build(
        ib.response_class(ib.CONTROLLED_SHUTDOWN, 3),
        {"error_code": 0, "remaining_partitions": [{"topic_name": "t", "partition_index": 1}]},
    )
    expected = hexbytes("0000 02 0274 00000001 00 00")
    assert ib.encode_body(response) == expected
    assert ib.decode_response_body(ib.CONTROLLED_SHUTDOWN, 3, expected) == response
    v1 = ib.decode_response_body(ib.CONTROLLED_SHUTDOWN, 1, hexbytes("004d 00000000"))
    assert int(v1.error_code) == 77 and v1.remaining_partitions == ()  # STALE_BROKER_EPOCH
