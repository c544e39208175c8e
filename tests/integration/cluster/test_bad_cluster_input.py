"""Bad input to a cluster (issue #10, item 9): each is one clear error and leaves nothing
half-created. A duplicate broker.id and an unreachable ZooKeeper at start-up (the error
lines themselves are in test_join.py; here, what they leave behind), and manual replica
assignments through ``odradek topics create --replica-assignment`` (kafka-topics' flag)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]


def _run_refused(broker: BrokerProcess) -> subprocess.CompletedProcess[str]:
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        broker.command(), capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL
    )


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def _partition_dirs(cluster: BrokerCluster, topic: str) -> list[str]:
    return [
        p.name
        for broker in cluster.brokers.values()
        if broker.data_dir.exists()
        for p in broker.data_dir.iterdir()
        if p.name.startswith(f"{topic}-")
    ]


def test_manual_assignments_are_checked_before_anything_is_written(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(2)
    boot = cluster.bootstrap()

    def create(*args: str) -> object:
        return odradek("topics", "create", "manual", *args, "-b", boot)

    create("--replica-assignment", "1:9").check_error(  # type: ignore[attr-defined]
        "INVALID_REPLICA_ASSIGNMENT", "broker 9", "no such broker is registered"
    )
    create("--replica-assignment", "1:2,1").check_error(  # type: ignore[attr-defined]
        "INVALID_REPLICA_ASSIGNMENT", "same number of replicas"
    )
    # Caught by the command before any request, as kafka-topics does.
    create("--replica-assignment", "1:1").check_error(  # type: ignore[attr-defined]
        "Partition replica lists may not contain duplicate entries: 1, 1"
    )
    create("--replica-assignment", "1:x").check_error(  # type: ignore[attr-defined]
        "--replica-assignment", "'1:x'"
    )
    create("--replica-assignment", "1:2", "-p", "1").check_error(  # type: ignore[attr-defined]
        'Option "[replica-assignment]" can\'t be used with option "[partitions]"'
    )
    assert cluster.zk.get_topic_assignment("manual") is None
    assert "manual" not in odradek("topics", "list", "-b", boot).check().lines
    assert _partition_dirs(cluster, "manual") == []

    # A good one is placed exactly so: the first replica leads.
    assert create("--replica-assignment", "2:1,1:2").check().lines == [  # type: ignore[attr-defined]
        "Created topic manual."
    ]
    found = cluster.zk.get_topic_assignment("manual")
    assert found is not None
    assert {p: tuple(r) for p, r in found[0].partitions.items()} == {0: (2, 1), 1: (1, 2)}
    wait_for(lambda: cluster.leaders("manual", via=1) == {0: 2, 1: 1}, 30, "preferred leaders")


def test_a_duplicate_broker_id_joins_nothing(
    tmp_path: Path, cluster_factory: Callable[..., BrokerCluster]
) -> None:
    cluster = cluster_factory(2)
    controller = cluster.controller_id()
    twin = BrokerProcess(
        tmp_path / "twin",
        overrides={**cluster.brokers[1].overrides},
        log_path=tmp_path / "twin.log",
    )
    done = _run_refused(twin)
    assert done.returncode == 1
    assert "broker.id 1 already registered" in _one_error_line(done.stderr)
    # The running broker 1 keeps its registration and the cluster its controller; the
    # twin hosts nothing and left no listener behind.
    assert cluster.zk.get_broker_ids() == [1, 2]
    assert cluster.controller_id() == controller
    assert sorted(cluster.metadata(1).brokers) == [1, 2]
    assert [p.name for p in twin.data_dir.iterdir() if p.is_dir()] == []
    with pytest.raises(OSError):
        __import__("socket").create_connection(("127.0.0.1", twin.port), timeout=1).close()


def test_an_unreachable_zookeeper_leaves_the_log_dir_untouched(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "lonely",
        overrides={
            "zookeeper.connect": f"127.0.0.1:{free_port()}/odradek",
            "zookeeper.connection.timeout.ms": "1500",
            "broker.id": "1",
        },
    )
    done = _run_refused(broker)
    assert done.returncode == 1
    assert "cannot reach ZooKeeper at 127.0.0.1:" in _one_error_line(done.stderr)
    # No meta.properties (no cluster id was learnt), no logs, no checkpoints: only the
    # directory lock file, which Kafka too leaves in a log dir.
    assert sorted(p.name for p in broker.data_dir.iterdir()) in ([], [".lock"])
