"""The campaign's disk-full fault: each broker's data directory on a tmpfs of its own,
filled under the usual workload (tests/helpers/faults.py, ``FaultyCluster(disk_size=)``).

The filled broker's next append, as leader or as follower, fails with ENOSPC and the
broker halts as Kafka's does (exit status 1, "Shutdown broker because all log dirs in
... have failed"); its session expires and its partitions fail over. The heal removes the
filler and restarts it, so it recovers a log whose last write may have failed part way.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.faults import (
    CAMPAIGN_BROKER_SETTINGS,
    DISK_SIZE,
    FaultyCluster,
    Firewall,
    jepsen_cluster,
    run_campaign,
)

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.jepsen]

FAULTS = 3
HALT_LINE = "Shutdown broker because all log dirs in"


@pytest.fixture
def disk_cluster(tmp_path: Path, zk_connect: str) -> Iterator[tuple[FaultyCluster, Firewall]]:
    with jepsen_cluster(
        tmp_path, zk_connect, "disk_full", CAMPAIGN_BROKER_SETTINGS, disk_size=DISK_SIZE
    ) as started:
        yield started


@pytest.mark.timeout(300)
def test_disk_full_faults_halt_the_broker_and_lose_no_acknowledged_record(
    disk_cluster: tuple[FaultyCluster, Firewall],
) -> None:
    """A few disk-full faults (seeded; rerun with JEPSEN_SEED=<seed>): the checker's usual
    verdict, and the fault really bit: some filled broker exited with status 1 and logged
    Kafka's halt line."""
    cluster, firewall = disk_cluster
    seed = int(os.environ.get("JEPSEN_SEED") or random.randrange(1 << 30))
    result = run_campaign(cluster, firewall, seed, faults=FAULTS, kinds=("disk-full",))
    summary = result.summary()
    print(summary)
    assert result.counts == {"disk-full": FAULTS}, summary
    report = result.report
    assert report.acked > 300, summary
    assert not report.lost, summary
    assert not report.duplicates, summary
    assert not (report.moved or report.phantoms or report.reordered), summary
    assert not report.dirty_reads, summary
    assert not result.fatal, summary
    assert result.nemesis_error is None, summary
    assert result.settled, summary
    # The fault bit: a filled broker halted with Kafka's status and line (each fault is
    # on for 2 s or more while the broker follows every partition, so nearly always it
    # writes in time; one whose disk was freed first counts as still running).
    statuses = [f.exit_status for f in result.faults]
    assert 1 in statuses and set(statuses) <= {1, None}, summary
    for fault in result.faults:
        if fault.exit_status == 1:
            log = cluster.brokers[fault.targets[0]].log_text()
            assert HALT_LINE in log, log[-3000:]
            assert "No space left on device" in log, log[-3000:]
    halts = sum(b.log_text().count(HALT_LINE) for b in cluster.brokers.values())
    assert halts == statuses.count(1), summary
