"""Inter-broker traffic over a SASL_SSL listener (SCRAM-SHA-512 and mutual TLS), with the
authorizer on: replication, the controller's requests and controlled shutdown all go
through it, and a broker with wrong credentials, or whose principal lacks ClusterAction,
never joins the ISR and says why in one log line.

One cluster for the module: brokers 1-3 each with a PLAINTEXT listener for the clients
and an INTERNAL (SASL_SSL) listener between brokers. The tests run in order; the last two
restart broker 3 with bad settings.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from odradek.broker.security.scram import credential_from_password
from odradek.cluster.zk.user_configs import write_scram
from tests.helpers.broker import free_port, wait_for_port
from tests.helpers.certs import make_pki
from tests.helpers.cluster import BrokerCluster, wait_for
from tests.helpers.zookeeper import ZooKeeperServer, zookeeper_server

__all__ = ["zookeeper_server"]

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(240)]

TOPIC = "secured"
PARTITIONS = 3
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
JAAS_KEY = "listener.name.internal.scram-sha-512.sasl.jaas.config"
_chroots = itertools.count()


def jaas(user: str, password: str) -> str:
    return f'{SCRAM} required username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def cluster(
    zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerCluster]:
    tmp = tmp_path_factory.mktemp("interbroker")
    pki = make_pki(tmp / "pki")
    settings = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        JAAS_KEY: jaas("broker", "broker-secret"),
        "listener.name.internal.ssl.keystore.type": "PEM",
        "listener.name.internal.ssl.keystore.location": str(pki.server),
        "listener.name.internal.ssl.truststore.type": "PEM",
        "listener.name.internal.ssl.truststore.location": str(pki.ca),
        "listener.name.internal.ssl.client.auth": "required",
        # SASL sessions end every few seconds (KIP-368): every channel opens a fresh
        # link before its session ends, and replication goes on.
        "listener.name.internal.connections.max.reauth.ms": "5000",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # The clients' PLAINTEXT principal is a super user too: this module is about the
        # brokers' own principal.
        "super.users": "User:broker;User:ANONYMOUS",
        "replica.lag.time.max.ms": "4000",
        "replica.fetch.backoff.ms": "300",
    }
    zk_connect = f"{zookeeper_server.connect}/t/interbroker-{next(_chroots)}"
    cluster = BrokerCluster(tmp, zk_connect, 3, settings)
    # As with Kafka, the brokers' SCRAM users exist before the brokers start.
    for user in ("broker", "intruder"):
        credential = credential_from_password("SCRAM-SHA-512", f"{user}-secret")
        write_scram(cluster.zk, user, {"SCRAM-SHA-512": credential.to_text()})
    internal = {}
    for broker_id, broker in cluster.brokers.items():
        internal[broker_id] = free_port()
        broker.overrides["listeners"] = (
            f"PLAINTEXT://127.0.0.1:{broker.port},INTERNAL://127.0.0.1:{internal[broker_id]}"
        )
    try:
        cluster.start()
        for broker_id, port in internal.items():
            wait_for_port(port, 30, cluster.brokers[broker_id].proc)
        cluster.create_topic(TOPIC, PARTITIONS, 3)
        yield cluster
    finally:
        cluster.close()


def isr(cluster: BrokerCluster, via: int) -> dict[int, set[int]]:
    partitions = cluster.metadata(via, TOPIC).topics[TOPIC].partitions
    return {p: set(info.isrs) for p, info in partitions.items()}


def produce_all(cluster: BrokerCluster, count: int, via: int = 1) -> None:
    errors: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap(via),
            "acks": "all",
            "message.timeout.ms": 30000,
        }
    )
    for i in range(count):
        producer.produce(TOPIC, f"v{i}".encode(), partition=i % PARTITIONS,
                         on_delivery=lambda err, _msg: errors.append(err))  # fmt: skip
    assert producer.flush(60) == 0
    assert errors == [None] * count


def test_replication_and_controller_requests_go_over_sasl_ssl(cluster: BrokerCluster) -> None:
    produce_all(cluster, 300)
    wait_for(lambda: all(r == {1, 2, 3} for r in isr(cluster, 1).values()), 30, "full ISR")
    for broker in cluster.brokers.values():
        text = broker.log_text()
        # Every broker accepted the others (and the controller) as User:broker over SCRAM.
        assert re.search(r"authenticated as User:broker with SCRAM-SHA-512 on listener INTERNAL",
                         text)  # fmt: skip
        assert "cannot authenticate" not in text

    # A leader move: broker 1 stops (controlled shutdown to the controller, LeaderAndIsr
    # to the new leaders), comes back and catches up through the secured listener.
    leaders = cluster.leaders(TOPIC, 2)
    moved = [p for p, leader in leaders.items() if leader == 1]
    cluster.brokers[1].stop()
    assert "controlled shutdown succeeded" in cluster.brokers[1].log_text()
    wait_for(
        lambda: all(leader in (2, 3) for leader in cluster.leaders(TOPIC, 2).values()),
        30,
        f"new leaders for partitions {moved}",
    )
    produce_all(cluster, 60, via=2)
    cluster.brokers[1].start()
    wait_for(lambda: all(r == {1, 2, 3} for r in isr(cluster, 2).values()), 60, "full ISR again")


def _restart_broker_3(cluster: BrokerCluster, **overrides: str) -> None:
    broker = cluster.brokers[3]
    broker.stop()
    # Its fetchers must meet leaders 1 and 2, and the controller must not be broker 3
    # (a controller that cannot authenticate reaches no broker at all).
    wait_for(lambda: cluster.controller_id() in (1, 2), 30, "a controller other than 3")
    wait_for(lambda: all(3 not in r for r in isr(cluster, 1).values()), 30, "3 out of the ISR")
    broker.log_path.write_text("")
    broker.overrides.update(overrides)
    broker.start()


def _stays_out_of_isr(cluster: BrokerCluster, line: re.Pattern[str]) -> list[str]:
    broker = cluster.brokers[3]
    found = wait_for(lambda: line.findall(broker.log_text()), 30, f"{line.pattern} in the log")
    produce_all(cluster, 30, via=1)  # acks=all with the two in-sync replicas
    for _ in range(3):  # a few fetch rounds later: still out
        time.sleep(1)
        assert all(3 not in r for r in isr(cluster, 1).values())
    return found


def test_wrong_password_keeps_the_follower_out_of_the_isr(cluster: BrokerCluster) -> None:
    _restart_broker_3(cluster, **{JAAS_KEY: jaas("broker", "not-the-password")})
    line = re.compile(
        r"ERROR .*ReplicaFetcher-\d-(\d): cannot authenticate to leader \d: .*"
        r"SASL_AUTHENTICATION_FAILED.*; this broker stays out of the ISR"
    )
    found = _stays_out_of_isr(cluster, line)
    # One line per fetcher (one per leader), not one per retry.
    assert len(found) == len(set(found)), found


def test_principal_without_cluster_action_is_refused(cluster: BrokerCluster) -> None:
    _restart_broker_3(cluster, **{JAAS_KEY: jaas("intruder", "intruder-secret")})
    line = re.compile(
        r"ERROR .*ReplicaFetcher-\d-(\d): leader \d refused \w+ from this broker: "
        r"TOPIC_AUTHORIZATION_FAILED"
    )
    found = _stays_out_of_isr(cluster, line)
    assert len(found) == len(set(found)), found
    # Put right, broker 3 catches up and rejoins.
    _restart_broker_3(cluster, **{JAAS_KEY: jaas("broker", "broker-secret")})
    wait_for(lambda: all(r == {1, 2, 3} for r in isr(cluster, 1).values()), 60, "full ISR")
