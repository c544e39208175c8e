"""A full disk in a cluster: the broker halts, as Kafka's does, and its partitions move.

Kafka halts a broker whose last log directory fails ("Shutdown broker because all log
dirs in ... have failed", exit status 1); its ZooKeeper session expires and the
controller elects new leaders from the ISR. Here broker 3's data directory is on a small
tmpfs and broker 3 leads the topic's one partition (RF 3, acks=all, idempotent
producer). Once the tmpfs is full, the next append fails: broker 3 exits with status 1
and that one line, broker 1 or 2 takes over, the producer carries on there, and every
acknowledged record reads back exactly once, in order. (The embedded single broker does
not halt: tests/integration/test_full_disk.py.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from tests.helpers.clients import read_partition
from tests.helpers.cluster import SESSION_TIMEOUT_MS, BrokerCluster, wait_for
from tests.helpers.disks import fill, small_tmpfs

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]

TOPIC = "full"
FULL = 3  # the broker whose disk fills
VALUE = b"v" * 4000  # larger than a page: it cannot fit in the slack of the last one
# The session timeout plus an election, on a loaded 2-core machine.
FAILOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 30


def test_a_broker_whose_disk_fills_halts_and_its_partitions_fail_over(
    tmp_path: Path, zk_connect: str
) -> None:
    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        cluster = BrokerCluster(tmp_path, zk_connect, 3)
        cluster.brokers[FULL].data_dir = disk / "data"  # its log stays in tmp_path
        try:
            cluster.start()
            _run(cluster, disk)
        finally:
            cluster.close()


def _run(cluster: BrokerCluster, disk: Path) -> None:
    admin = cluster.admin()
    topic = NewTopic(
        TOPIC, 1, replica_assignment=[[FULL, 1, 2]], config={"min.insync.replicas": "2"}
    )
    admin.create_topics([topic], operation_timeout=20)[TOPIC].result(30)
    wait_for(lambda: cluster.leaders(TOPIC, via=1) == {0: FULL}, 30, f"broker {FULL} to lead")

    acked: list[bytes] = []
    failed: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        (failed if err is not None else acked).append(err or msg.value())

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap(1, 2),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "message.timeout.ms": int(FAILOVER_BOUND_S * 1000 * 2),
        }
    )

    def send(label: str, count: int) -> None:
        for i in range(count):
            producer.produce(TOPIC, f"{label}-{i}-".encode() + VALUE, partition=0,
                             on_delivery=delivered)  # fmt: skip
            producer.poll(0)
        assert producer.flush(FAILOVER_BOUND_S * 2) == 0, "records left undelivered"

    send("before", 20)
    assert len(acked) == 20 and not failed

    fill(disk / "filler")
    halted_at = time.monotonic()
    send("during", 20)  # the first append on broker 3 fails; these go on after failover
    assert not failed, failed
    broker = cluster.brokers[FULL]
    status = wait_for(lambda: broker.proc.poll() is not None and broker.proc.returncode, 30,
                      f"broker {FULL} to exit")  # fmt: skip
    assert status == 1
    log = broker.log_text()
    halt_line = f"Shutdown broker because all log dirs in {disk / 'data'} have failed"
    assert halt_line in log, log[-3000:]
    assert "No space left on device" in log
    assert "Traceback" not in log

    leader = wait_for(
        lambda: (lambda leader: leader if leader in (1, 2) else None)(
            cluster.leaders(TOPIC, via=1)[0]
        ),
        FAILOVER_BOUND_S,
        "a new leader",
    )
    assert time.monotonic() - halted_at < FAILOVER_BOUND_S * 2
    send("after", 10)
    assert len(acked) == 50 and not failed

    read = [value for _, value in read_partition(cluster.bootstrap(leader), TOPIC, 50)]
    assert read == acked  # all of them, once each, in the order acknowledged
    assert FULL not in cluster.zk.get_broker_ids()
