"""What replicating over SASL_SSL costs: two clusters of three broker processes over one
real ZooKeeper, one replicating over PLAINTEXT (the baseline), the other over a SASL_SSL
inter-broker listener (SCRAM-SHA-512, mutual TLS); one confluent-kafka producer, acks=all,
RF 3, 100-byte records, rounds alternating between the clusters.

    PYTHONPATH=src python bench/bench_interbroker_tls.py [--messages 10000] [--rounds 3]

Prints the median messages/s of each and the ratio SASL_SSL / PLAINTEXT, measured in the
same run (followers read file regions through TLS instead of ``sendfile``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_replication import produce  # this script's folder is on sys.path
from confluent_kafka.admin import AdminClient, NewTopic
from tests.helpers.broker import BrokerProcess, free_port, wait_for_port
from tests.helpers.certs import make_pki

from odradek.broker.security.scram import credential_from_password
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.user_configs import write_scram
from odradek.cluster.zookeeper_server import ZooKeeperServer

SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-secret";'
)


def start_cluster(root: Path, zk_connect: str, secured: bool) -> list[BrokerProcess]:
    """Three brokers; ``secured``: they replicate over an INTERNAL SASL_SSL listener."""
    extra: dict[str, str] = {}
    if secured:
        pki = make_pki(root / "pki")
        zk = ZkClient.connect(zk_connect)
        credential = credential_from_password("SCRAM-SHA-512", "broker-secret")
        write_scram(zk, "broker", {"SCRAM-SHA-512": credential.to_text()})
        zk.close()
        extra = {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
            "listener.name.internal.ssl.keystore.type": "PEM",
            "listener.name.internal.ssl.keystore.location": str(pki.server),
            "listener.name.internal.ssl.truststore.type": "PEM",
            "listener.name.internal.ssl.truststore.location": str(pki.ca),
            "listener.name.internal.ssl.client.auth": "required",
        }
    brokers = []
    for broker_id in (1, 2, 3):
        overrides = {
            "zookeeper.connect": zk_connect,
            "broker.id": str(broker_id),
            "controlled.shutdown.retry.backoff.ms": "100",
            **extra,
        }
        broker = BrokerProcess(root / f"b{broker_id}", overrides=overrides)
        internal = free_port()
        if secured:
            broker.overrides["listeners"] = (
                f"PLAINTEXT://127.0.0.1:{broker.port},INTERNAL://127.0.0.1:{internal}"
            )
        brokers.append(broker.start())
        if secured:
            wait_for_port(internal, 30, broker.proc)
    return brokers


def create_topics(bootstrap: str, topics: tuple[str, ...]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic in topics:
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", help="put data and broker logs here (kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ibtls-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        zk = ZooKeeperServer(root / "zk").start()
        plain: list[BrokerProcess] = []
        secured: list[BrokerProcess] = []
        try:
            plain = start_cluster(root / "plain", f"127.0.0.1:{zk.port}/plain", False)
            secured = start_cluster(root / "secured", f"127.0.0.1:{zk.port}/secured", True)
            plain_bootstrap = ",".join(b.bootstrap for b in plain)
            secured_bootstrap = ",".join(b.bootstrap for b in secured)
            for bootstrap in (plain_bootstrap, secured_bootstrap):
                create_topics(bootstrap, ("all",))
            time.sleep(2)  # followers join the ISR
            for bootstrap in (plain_bootstrap, secured_bootstrap):  # warm up
                produce(bootstrap, "all", 1000, "all")
            # Alternate and take medians: the machine is shared, single runs are noisy.
            plains, tls = [], []
            for _ in range(args.rounds):
                plains.append(produce(plain_bootstrap, "all", args.messages, "all"))
                tls.append(produce(secured_bootstrap, "all", args.messages, "all"))
            baseline, secure = statistics.median(plains), statistics.median(tls)
            print(
                f"acks=all, PLAINTEXT between brokers {baseline:10.0f} msg/s "
                f"(baseline, median of {args.rounds})"
            )
            print(
                f"acks=all, SASL_SSL between brokers  {secure:10.0f} msg/s  "
                f"ratio {secure / baseline:.2f}"
            )
        finally:
            for broker in (*plain, *secured):
                broker.stop(timeout=60)
            zk.stop()


if __name__ == "__main__":
    main()
