"""Replication across three real brokers (subprocesses) over real ZooKeeper, with real
clients: followers fetch, the high watermark bounds consumers, the ISR shrinks and grows
in the partition-state znode, acks=all waits for the ISR, and a leader crash loses no
acknowledged record."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import PartitionState
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import read_values
from tests.helpers.cluster import wait_for, zk_broker

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(150)]

BROKER_IDS = (1, 2, 3)


@pytest.fixture
def zk(zk_connect: str) -> Iterator[ZkClient]:
    client = ZkClient.connect(zk_connect, session_timeout_ms=10000)
    try:
        yield client
    finally:
        client.close()


def _start_cluster(
    zk: ZkClient, tmp_path: Path, zk_connect: str, **extra: str
) -> list[BrokerProcess]:
    brokers = [zk_broker(tmp_path, zk_connect, i, extra).start() for i in BROKER_IDS]
    # A broker listens before it registers in /brokers/ids, and CreateTopics places replicas
    # on the registered brokers only: a topic created the moment broker 3's port opens could
    # find two brokers and be refused replication factor 3.
    try:
        wait_for(lambda: zk.get_broker_ids() == list(BROKER_IDS), 30, "three brokers registered")
    except BaseException:
        _stop_all(brokers)
        raise
    return brokers


def _stop_all(brokers: list[BrokerProcess]) -> None:
    for broker in brokers:
        if broker.proc is not None and broker.proc.poll() is None:
            os.kill(broker.proc.pid, signal.SIGCONT)
    for broker in brokers:
        try:
            broker.stop(timeout=20)
        except RuntimeError:
            broker.kill()


def _bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers if b.is_running())


def _create_topic(brokers: list[BrokerProcess], topic: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=3, config=config)]
    )
    futures[topic].result(30)


def _state(zk: ZkClient, topic: str) -> PartitionState | None:
    found = zk.get_partition_state(topic, 0)
    if found is None:
        return None
    return found[0] if isinstance(found, tuple) else found


def _isr(zk: ZkClient, topic: str) -> tuple[int, ...]:
    state = _state(zk, topic)
    return tuple(sorted(state.isr)) if state is not None else ()


def _leader(zk: ZkClient, topic: str) -> int:
    state = _state(zk, topic)
    return state.leader if state is not None else -1


class _Sender:
    """A confluent-kafka producer that records what was acknowledged."""

    def __init__(self, brokers: list[BrokerProcess], **config: Any) -> None:
        settings = {"bootstrap.servers": _bootstrap(brokers), "linger.ms": 5, **config}
        self.producer = Producer(settings)
        self.acked: list[bytes] = []
        self.errors: list[KafkaError] = []

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.errors.append(err)

    def send(self, topic: str, values: list[bytes]) -> None:
        for value in values:
            self.producer.produce(topic, value, partition=0, on_delivery=self._report)
            self.producer.poll(0)
        self.producer.flush(60)


def _produce(
    brokers: list[BrokerProcess], topic: str, values: list[bytes], **config: Any
) -> tuple[list[bytes], list[KafkaError]]:
    """Produce with a new producer; return (acknowledged values, errors)."""
    sender = _Sender(brokers, **config)
    sender.send(topic, values)
    return sender.acked, sender.errors


def _consume_all(
    brokers: list[BrokerProcess], topic: str, expect: int, timeout: float
) -> list[bytes]:
    config = {
        "bootstrap.servers": _bootstrap(brokers),
        "group.id": "replication-check",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    return read_values(config, topic, expect, timeout)


def _segment_bytes(broker: BrokerProcess, topic: str) -> bytes:
    directory = broker.data_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def test_acks_all_records_are_on_every_replica(
    tmp_path: Path, zk_connect: str, zk: ZkClient
) -> None:
    brokers = _start_cluster(zk, tmp_path, zk_connect)
    try:
        _create_topic(brokers, "r3", **{"min.insync.replicas": "2"})
        wait_for(lambda: len(_isr(zk, "r3")) == 3, 20, "ISR of three")
        values = [f"v{i}".encode() for i in range(300)]
        acked, errors = _produce(brokers, "r3", values, acks="all", **{"enable.idempotence": True})
        assert errors == []
        assert sorted(acked) == sorted(values)
        # Followers hold exactly the leader's bytes (offsets, epochs, producer ids kept).
        wait_for(
            lambda: len({_segment_bytes(b, "r3") for b in brokers}) == 1,
            20,
            "byte-identical segments",
        )
        assert len(_segment_bytes(brokers[0], "r3")) > 0
        assert _consume_all(brokers, "r3", len(values), 30) == values
    finally:
        _stop_all(brokers)


def test_stopped_followers_leave_the_isr_and_the_high_watermark_waits(
    tmp_path: Path, zk_connect: str, zk: ZkClient
) -> None:
    brokers = _start_cluster(
        zk,
        tmp_path,
        zk_connect,
        **{"replica.lag.time.max.ms": "6000", "zookeeper.session.timeout.ms": "15000"},
    )
    try:
        _create_topic(brokers, "hw", **{"min.insync.replicas": "2"})
        wait_for(lambda: len(_isr(zk, "hw")) == 3, 20, "ISR of three")
        acked, errors = _produce(brokers, "hw", [b"before"], acks="all")
        assert errors == [] and acked == [b"before"]
        leader = _leader(zk, "hw")
        followers = [b for i, b in zip(BROKER_IDS, brokers, strict=True) if i != leader]
        for follower in followers:
            assert follower.proc is not None
            os.kill(follower.proc.pid, signal.SIGSTOP)
        try:
            # acks=1 is acknowledged by the leader alone, but not readable: the HW waits.
            acked, errors = _produce(brokers, "hw", [b"unreplicated"], acks=1)
            assert errors == [] and acked == [b"unreplicated"]
            # (Read well within replica.lag.time.max.ms: once the followers leave the
            # ISR, the leader alone is the ISR and the HW moves on.)
            assert _consume_all(brokers, "hw", 2, 2) == [b"before"]
            # The followers fall out of the ISR (written to the state znode by the leader).
            wait_for(lambda: _isr(zk, "hw") == (leader,), 15, "ISR shrunk to the leader")
            # min.insync.replicas=2 with an ISR of one: refused before the append.
            acked, errors = _produce(
                brokers, "hw", [b"refused"], acks="all", **{"message.send.max.retries": 0}
            )
            assert acked == []
            assert [e.code() for e in errors] == [KafkaError.NOT_ENOUGH_REPLICAS]
        finally:
            for follower in followers:
                assert follower.proc is not None
                os.kill(follower.proc.pid, signal.SIGCONT)
        wait_for(lambda: _isr(zk, "hw") == BROKER_IDS, 20, "ISR expanded again")
        assert _consume_all(brokers, "hw", 2, 20) == [b"before", b"unreplicated"]
        log_text = brokers[BROKER_IDS.index(leader)].log_text()
        assert "ISR shrink" in log_text and "ISR expand" in log_text
    finally:
        _stop_all(brokers)


def test_leader_crash_loses_no_acknowledged_record(
    tmp_path: Path, zk_connect: str, zk: ZkClient
) -> None:
    brokers = _start_cluster(zk, tmp_path, zk_connect)
    try:
        _create_topic(brokers, "crash", **{"min.insync.replicas": "2"})
        wait_for(lambda: len(_isr(zk, "crash")) == 3, 20, "ISR of three")
        # One idempotent producer across the move: the new leader rebuilt its sequence
        # state from the replicated log, so the producer carries on without a fatal error.
        sender = _Sender(brokers, acks="all", **{"enable.idempotence": True})
        first = [f"a{i}".encode() for i in range(200)]
        sender.send("crash", first)
        assert sender.errors == [] and sorted(sender.acked) == sorted(first)
        old_leader = _leader(zk, "crash")
        brokers[BROKER_IDS.index(old_leader)].kill()
        wait_for(lambda: _leader(zk, "crash") not in (old_leader, -1), 30, "a new leader")
        second = [f"b{i}".encode() for i in range(100)]
        sender.send("crash", second)
        assert sender.errors == []
        assert sorted(sender.acked) == sorted(first + second)
        seen = _consume_all(brokers, "crash", len(first) + len(second), 30)
        assert len(seen) == len(set(seen)), "duplicates"
        assert set(first + second) <= set(seen), "acknowledged records lost"
    finally:
        _stop_all(brokers)


def test_a_diverged_log_is_truncated_by_leader_epoch(
    tmp_path: Path, zk_connect: str, zk: ZkClient
) -> None:
    """KIP-101: a leader takes records its followers never got, then dies; once back as a
    follower it drops them (OffsetForLeaderEpoch) and ends byte-identical to the new leader."""
    brokers = _start_cluster(zk, tmp_path, zk_connect)
    try:
        _create_topic(brokers, "kip101")
        wait_for(lambda: len(_isr(zk, "kip101")) == 3, 20, "ISR of three")
        acked, errors = _produce(brokers, "kip101", [b"common"], acks="all")
        assert errors == [] and acked == [b"common"]
        old_leader = _leader(zk, "kip101")
        old = brokers[BROKER_IDS.index(old_leader)]
        followers = [b for b in brokers if b is not old]
        for follower in followers:
            assert follower.proc is not None
            os.kill(follower.proc.pid, signal.SIGSTOP)
        # The followers' fetches parked at the leader expire empty after
        # replica.fetch.wait.max.ms (500); stopped, they send no new one, so what the
        # leader takes now never leaves it.
        time.sleep(1.5)
        try:
            acked, errors = _produce([old], "kip101", [b"lost1", b"lost2"], acks=1)
            assert errors == [] and len(acked) == 2
        finally:
            old.kill()
            for follower in followers:
                assert follower.proc is not None
                os.kill(follower.proc.pid, signal.SIGCONT)
        wait_for(lambda: _leader(zk, "kip101") not in (old_leader, -1), 30, "a new leader")
        acked, errors = _produce(followers, "kip101", [b"new1", b"new2", b"new3"], acks="all")
        assert errors == [] and len(acked) == 3
        old.start()
        wait_for(
            lambda: len({_segment_bytes(b, "kip101") for b in brokers}) == 1,
            30,
            "the old leader's log to match the new leader's",
        )
        assert "truncating from 3 to 1" in old.log_text()
        assert _consume_all(brokers, "kip101", 4, 20) == [b"common", b"new1", b"new2", b"new3"]
    finally:
        _stop_all(brokers)
