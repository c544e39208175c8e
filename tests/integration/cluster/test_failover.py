"""Faults in a three-broker cluster: the controller or a partition leader crashes or
pauses, ZooKeeper restarts. Real ZooKeeper, real broker subprocesses, real clients.

These tests assert availability (leaders move, clients carry on, requests succeed); the
leader-kill test also checks that a record acknowledged with acks=all before the kill is
on the new leader (tests/integration/cluster/test_replication.py checks durability in
depth)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.helpers.cluster import SESSION_TIMEOUT_MS, BrokerCluster, wait_for
from tests.helpers.raw import RawClient
from tests.helpers.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(150)]

SESSION_S = SESSION_TIMEOUT_MS / 1000
# What "within the session timeout plus a few seconds" may take on a loaded 2-core machine.
FAILOVER_BOUND_S = SESSION_S + 20
UPDATE_METADATA = 6


def _produce(bootstrap: str, topic: str, partition: int, value: bytes, timeout: float) -> Any:
    """One message through confluent-kafka with its default retries; the delivery error
    (None on success)."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": int(timeout * 1000)})
    result: list[Any] = []
    producer.produce(topic, value, partition=partition, on_delivery=lambda e, _m: result.append(e))
    producer.flush(timeout + 5)
    assert result, "no delivery report"
    return result[0]


