"""SCRAM credentials and client quotas in a two-broker cluster: written through one
broker into ZooKeeper in Kafka's layout, seen by the other through the change
notifications (a user created via broker 1 authenticates on broker 2)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from odradek.client.admin import Admin
from tests.helpers.broker import free_port, wait_for_port
from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]


@pytest.fixture
def sasl_cluster(tmp_path: Path, zk_connect: str) -> Iterator[tuple[BrokerCluster, dict]]:
    cluster = BrokerCluster(tmp_path, zk_connect, 2, {"sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    sasl_ports = {}
    for broker_id, broker in cluster.brokers.items():
        sasl_ports[broker_id] = free_port()
        broker.overrides["listeners"] = (
            f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_ports[broker_id]}"
        )
    try:
        cluster.start()
        for broker_id, port in sasl_ports.items():
            wait_for_port(port, 30, cluster.brokers[broker_id].proc)
        yield cluster, sasl_ports
    finally:
        cluster.close()


def _delivered(bootstrap: str, user: str, password: str) -> bool:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": password,
            "message.timeout.ms": 5000,
        }
    )
    errors: list = []

    def report(err: object, _msg: object) -> None:
        errors.append(err)

    producer.produce("scram-topic", b"hello", on_delivery=report)
    remaining = producer.flush(15)
    return remaining == 0 and len(errors) == 1 and errors[0] is None


def test_user_created_via_broker_1_authenticates_on_broker_2(
    sasl_cluster: tuple[BrokerCluster, dict],
) -> None:
    cluster, sasl_ports = sasl_cluster
    cluster.create_topic("scram-topic", 1, replication_factor=2)
    upsert = UserScramCredentialUpsertion(
        "zed", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"zed-secret"
    )
    admin = cluster.admin(1)  # kept: librdkafka fails futures of a destroyed handle
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(10)
    # Kafka's znode: {"version":1,"config":{"SCRAM-SHA-256":"salt=...,...,iterations=4096"}}
    data, _ = cluster.zk._zk.get("/config/users/zed")
    stored = json.loads(data)
    assert stored["version"] == 1
    text = stored["config"]["SCRAM-SHA-256"]
    assert text.startswith("salt=") and "stored_key=" in text and text.endswith("iterations=4096")
    assert "zed-secret" not in data.decode()
    bootstrap2 = f"127.0.0.1:{sasl_ports[2]}"
    wait_for(lambda: _delivered(bootstrap2, "zed", "zed-secret"), 30, "zed on broker 2")
    assert not _delivered(bootstrap2, "zed", "wrong")


def test_quota_set_via_one_broker_is_in_zookeeper_and_on_the_other(
    sasl_cluster: tuple[BrokerCluster, dict],
) -> None:
    cluster, _ = sasl_cluster

    async def alter_then_describe() -> list:
        admin = Admin(cluster.bootstrap(1))
        await admin.start()
        try:
            await admin.alter_client_quotas(
                {"user": "ann", "client-id": "app"}, {"producer_byte_rate": 1024.0}
            )
            await admin.alter_client_quotas({"client-id": None}, {"consumer_byte_rate": 2.5e6})
        finally:
            await admin.close()
        other = Admin(cluster.bootstrap(2))
        await other.start()
        try:
            return await other.describe_client_quotas([])
        finally:
            await other.close()

    found = asyncio.run(alter_then_describe())
    assert ({"user": "ann", "client-id": "app"}, {"producer_byte_rate": 1024.0}) in found
    assert ({"client-id": None}, {"consumer_byte_rate": 2.5e6}) in found
    assert cluster.zk.get_entity_config("users", "ann/clients/app") == {
        "producer_byte_rate": "1024"
    }
    assert cluster.zk.get_entity_config("clients", "<default>") == {
        "consumer_byte_rate": "2500000"
    }
    # Broker 2 applied it from the notification (not only read it back for Describe).
    wait_for(
        lambda: "entityPath: users/ann/clients/app" in cluster.brokers[2].log_text(),
        30,
        "broker 2 to process the quota change notification",
    )


def test_user_written_into_zookeeper_by_the_cli_authenticates(
    sasl_cluster: tuple[BrokerCluster, dict], zk_connect: str
) -> None:
    # kafka-configs.sh --zookeeper: how the brokers' own SCRAM user is made before they run.
    cluster, sasl_ports = sasl_cluster
    cluster.create_topic("scram-topic", 1, replication_factor=2)
    odradek = [sys.executable, "-m", "odradek", "users", "add", "carl", "--zookeeper", zk_connect]
    done = subprocess.run(
        [*odradek, "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carl-secret]"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Completed updating config for user carl."
    stored = json.loads(cluster.zk._zk.get("/config/users/carl")[0])
    assert stored["config"]["SCRAM-SHA-256"].endswith("iterations=8192")
    wait_for(lambda: _delivered(f"127.0.0.1:{sasl_ports[2]}", "carl", "carl-secret"), 30, "carl")
    refused = subprocess.run(
        [*odradek, "--add-config", "SCRAM-SHA-512=[iterations=100,password=x]"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [
        "error: --add-config: SCRAM-SHA-512 iterations must be between 4096 and 16384"
    ]
