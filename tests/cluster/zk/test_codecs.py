"""Znode JSON codecs against Kafka-shaped examples (what a Kafka 3.x broker writes)."""

from __future__ import annotations

import json
import uuid

import pytest

from odradek.cluster.zk import codecs, paths
from odradek.cluster.zk.codecs import (
    BrokerEndpoint,
    BrokerRegistration,
    ControllerRegistration,
    PartitionState,
    TopicAssignment,
    ZNodeDecodeError,
)

# Copied from znodes a Kafka 3.x broker wrote (key order is Jackson's, not significant).
KAFKA_BROKER = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT",'
    b'"INTERNAL":"SASL_SSL"},"endpoints":["PLAINTEXT://localhost:9092",'
    b'"INTERNAL://[::1]:9093"],"jmx_port":-1,"port":9092,"host":"localhost","version":5,'
    b'"timestamp":"1690000000000","rack":"r1"}'
)
KAFKA_TOPIC = (
    b'{"removing_replicas":{},"partitions":{"2":[3,1,2],"1":[2,3,1],"0":[1,2,3]},'
    b'"topic_id":"hH4zRUoRQ6yGe9eGCq28cA","adding_replicas":{"1":[4]},"version":3}'
)
KAFKA_STATE = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2,3]}'
KAFKA_CONTROLLER = (
    b'{"version":2,"brokerid":1,"timestamp":"1690000000123","kraftControllerEpoch":-1}'
)


def test_broker_registration_decodes_kafka_json() -> None:
    reg = BrokerRegistration.decode(1, KAFKA_BROKER)
    assert reg.broker_id == 1
    assert reg.endpoints == (
        BrokerEndpoint("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),
        BrokerEndpoint("INTERNAL", "::1", 9093, "SASL_SSL"),
    )
    assert reg.rack == "r1"
    assert reg.jmx_port == -1
    assert reg.timestamp_ms == 1690000000000
    assert reg.version == 5


def test_broker_registration_encodes_kafka_v5_keys() -> None:
    reg = BrokerRegistration(
        7,
        (
            BrokerEndpoint("INTERNAL", "::1", 9093, "SASL_SSL"),
            BrokerEndpoint("PLAINTEXT", "10.0.0.7", 9092, "PLAINTEXT"),
        ),
        rack="r1",
        timestamp_ms=1690000000000,
        features={"metadata.version": (1, 21)},
    )
    data = reg.encode()
    assert b" " not in data  # compact, as Jackson writes it
    assert json.loads(data) == {
        "features": {"metadata.version": {"min_version": 1, "max_version": 21}},
        "listener_security_protocol_map": {"INTERNAL": "SASL_SSL", "PLAINTEXT": "PLAINTEXT"},
        "endpoints": ["INTERNAL://[::1]:9093", "PLAINTEXT://10.0.0.7:9092"],
        "jmx_port": -1,
        "port": 9092,  # the first PLAINTEXT endpoint, for old clients
        "host": "10.0.0.7",
        "version": 5,
        "timestamp": "1690000000000",
        "rack": "r1",
    }
    assert BrokerRegistration.decode(7, data) == reg


def test_broker_without_plaintext_listener_has_null_host() -> None:
    reg = BrokerRegistration(1, (BrokerEndpoint("SSL", "h", 1, "SSL"),))
    body = json.loads(reg.encode())
    assert body["host"] is None and body["port"] == -1
    assert "rack" not in body


def test_old_broker_registration_versions_decode() -> None:
    v1 = b'{"version":1,"host":"h","port":9092,"jmx_port":9999,"timestamp":"5"}'
    assert BrokerRegistration.decode(0, v1).endpoints == (
        BrokerEndpoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),
    )
    v2 = b'{"version":2,"host":"h","port":1,"jmx_port":-1,"endpoints":["SSL://h:2"]}'
    assert BrokerRegistration.decode(0, v2).endpoints == (BrokerEndpoint("SSL", "h", 2, "SSL"),)


