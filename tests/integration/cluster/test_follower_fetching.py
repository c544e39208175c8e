"""Fetch from follower (KIP-392) with confluent-kafka's ``client.rack``: brokers in racks
a, b, c with Kafka's RackAwareReplicaSelector; the leader (rack a) points a consumer of
rack c at broker 3, which serves it every record, in order."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from odradek.broker.replica_selector import RACK_AWARE_REPLICA_SELECTOR
from tests.helpers.clients import read_values
from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]

RACKS = {1: "a", 2: "b", 3: "c"}
SERVING = "t-0: serving consumer fetches as a follower of 1"


def _consume(bootstrap: str, rack: str, expect: int) -> list[bytes]:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"rack-{rack}",
        "client.rack": rack,
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    }
    return read_values(config, "t", expect, 60)


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[BrokerCluster]:
    started = BrokerCluster(
        tmp_path, zk_connect, 3, {"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR}
    )
    for broker_id, rack in RACKS.items():
        started.brokers[broker_id].overrides["broker.rack"] = rack
    try:
        yield started.start()
    finally:
        started.close()


def test_a_consumer_reads_from_the_replica_in_its_rack(cluster: BrokerCluster) -> None:
    admin = cluster.admin()
    admin.create_topics([NewTopic("t", 1, replica_assignment=[[1, 2, 3]])])["t"].result(30)
    wait_for(
        lambda: sorted(cluster.metadata(1, "t").topics["t"].partitions[0].isrs) == [1, 2, 3],
        30,
        "an ISR of three",
    )
    values = [f"record-{i}".encode() for i in range(500)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    for value in values:
        producer.produce("t", value, partition=0)
    assert producer.flush(30) == 0

    # Rack c: broker 3 serves it (the leader only named it as preferred read replica).
    assert _consume(cluster.bootstrap(), "c", len(values)) == values
    assert SERVING in cluster.brokers[3].log_text()
    assert SERVING not in cluster.brokers[2].log_text()
    # Rack a is the leader's own: nothing moves to a follower.
    assert _consume(cluster.bootstrap(), "a", len(values)) == values
    assert SERVING not in cluster.brokers[2].log_text()
    # kafka-python follows the preferred read replica too (its Fetch v12 carries the rack).
    assert _consume_kafka_python(cluster.bootstrap(), "b", len(values)) == values
    assert SERVING in cluster.brokers[2].log_text()


def _consume_kafka_python(bootstrap: str, rack: str, expect: int) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPythonPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, client_rack=rack, enable_auto_commit=False
    )
    partition = KafkaPythonPartition("t", 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < expect and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
    finally:
        consumer.close()
    return values
