"""Cluster figures: failover times, topic creation and Metadata against a ZooKeeper cluster.

Run from the repository root: ``.venv/bin/python bench/bench_cluster.py`` (``--help`` for
the knobs). It starts a standalone ZooKeeper (the Debian ``zookeeper`` package) and three
brokers (ids 1-3) on 127.0.0.1, all in a temporary directory, and prints:

1. **Leader failover.** A 3-partition topic with replication factor 3; the leader of a
   partition (a broker that is not the controller) is SIGKILLed, and the clock runs until
   confluent-kafka (its default retries) has a produce to that partition acknowledged. It
   depends on ``zookeeper.session.timeout.ms`` (the dead broker's registration goes only
   when its session expires), printed with the figure and as a ratio to it.
2. **Controller failover.** SIGKILL of the controller until ``/controller`` names another
   broker: again the session timeout plus the election.
3. **Creating 1,000 partitions** with replication factor 3 on the three brokers
   (CreateTopics answered once every partition has a leader in the metadata cache: the
   ZooKeeper writes, the controller's elections, LeaderAndIsr to every replica and
   UpdateMetadata to every broker), against 1,000 partitions on one embedded broker (no
   ZooKeeper; replication factor 1, its only choice) started in the same run.
4. **Metadata latency** for all topics, answered by a cluster broker from its metadata
   cache (replication factor 3) against the embedded broker with the same partitions
   (``--embedded-partitions``, 5,000 to keep the run short; the embedded broker now hosts
   up to about 19,000 with ``ulimit -n`` 20000, see bench_partitions.py), then on the
   cluster alone with ``--metadata-partitions`` (10,000).

Without replication (not built yet) the replication factor costs placement, elections
and requests, not data copies.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.zookeeper_server import ZooKeeperServer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.broker import BrokerProcess  # noqa: E402
from tests.helpers.cluster import BrokerCluster, wait_for  # noqa: E402
from tests.helpers.raw import METADATA, RawClient  # noqa: E402

SESSION_MS = 6000


def produce_once(bootstrap: str, topic: str, partition: int, timeout_s: float) -> bool:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "message.timeout.ms": int(timeout_s * 1000)}
    )
    result: list[Any] = []
    producer.produce(topic, b"x", partition=partition, on_delivery=lambda e, _m: result.append(e))
    producer.flush(timeout_s + 5)
    return bool(result) and result[0] is None


def leader_failover(cluster: BrokerCluster, trials: int) -> list[float]:
    times = []
    for trial in range(trials):
        topic = f"failover-{trial}"
        cluster.create_topic(topic, 3, 3)
        controller = cluster.controller_id()
        leaders = cluster.leaders(topic, via=controller or 1)
        partition, victim = next((p, b) for p, b in sorted(leaders.items()) if b != controller)
        bootstrap = cluster.bootstrap(*(b for b in cluster.brokers if b != victim))
        assert produce_once(bootstrap, topic, partition, 20)
        started = time.monotonic()
        cluster.brokers[victim].kill()
        assert produce_once(bootstrap, topic, partition, 60), "no produce after failover"
        times.append(time.monotonic() - started)
        restart(cluster, victim)
    return times


def restart(cluster: BrokerCluster, broker_id: int) -> None:
    cluster.brokers[broker_id].start()
    ids = sorted(cluster.brokers)
    wait_for(lambda: cluster.zk.get_broker_ids() == ids, 60, "every broker registered")
    wait_for(lambda: sorted(cluster.metadata(broker_id).brokers) == ids, 60, "the restarted broker")


def controller_failover(cluster: BrokerCluster, trials: int) -> list[float]:
    times = []
    for _ in range(trials):
        old = cluster.controller_id()
        assert old is not None
        started = time.monotonic()
        cluster.brokers[old].kill()
        wait_for(
            lambda o=old: cluster.controller_id() not in (None, o), 60, "a new controller", 0.01
        )
        times.append(time.monotonic() - started)
        restart(cluster, old)
    return times


def create_partitions(bootstrap: str, topic: str, partitions: int, rf: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    futures = admin.create_topics([NewTopic(topic, partitions, rf)], operation_timeout=300)
    futures[topic].result(310)
    return time.monotonic() - started


def metadata_latency(port: int, requests: int) -> tuple[float, int]:
    """Median seconds of a Metadata v9 request for every topic, and the partitions seen."""
    raw = RawClient(port)
    raw.sock.settimeout(60)
    values = {
        "topics": None,
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    times = []
    seen = 0
    for _ in range(requests):
        started = time.perf_counter()
        response: Any = raw.call(METADATA, 9, values)
        times.append(time.perf_counter() - started)
        seen = sum(len(t.partitions) for t in response.topics)
    return statistics.median(times), seen


def fill(bootstrap: str, prefix: str, total: int, rf: int, per_topic: int = 1000) -> None:
    for n in range(total // per_topic):
        create_partitions(bootstrap, f"{prefix}-{n}", per_topic, rf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2, help="failover trials of each kind")
    parser.add_argument("--partitions", type=int, default=1000, help="partitions to create")
    parser.add_argument("--metadata-partitions", type=int, default=10000)
    parser.add_argument("--embedded-partitions", type=int, default=5000)
    parser.add_argument("--metadata-requests", type=int, default=20)
    args = parser.parse_args()
    session_s = SESSION_MS / 1000
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        base = Path(tmp)
        zookeeper = ZooKeeperServer(base / "zookeeper").start()
        embedded = BrokerProcess(base / "embedded", log_path=base / "embedded.log").start()
        cluster = BrokerCluster(
            base,
            f"{zookeeper.connect}/bench",
            3,
            {"zookeeper.session.timeout.ms": str(SESSION_MS), "log.segment.bytes": "1048576"},
        ).start()
        try:
            print(f"zookeeper.session.timeout.ms={SESSION_MS}, 3 brokers, 2-core machine")
            leader = leader_failover(cluster, args.trials)
            print(
                "leader SIGKILL -> first acknowledged produce to its partition: "
                + ", ".join(f"{t:.2f} s ({t / session_s:.2f} x session timeout)" for t in leader)
            )
            ctl = controller_failover(cluster, args.trials)
            print(
                "controller SIGKILL -> new /controller: "
                + ", ".join(f"{t:.2f} s ({t / session_s:.2f} x session timeout)" for t in ctl)
            )
            n = args.partitions
            clustered = create_partitions(cluster.bootstrap(), "many", n, 3)
            single = create_partitions(embedded.bootstrap, "many", n, 1)
            print(
                f"create {n} partitions: cluster RF 3 {clustered:.2f} s, embedded broker "
                f"RF 1 {single:.2f} s, ratio {clustered / single:.1f}"
            )
            # Both are compared at --embedded-partitions, then the cluster alone grows to
            # --metadata-partitions.
            requests = args.metadata_requests
            both = min(args.embedded_partitions, args.metadata_partitions)
            fill(cluster.bootstrap(), "meta", both - n, 3)
            fill(embedded.bootstrap, "meta", both - n, 1)
            at_c, seen_c = metadata_latency(cluster.brokers[1].port, requests)
            at_s, seen_s = metadata_latency(embedded.port, requests)
            print(
                f"Metadata (all topics), median of {requests}: {seen_c} partitions on a cluster "
                f"broker {at_c * 1000:.1f} ms, {seen_s} on the embedded broker "
                f"{at_s * 1000:.1f} ms, ratio {at_c / at_s:.2f}"
            )
            fill(cluster.bootstrap(), "meta-more", args.metadata_partitions - both, 3)
            big, seen_big = metadata_latency(cluster.brokers[1].port, requests)
            print(
                f"Metadata (all topics), median of {requests}: {seen_big} partitions on a "
                f"cluster broker {big * 1000:.1f} ms (x{big / at_s:.2f} the embedded broker at "
                f"{seen_s}, x{big / at_c:.2f} the cluster at {seen_c})"
            )
        finally:
            cluster.close()
            embedded.stop(120)
            zookeeper.stop()


if __name__ == "__main__":
    main()