def test_topic_assignment_round_trip_and_kafka_json() -> None:
    assignment = TopicAssignment.decode("orders", KAFKA_TOPIC)
    assert assignment.partitions == {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}
    assert assignment.topic_id == "hH4zRUoRQ6yGe9eGCq28cA"
    assert assignment.adding_replicas == {1: (4,)}
    assert assignment.removing_replicas == {}
    body = json.loads(assignment.encode())
    assert body["version"] == 3
    assert body["partitions"] == {"0": [1, 2, 3], "1": [2, 3, 1], "2": [3, 1, 2]}
    assert body["adding_replicas"] == {"1": [4]} and body["removing_replicas"] == {}
    assert TopicAssignment.decode("orders", assignment.encode()) == assignment


def test_topic_without_id_omits_the_key() -> None:
    assert "topic_id" not in json.loads(TopicAssignment({0: (1,)}).encode())


def test_partition_state_exact_bytes() -> None:
    state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)
    assert state.encode() == KAFKA_STATE
    assert PartitionState.decode(KAFKA_STATE) == state
    recovering = PartitionState(2, 5, (2,), 3, leader_recovery_state=1)
    assert json.loads(recovering.encode())["leader_recovery_state"] == 1
    assert PartitionState.decode(recovering.encode()) == recovering


def test_controller_exact_bytes() -> None:
    reg = ControllerRegistration(1, 1690000000123)
    assert reg.encode() == KAFKA_CONTROLLER
    assert ControllerRegistration.decode(KAFKA_CONTROLLER) == reg
    old = ControllerRegistration.decode(b'{"version":1,"brokerid":4,"timestamp":"9"}')
    assert old == ControllerRegistration(4, 9, -1)


def test_controller_epoch_is_a_bare_decimal() -> None:
    assert codecs.encode_controller_epoch(12) == b"12"
    assert codecs.decode_controller_epoch(b"12") == 12
    for bad in (b"", b"x", b"1.5", b"99999999999", None):
        with pytest.raises(ZNodeDecodeError):
            codecs.decode_controller_epoch(bad)


def test_config_entity_and_change_notification_exact_bytes() -> None:
    data = codecs.encode_config_entity({"retention.ms": "1000"})
    assert data == b'{"version":1,"config":{"retention.ms":"1000"}}'
    assert codecs.decode_config_entity(data) == {"retention.ms": "1000"}
    change = codecs.encode_config_change("topics/orders")
    assert change == b'{"version":2,"entity_path":"topics/orders"}'
    assert codecs.decode_config_change(change) == "topics/orders"


def test_notification_and_admin_znodes_exact_bytes() -> None:
    isr = codecs.encode_isr_change({("b", 1), ("a", 0)})
    assert (
        isr
        == b'{"version":1,"partitions":[{"topic":"a","partition":0},{"topic":"b","partition":1}]}'
    )
    assert codecs.decode_isr_change(isr) == {("a", 0), ("b", 1)}
    election = codecs.encode_preferred_replica_election({("t", 2)})
    assert election == b'{"version":1,"partitions":[{"topic":"t","partition":2}]}'
    assert codecs.decode_preferred_replica_election(election) == {("t", 2)}
    reassign = codecs.encode_reassignment({("t", 0): [3, 1]})
    assert reassign == b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[3,1]}]}'
    assert codecs.decode_reassignment(reassign) == {("t", 0): (3, 1)}


