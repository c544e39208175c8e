"""ACLs in a cluster: kept in ZooKeeper in Kafka's layout, and an ACL added or removed
through one broker is enforced by every broker (change notifications).

Each broker has a PLAINTEXT listener (inter-broker traffic, ``User:ANONYMOUS``, a super
user as in a typical Kafka setup without inter-broker SASL) and a SASL_PLAINTEXT listener
for the clients.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.helpers.broker import free_port
from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(240)]

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-pw" user_alice="alice-pw";'
)
TOPIC = "guarded"


def sasl(port: int, user: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-pw",
        **extra,
    }


def produce_each_partition(port: int, partitions: int) -> list[int | None]:
    """alice writes one record to each partition through the broker at ``port``."""
    errors: dict[int, KafkaError | None] = {}
    producer = Producer(
        sasl(port, "alice", **{"enable.idempotence": False, "message.timeout.ms": 15000})
    )
    for partition in range(partitions):
        producer.produce(
            TOPIC,
            b"x",
            partition=partition,
            on_delivery=lambda e, m: errors.__setitem__(m.partition(), e),
        )
    producer.flush(30)
    return [None if errors[p] is None else errors[p].code() for p in range(partitions)]


def test_acl_added_on_one_broker_is_enforced_by_another(
    tmp_path: Path, zk_connect: str
) -> None:
    cluster = BrokerCluster(
        tmp_path,
        zk_connect,
        2,
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "inter.broker.listener.name": "PLAINTEXT",
        },
    )
    sasl_ports = {}
    for broker_id, broker in cluster.brokers.items():
        sasl_ports[broker_id] = free_port()
        broker.overrides["listeners"] = (
            f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_ports[broker_id]}"
        )
    try:
        cluster.start()
        cluster.create_topic(TOPIC, 2, 2)
        leaders = set(cluster.leaders(TOPIC, 1).values())
        assert leaders == {1, 2}, f"expected a partition led by each broker, got {leaders}"
        refused = KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert produce_each_partition(sasl_ports[2], 2) == [refused, refused]

        # Added through broker 1: broker 2 (the other partition's leader) learns of it.
        admin1 = AdminClient(sasl(sasl_ports[1], "admin"))
        binding = AclBinding(
            ResourceType.TOPIC,
            TOPIC,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
        for future in admin1.create_acls([binding]).values():
            future.result(20)
        znode = json.loads(cluster.zk._zk.get(f"/kafka-acl/Topic/{TOPIC}")[0])
        assert znode == {
            "version": 1,
            "acls": [
                {
                    "principal": "User:alice",
                    "permissionType": "Allow",
                    "operation": "Write",
                    "host": "*",
                }
            ],
        }
        wait_for(
            lambda: produce_each_partition(sasl_ports[2], 2) == [None, None],
            60,
            "broker 2 to allow alice's writes",
            interval=0.5,
        )

        # Removed through broker 2: broker 1 stops allowing it too.
        admin2 = AdminClient(sasl(sasl_ports[2], "admin"))
        everything_on_topic = AclBindingFilter(
            ResourceType.TOPIC,
            TOPIC,
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        for future in admin2.delete_acls([everything_on_topic]).values():
            assert len(future.result(20)) == 1
        wait_for(
            lambda: produce_each_partition(sasl_ports[1], 2) == [refused, refused],
            60,
            "broker 1 to refuse alice's writes again",
            interval=0.5,
        )
        assert not cluster.zk._zk.exists(f"/kafka-acl/Topic/{TOPIC}")
    finally:
        cluster.close()