def _consume(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_controller_sigkill_elects_a_new_one_that_creates_topics(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(3)
    old = cluster.controller_id()
    assert old is not None
    started = time.monotonic()
    cluster.brokers[old].kill()
    new = wait_for(
        lambda: (c := cluster.controller_id()) not in (None, old) and c,
        FAILOVER_BOUND_S,
        "a new controller",
    )
    # Admin clients send CreateTopics to the controller their Metadata names: once the
    # new controller's UpdateMetadata reached the brokers, they name it.
    cluster.wait_all_agree_on_controller(new)
    cluster.create_topic("after-failover", 4, 2)  # two live brokers left
    elapsed = time.monotonic() - started
    assert elapsed < FAILOVER_BOUND_S, elapsed
    leaders = cluster.leaders("after-failover", via=new)
    assert set(leaders.values()) <= set(cluster.live()) and -1 not in leaders.values()


def _stale_update_metadata(port: int, controller_id: int, epoch: int) -> int:
    """An UpdateMetadata as the deposed controller would send it: its error code."""
    response: Any = RawClient(port).call(
        UPDATE_METADATA,
        8,
        {
            "controller_id": controller_id,
            "is_k_raft_controller": False,
            "controller_epoch": epoch,
            "broker_epoch": -1,
            "topic_states": [],
            "live_brokers": [],
        },
    )
    return int(response.error_code)


def test_paused_controller_is_fenced_and_steps_down(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(3)
    cluster.create_topic("before", 3, 3)
    old = cluster.controller_id()
    assert old is not None
    old_epoch = cluster.zk.get_controller_epoch()
    assert old_epoch is not None
    paused = cluster.brokers[old]
    assert paused.proc is not None
    os.kill(paused.proc.pid, signal.SIGSTOP)
    try:
        # Its session expires; another broker wins /controller with a newer epoch.
        new = wait_for(
            lambda: (c := cluster.controller_id()) not in (None, old) and c,
            FAILOVER_BOUND_S,
            "a new controller while the old one is paused",
        )
        new_epoch = cluster.zk.get_controller_epoch()
        assert new_epoch is not None and new_epoch.epoch > old_epoch.epoch
        others = [b for b in cluster.brokers if b != old]
        for broker_id in others:
            wait_for(
                lambda b=broker_id: cluster.metadata(b).controller_id == new,
                30,
                f"broker {broker_id} to hear from controller {new}",
            )
            # What the paused controller would send when it wakes is refused by epoch.
            port = cluster.brokers[broker_id].port
            code = _stale_update_metadata(port, old, old_epoch.epoch)
            assert code == ErrorCode.stale_controller_epoch
    finally:
        os.kill(paused.proc.pid, signal.SIGCONT)
    # Awake, it finds its session gone: it is no longer controller, joins again as a
    # plain broker, and every broker, itself included, names the new controller.
    wait_for(lambda: sorted(cluster.zk.get_broker_ids()) == [1, 2, 3], 30, "re-registration")
    assert cluster.controller_id() == new
    cluster.wait_all_agree_on_controller(new)
    wait_for(
        lambda: f"broker {old} is no longer controller" in paused.log_text(),
        30,
        "the old controller to log that it stepped down",
    )
    assert paused.is_running()
    # The cluster still works under the new controller.
    cluster.create_topic("after", 3, 3)


def test_leader_sigkill_clients_carry_on(cluster_factory: Callable[..., BrokerCluster]) -> None:
    cluster = cluster_factory(3)
    cluster.create_topic("orders", 3, 3)
    controller = cluster.controller_id()
    leaders = cluster.leaders("orders", via=1)
    # A partition led by a broker that is not the controller: a leader failure only.
    partition, victim = next((p, b) for p, b in sorted(leaders.items()) if b != controller)
    survivor = next(b for b in cluster.brokers if b != victim)
    bootstrap = cluster.bootstrap()
    assert _produce(bootstrap, "orders", partition, b"before", 20) is None
    cluster.brokers[victim].kill()
    started = time.monotonic()
    # confluent-kafka retries on its own until the controller moved leadership.
    assert _produce(bootstrap, "orders", partition, b"after", FAILOVER_BOUND_S + 10) is None
    elapsed = time.monotonic() - started
    assert elapsed < FAILOVER_BOUND_S, elapsed
    new_leader = cluster.leaders("orders", via=survivor)[partition]
    assert new_leader not in (victim, -1)
    # Followers replicated the acknowledged record (acks=all): the new leader has both.
    assert _consume(bootstrap, "orders", partition, 2) == [b"before", b"after"]


def test_controlled_shutdown_moves_leadership_without_failed_deliveries(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(
        3,
        **{
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": "2",
        },
    )
    cluster.create_topic("steady", 6, 3)
    controller = cluster.controller_id()
    leaving = next(b for b in (1, 2, 3) if b != controller)
    before = cluster.leaders("steady", via=controller)
    led = sorted(p for p, b in before.items() if b == leaving)
    assert led, before
    errors: list[KafkaError] = []
    failed: list[Any] = []
    delivered: list[int] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap(controller),
            "linger.ms": 5,
            "error_cb": errors.append,
        }
    )

    def report(err: Any, msg: Any) -> None:
        (failed.append(err) if err else delivered.append(msg.partition()))

    def produce_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            producer.produce("steady", f"m{n}".encode(), partition=n % 6, on_delivery=report)
            producer.poll(0.02)
            n += 1

    produce_for(1.0)
    stopping = cluster.brokers[leaving]
    assert stopping.proc is not None
    stopping.proc.send_signal(signal.SIGTERM)
    while stopping.proc.poll() is None:
        produce_for(0.2)
    assert stopping.proc.returncode == 0
    assert "controlled shutdown succeeded" in stopping.log_text()
    survivor = controller
    after = cluster.leaders("steady", via=survivor)
    assert leaving not in after.values() and -1 not in after.values(), after
    delivered.clear()
    produce_for(2.0)
    assert producer.flush(30) == 0
    assert failed == [], failed
    assert {p for p in delivered} >= set(led)  # its former partitions took writes
    # Only retriable, transport-level trouble reached the client (the broker went away).
    assert not any(e.fatal() for e in errors), errors
    # Back, it catches up from the leaders and rejoins the ISR (replication); the
    # automatic preferred election then gives it back the partitions it led (Kafka elects
    # a preferred replica only from the ISR).
    stopping.start()
    wait_for(lambda: sorted(cluster.zk.get_broker_ids()) == [1, 2, 3], 30, "re-registration")
    wait_for(
        lambda: cluster.leaders("steady", via=survivor) == before,
        30,
        "preferred leaders to return",
    )
    produce_for(1.0)
    assert producer.flush(30) == 0
    assert failed == [], failed


def test_zookeeper_restart_leaves_the_cluster_serving(
    cluster_factory: Callable[..., BrokerCluster], zookeeper_server: ZooKeeperServer
) -> None:
    cluster = cluster_factory(3)
    cluster.create_topic("kept", 3, 3)
    zookeeper_server.kill()
    zookeeper_server.start()  # the same port and data directory
    wait_for(lambda: sorted(cluster.zk.get_broker_ids()) == [1, 2, 3], 60, "brokers registered")
    controller = wait_for(cluster.controller_id, 60, "a controller")
    cluster.wait_all_agree_on_controller(controller, timeout=60)
    bootstrap = cluster.bootstrap(1)
    for partition in range(3):
        value = f"after-restart-{partition}".encode()
        assert _produce(bootstrap, "kept", partition, value, 40) is None
        assert value in _consume(bootstrap, "kept", partition, 1)
    cluster.create_topic("new-after-restart", 3, 3)
    assert all(b.is_running() for b in cluster.brokers.values())
