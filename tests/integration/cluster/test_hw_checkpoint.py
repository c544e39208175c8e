"""A restarted leader starts from its checkpointed high watermark (Kafka's
replication-offset-checkpoint), not from its log end: records its follower never had
stay invisible to consumers until the follower has them.

Broker 1 leads t-0 with ISR [1, 2]. Broker 2 is paused, so a record produced with acks=1
is only on broker 1, above the high watermark. Both brokers are killed before anyone can
shrink the ISR, and broker 1 alone comes back: the controller (broker 1 itself) makes it
leader with the ISR [1, 2] still in ZooKeeper. Its follower is unknown, so the high
watermark can only be what was checkpointed; a broker that trusted its log end would
hand the unreplicated record to consumers.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.zk.client import ZkClient
from tests.helpers.broker import BrokerProcess
from tests.helpers.cluster import wait_for, zk_broker

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]


def _broker(tmp_path: Path, zk_connect: str, broker_id: int) -> BrokerProcess:
    return zk_broker(
        tmp_path,
        zk_connect,
        broker_id,
        {
            "replica.lag.time.max.ms": "60000",
            "replica.high.watermark.checkpoint.interval.ms": "200",
        },
    )


def _produce(bootstrap: str, value: bytes, acks: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks})
    errors: list[KafkaError] = []
    producer.produce("t", value, partition=0, on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(30) == 0
    assert errors == []


def _high_watermark(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw"})
    try:
        return consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=10)[1]
    finally:
        consumer.close()


def test_a_restarted_leader_keeps_its_checkpointed_high_watermark(
    tmp_path: Path, zk_connect: str
) -> None:
    zk = ZkClient.connect(zk_connect, session_timeout_ms=10000)
    brokers = {i: _broker(tmp_path, zk_connect, i).start() for i in (1, 2)}
    try:
        wait_for(lambda: zk.get_broker_ids() == [1, 2], 30, "both brokers registered")
        admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
        # Broker 1 leads (the first replica).
        topic = NewTopic("t", 1, replica_assignment=[[1, 2]])
        admin.create_topics([topic])["t"].result(30)
        wait_for(lambda: sorted(zk.get_partition_state("t", 0)[0].isr) == [1, 2], 30, "ISR")
        _produce(brokers[1].bootstrap, b"replicated", acks="all")

        follower = brokers[2].proc
        assert follower is not None
        os.kill(follower.pid, signal.SIGSTOP)
        _produce(brokers[1].bootstrap, b"unreplicated", acks="1")
        assert _high_watermark(brokers[1].bootstrap) == 1
        checkpoint = brokers[1].data_dir / "replication-offset-checkpoint"
        wait_for(lambda: checkpoint.read_text() == "0\n1\nt 0 1\n", 10, "HW checkpointed")

        # Nobody left to act on the deaths: the state znode keeps leader 1, ISR [1, 2].
        brokers[1].kill()
        brokers[2].kill()
        wait_for(lambda: zk.get_broker_ids() == [], 30, "both sessions expired")
        state = zk.get_partition_state("t", 0)[0]
        assert (state.leader, sorted(state.isr)) == (1, [1, 2])

        brokers[1].start()
        wait_for(lambda: zk.get_broker_ids() == [1], 30, "broker 1 back")
        wait_for(lambda: _high_watermark(brokers[1].bootstrap) >= 0, 30, "t-0 led again")
        assert _high_watermark(brokers[1].bootstrap) == 1  # not 2: its log end

        # The follower returns, fetches the record, and the high watermark passes it.
        brokers[2].start()
        wait_for(lambda: _high_watermark(brokers[1].bootstrap) == 2, 30, "HW after catch-up")
    finally:
        for broker in brokers.values():
            if broker.proc is not None and broker.proc.poll() is None:
                os.kill(broker.proc.pid, signal.SIGCONT)
            try:
                broker.stop(timeout=20)
            except RuntimeError:
                broker.kill()
        zk.close()
