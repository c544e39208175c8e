"""Transactions across broker crashes: a transaction the coordinator acknowledged
(PrepareCommit written) but whose markers were not written yet completes after a restart,
and a consume-transform-produce loop SIGKILLed at random points keeps exactly-once."""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.integration.test_txn_confluent import consume_all

WAIT_S = 30
OVERRIDES = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
}


def _create(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=WAIT_S)


def test_prepared_commit_completes_after_sigkill(tmp_path: Path) -> None:
    import os

    os.environ["ODRADEK_DEBUG_TXN_MARKER_DELAY_MS"] = "60000"
    try:
        broker = BrokerProcess(tmp_path / "data", overrides=OVERRIDES).start()
    finally:
        del os.environ["ODRADEK_DEBUG_TXN_MARKER_DELAY_MS"]
    try:
        topic = "prepared"
        _create(broker.bootstrap, topic, partitions=2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tp"})
        producer.init_transactions(WAIT_S)
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tp-group"})
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, f"v{i}".encode(), partition=i % 2)
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 1, 42)], group.consumer_group_metadata(), WAIT_S
        )
        producer.commit_transaction(WAIT_S)  # answered once PrepareCommit is written
        group.close()
        # Markers are held back: read_committed sees nothing yet.
        assert consume_all(broker.bootstrap, topic, "read_committed", idle_s=1) == []
        broker.kill()
        broker.start()  # no marker delay this time: loading finishes the commit
        seen = consume_all(broker.bootstrap, topic, "read_committed", expected=10)
        assert sorted(v for _, _, v in seen) == sorted(f"v{i}".encode() for i in range(10))
        # The offsets committed in the transaction were pending at the crash: the marker
        # written after the restart made them the group's.
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tp-group"})
        committed = group.committed([TopicPartition(topic, 1)], timeout=WAIT_S)
        group.close()
        assert committed[0].offset == 42
        # The id is usable again, with a bumped epoch.
        again = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tp"})
        again.init_transactions(WAIT_S)
        again.begin_transaction()
        again.produce(topic, b"after", partition=0)
        again.commit_transaction(WAIT_S)
        seen = consume_all(broker.bootstrap, topic, "read_committed", expected=11)
        assert len(seen) == 11
    finally:
        broker.stop()


def _ctp_round(bootstrap: str, source: str, sink: str, group: str, budget_s: float) -> None:
    """Copy source to sink exactly once until the budget runs out or the broker dies."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp", "linger.ms": 2})
    try:
        producer.init_transactions(WAIT_S)
        consumer.subscribe([source])
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            msgs = consumer.consume(20, 0.5)
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, m.value(), partition=0)
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), WAIT_S
            )
            producer.commit_transaction(WAIT_S)
    except KafkaException:
        pass  # the broker was killed under us
    finally:
        try:
            consumer.close()
        except Exception:
            pass


def test_consume_transform_produce_survives_sigkills(tmp_path: Path) -> None:
    import threading

    broker = BrokerProcess(tmp_path / "data", overrides=OVERRIDES).start()
    try:
        source, sink, group = "ctp-in", "ctp-out", f"g-{uuid.uuid4().hex[:6]}"
        _create(broker.bootstrap, source)
        _create(broker.bootstrap, sink)
        plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        total = 300
        for i in range(total):
            plain.produce(source, f"m{i}".encode(), partition=0)
        plain.flush(WAIT_S)
        rng = random.Random(7)
        for _ in range(10):  # ten SIGKILLs at random points, each followed by a restart
            worker = threading.Thread(
                target=_ctp_round, args=(broker.bootstrap, source, sink, group, 8.0)
            )
            worker.start()
            time.sleep(rng.uniform(1.0, 3.0))
            broker.kill()
            worker.join(60)
            broker.start()
        # A last clean round finishes the copy.
        _ctp_round(broker.bootstrap, source, sink, group, 15.0)
        seen = consume_all(broker.bootstrap, sink, "read_committed", expected=total)
        values = [v.decode() for _, _, v in seen]
        assert sorted(values, key=lambda v: int(v[1:])) == [f"m{i}" for i in range(total)]
        assert values == [f"m{i}" for i in range(total)]  # one partition: in order too
    finally:
        broker.stop()