def test_cluster_id_exact_bytes_and_kafka_uuid() -> None:
    assert codecs.encode_cluster_id("abc") == b'{"version":"1","id":"abc"}'
    assert codecs.decode_cluster_id(b'{"version":"1","id":"abc"}') == "abc"
    value = codecs.random_kafka_uuid()
    assert len(value) == 22 and not value.startswith("-")
    assert codecs.kafka_uuid_string(codecs.parse_kafka_uuid(value)) == value
    # Kafka's Uuid.toString of 0x...01 is AAAAAAAAAAAAAAAAAAAAAQ
    assert codecs.kafka_uuid_string(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"


MALFORMED = [
    (lambda d: BrokerRegistration.decode(1, d), b"not json"),
    (lambda d: BrokerRegistration.decode(1, d), b"[]"),
    (lambda d: BrokerRegistration.decode(1, d), b'{"version":5}'),
    (lambda d: BrokerRegistration.decode(1, d), b'{"version":9,"jmx_port":1}'),
    (lambda d: BrokerRegistration.decode(1, d), b'{"version":5,"jmx_port":-1,"endpoints":["x"]}'),
    (
        lambda d: BrokerRegistration.decode(1, d),
        b'{"version":5,"jmx_port":-1,"endpoints":["ODD://h:1"],'
        b'"listener_security_protocol_map":{"P":"PLAINTEXT"}}',
    ),
    (lambda d: BrokerRegistration.decode(1, d), b"\xff\xfe"),
    (lambda d: TopicAssignment.decode("t", d), b'{"version":3,"partitions":{"x":[1]}}'),
    (lambda d: TopicAssignment.decode("t", d), b'{"version":3,"partitions":{"0":[true]}}'),
    (lambda d: TopicAssignment.decode("t", d), b'{"version":3,"partitions":{"0":"1"}}'),
    (lambda d: TopicAssignment.decode("t", d), b'{"version":3,"partitions":{},"topic_id":"short"}'),
    (lambda d: PartitionState.decode(d), b'{"version":1,"leader":1}'),
    (lambda d: PartitionState.decode(d), KAFKA_STATE.replace(b"[1,2,3]", b"[1,null]")),
    (lambda d: PartitionState.decode(d), KAFKA_STATE.replace(b'"leader":1', b'"leader":1.5')),
    (lambda d: PartitionState.decode(d), None),
    (lambda d: ControllerRegistration.decode(d), b'{"version":2,"brokerid":"1"}'),
    (codecs.decode_config_entity, b'{"version":1,"config":{"a":1}}'),
    (codecs.decode_config_change, b'{"version":2,"entity_path":"nothing"}'),
    (codecs.decode_isr_change, b'{"version":1,"partitions":[{"topic":"a"}]}'),
    (codecs.decode_reassignment, b'{"version":1,"partitions":[{"topic":"a","partition":0}]}'),
    (codecs.decode_cluster_id, b'{"version":"1"}'),
]


@pytest.mark.parametrize(("decode", "data"), MALFORMED)
def test_malformed_znodes_raise_one_clear_error(decode, data) -> None:
    with pytest.raises(ZNodeDecodeError, match="malformed"):
        decode(data)


def test_paths_match_kafka_layout() -> None:
    assert paths.broker_id(3) == "/brokers/ids/3"
    assert paths.partition_state("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert paths.topic_config("t") == "/config/topics/t"
    assert paths.broker_config(1) == "/config/brokers/1"
    assert paths.broker_config("<default>") == "/config/brokers/<default>"
    assert paths.config_change(7) == "/config/changes/config_change_0000000007"
    assert paths.isr_change(12) == "/isr_change_notification/isr_change_0000000012"
    assert paths.delete_topic("t") == "/admin/delete_topics/t"
    assert paths.sequence_number("/config/changes/config_change_0000000007", "config_change_") == 7
    assert "/brokers/seqid" in paths.PERSISTENT_PATHS
    assert "/config/topics" in paths.PERSISTENT_PATHS


@pytest.mark.parametrize(
    ("value", "hosts", "chroot"),
    [
        ("127.0.0.1:2181", "127.0.0.1:2181", ""),
        ("a:1,b:2/kafka", "a:1,b:2", "/kafka"),
        ("a:1/kafka/prod", "a:1", "/kafka/prod"),
        ("zk", "zk:2181", ""),
        ("[::1]:2182/", "[::1]:2182", ""),
    ],
)
def test_parse_connect(value: str, hosts: str, chroot: str) -> None:
    parsed = paths.parse_connect(value)
    assert (parsed.hosts, parsed.chroot) == (hosts, chroot)


@pytest.mark.parametrize("value", ["", "a:1/kafka/", "a:x", "a:1,,b:2", "a:1//x", "::1:2181"])
def test_parse_connect_refuses(value: str) -> None:
    with pytest.raises(paths.InvalidConnectString):
        paths.parse_connect(value)
