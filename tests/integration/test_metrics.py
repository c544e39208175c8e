"""The Prometheus endpoint of a real broker subprocess, read the way Prometheus reads it.

Each figure is checked against what produced it: records sent by confluent-kafka, the
partition's log, requests sent one by one, `odradek groups describe`, sockets opened.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.clients import consume_in_group
from tests.helpers.cluster import wait_for
from tests.helpers.metrics import Scrape, scrape
from tests.helpers.raw import RawClient

pytestmark = pytest.mark.integration

API_VERSIONS = 18


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int, int]]:
    """A broker with metrics on, and a second listener INTERNAL: (broker, metrics port,
    INTERNAL port)."""
    metrics_port, internal_port = free_port(), free_port()
    port = free_port()
    proc = BrokerProcess(
        tmp_path / "data",
        port=port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "metrics.port": str(metrics_port),
            # Every append is fsynced: LogFlushRateAndTimeMs has something to count.
            "log.flush.interval.messages": "1",
        },
    ).start()
    try:
        yield proc, metrics_port, internal_port
    finally:
        proc.stop()


def _produce(bootstrap: str, topic: str, count: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "client.id": "metrics"})
    for i in range(count):
        producer.produce(topic, value=b"v" * size, key=str(i).encode())
    assert producer.flush(30) == 0


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def test_messages_and_bytes_in_and_out_per_topic(broker) -> None:
    proc, metrics_port, _ = broker
    _create(proc.bootstrap, "orders", 2)
    _create(proc.bootstrap, "other", 1)
    _produce(proc.bootstrap, "orders", 700, 50)
    _produce(proc.bootstrap, "other", 30, 10)
    before = scrape(metrics_port)
    assert before.value("kafka_server_brokertopicmetrics_messagesin_total", topic="orders") == 700
    assert before.value("kafka_server_brokertopicmetrics_messagesin_total", topic="other") == 30
    assert before.value("kafka_server_brokertopicmetrics_messagesin_total") == 730
    # Bytes in are the batches as appended: exactly what the logs hold.
    log_bytes = before.total("kafka_log_log_size", topic="orders")
    assert log_bytes > 700 * 50
    bytes_in = before.value("kafka_server_brokertopicmetrics_bytesin_total", topic="orders")
    assert bytes_in == log_bytes
    ends = {
        labels["partition"]: value
        for labels, value in before.series("kafka_log_log_logendoffset")
        if labels["topic"] == "orders"
    }
    assert set(ends) == {"0", "1"} and sum(ends.values()) == 700
    assert before.value("kafka_server_brokertopicmetrics_bytesout_total", 0, topic="orders") == 0

    assert consume_in_group(proc.bootstrap, "orders", "readers", 700, commit=False) == 700
    after = scrape(metrics_port)
    # Every batch was sent to the consumer at least once (possibly again after a rebalance).
    bytes_out = after.value("kafka_server_brokertopicmetrics_bytesout_total", topic="orders")
    assert bytes_out >= log_bytes
    assert after.value("kafka_server_brokertopicmetrics_bytesout_total", 0, topic="other") == 0
    # flush.messages=1: the flush job (once a second) fsyncs each partition that took
    # appends, and times each flush.
    wait_for(
        lambda: scrape(metrics_port).value("kafka_log_logflushstats_logflushrateandtimems_count")
        >= 3,
        15,
        "a timed flush of each partition written",
    )

    # A deleted topic's series go; the all-topics totals keep what it counted.
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.delete_topics(["other"])["other"].result(30)

    def other_gone() -> bool:
        now = scrape(metrics_port)
        return all(
            labels.get("topic") != "other"
            for name in ("kafka_server_brokertopicmetrics_messagesin_total", "kafka_log_log_size")
            for labels, _value in now.series(name)
        )

    wait_for(other_gone, 30, "the deleted topic's series to go")
    assert scrape(metrics_port).value("kafka_server_brokertopicmetrics_messagesin_total") == 730


def test_request_counts_and_times_per_api(broker) -> None:
    proc, metrics_port, _ = broker
    before = scrape(metrics_port)
    key = {"request": "ApiVersions", "version": "0"}
    start = before.value("kafka_network_requestmetrics_requests_total", 0, **key)
    client = RawClient(proc.port)
    for _ in range(7):
        client.call(API_VERSIONS, 0, {})
    client.sock.close()
    after = scrape(metrics_port)
    assert after.value("kafka_network_requestmetrics_requests_total", **key) == start + 7
    # The histograms count the same requests (every version of the API together).
    for histogram in ("requestqueuetimems", "totaltimems"):
        name = f"kafka_network_requestmetrics_{histogram}"
        versions = after.total("kafka_network_requestmetrics_requests_total", request="ApiVersions")
        assert after.value(f"{name}_count", request="ApiVersions") == versions
        assert after.value(f"{name}_bucket", request="ApiVersions", le="+Inf") == versions
        assert after.value(f"{name}_sum", request="ApiVersions") > 0
    # Queue time is part of total time.
    assert after.value(
        "kafka_network_requestmetrics_requestqueuetimems_sum", request="ApiVersions"
    ) <= after.value("kafka_network_requestmetrics_totaltimems_sum", request="ApiVersions")

    _produce(proc.bootstrap, "timed", 10, 10)
    produced = scrape(metrics_port)
    produces = produced.total("kafka_network_requestmetrics_requests_total", request="Produce")
    assert produces >= 1
    assert produced.value("kafka_network_requestmetrics_totaltimems_count", request="Produce") == (
        produces
    )
    idle = produced.value("kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent")
    assert 0 <= idle <= 1
    assert produced.value("odradek_event_loop_busy_seconds_total") > 0


def test_consumer_lag_matches_groups_describe(broker) -> None:
    proc, metrics_port, _ = broker
    _create(proc.bootstrap, "lagging", 2)
    _produce(proc.bootstrap, "lagging", 400, 20)
    seen = consume_in_group(proc.bootstrap, "lagging", "slowpokes", 150, commit=True)
    described = subprocess.run(
        [sys.executable, "-m", "odradek", "groups", "describe", "--group", "slowpokes",
         "--bootstrap-server", proc.bootstrap],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lags = {}
    for line in described.stdout.splitlines()[1:]:
        columns = line.split()
        if len(columns) >= 6 and columns[1] == "lagging" and columns[5] != "-":
            lags[columns[2]] = float(columns[5])
    assert lags and sum(lags.values()) > 0, described.stdout
    metrics = scrape(metrics_port)
    committed = metrics.total("kafka_consumergroup_current_offset", consumergroup="slowpokes")
    assert committed == seen
    exported = {
        labels["partition"]: value
        for labels, value in metrics.series("kafka_consumergroup_lag")
        if labels["consumergroup"] == "slowpokes" and labels["topic"] == "lagging"
    }
    assert exported == lags
    assert metrics.value("kafka_coordinator_group_groupmetadatamanager_numgroupsempty") >= 1
    assert metrics.value("kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1


def test_partition_and_leader_counts(broker) -> None:
    proc, metrics_port, _ = broker
    before = scrape(metrics_port).value("kafka_server_replicamanager_partitioncount")
    _create(proc.bootstrap, "counted", 5)
    after = scrape(metrics_port)
    assert after.value("kafka_server_replicamanager_partitioncount") == before + 5
    assert after.value("kafka_server_replicamanager_leadercount") == before + 5
    topics = AdminClient({"bootstrap.servers": proc.bootstrap}).list_topics(timeout=10).topics
    assert after.value("kafka_server_replicamanager_partitioncount") == sum(
        len(t.partitions) for t in topics.values()
    )
    assert after.value("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert after.value("kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert after.value("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert after.value("kafka_controller_kafkacontroller_offlinepartitionscount") == 0


def test_connections_per_listener(broker) -> None:
    _proc, metrics_port, internal_port = broker

    def count(listener: str) -> float:
        return scrape(metrics_port).value(
            "kafka_server_socket_server_metrics_connection_count",
            listener=listener,
            networkprocessor="0",
        )

    wait_for(lambda: count("INTERNAL") == 0, 20, "no INTERNAL connections")
    sockets = [socket.create_connection(("127.0.0.1", internal_port)) for _ in range(3)]
    try:
        wait_for(lambda: count("INTERNAL") == 3, 20, "3 INTERNAL connections")
        assert count("PLAINTEXT") == 0
    finally:
        for sock in sockets:
            sock.close()
    wait_for(lambda: count("INTERNAL") == 0, 20, "INTERNAL connections closed")


def test_fetch_and_produce_purgatory_sizes(broker) -> None:
    proc, metrics_port, _ = broker
    _create(proc.bootstrap, "idle", 1)
    # A consumer with nothing to read long-polls: its fetch waits in the purgatory.
    consumer = Consumer(
        {
            "bootstrap.servers": proc.bootstrap,
            "group.id": "waiters",
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 5000,
        }
    )
    consumer.subscribe(["idle"])
    try:

        def fetch_waiting() -> bool:
            consumer.poll(0.2)
            size = scrape(metrics_port).value(
                "kafka_server_delayedoperationpurgatory_purgatorysize", delayedoperation="Fetch"
            )
            return size >= 1

        wait_for(fetch_waiting, 60, "a fetch in the purgatory")
    finally:
        consumer.close()
    assert (
        scrape(metrics_port).value(
            "kafka_server_delayedoperationpurgatory_purgatorysize", delayedoperation="Produce"
        )
        == 0
    )


def test_endpoint_answers_only_metrics(broker) -> None:
    _proc, metrics_port, _ = broker
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/nothing", timeout=10)
    assert missing.value.code == 404
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as ok:
        assert ok.headers["Content-Type"].startswith("text/plain")
        assert isinstance(Scrape(ok.read().decode()), Scrape)


def test_endpoint_only_when_configured(tmp_path: Path) -> None:
    plain = BrokerProcess(tmp_path / "plain").start()
    try:
        assert "Prometheus metrics on" not in plain.log_text()
    finally:
        plain.stop()
    # metrics.port=0 picks a free port and names it in the log.
    chosen = BrokerProcess(tmp_path / "chosen", overrides={"metrics.port": "0"}).start()
    try:
        line = wait_for(
            lambda: next(
                (x for x in chosen.log_text().splitlines() if "Prometheus metrics on" in x), None
            ),
            20,
            "the metrics endpoint's log line",
        )
        port = int(line.rsplit(":", 1)[1].split("/", 1)[0])
        assert scrape(port).value("kafka_controller_kafkacontroller_activecontrollercount") == 1
    finally:
        chosen.stop()


def test_a_metrics_port_in_use_is_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = BrokerProcess(tmp_path / "data", overrides={"metrics.port": str(port)})
        done = subprocess.run(proc.command(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: [Errno 98] metrics.port: cannot listen on 127.0.0.1:{port}: "
        "Address already in use"
    ], done.stderr
    assert "Traceback" not in done.stderr
