"""The Jepsen-style fault campaign: three brokers on their own loopback aliases, random
faults (SIGKILL, SIGSTOP past the session timeout, network partitions between brokers and
to ZooKeeper, via nftables), idempotent acks=all producers, then heal and check that no
acknowledged record is lost (tests/helpers/faults.py, tests/helpers/checker.py)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.faults import FaultyCluster, Firewall, nft_unusable_reason, run_campaign

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.jepsen]


@pytest.fixture
def firewall(request: pytest.FixtureRequest) -> Iterator[Firewall]:
    reason = nft_unusable_reason()
    if reason is not None:
        pytest.skip(reason)
    with Firewall(f"{os.getpid()}_{request.node.name[:30]}") as fw:
        yield fw


@pytest.fixture
def faulty_cluster(tmp_path: Path, zk_connect: str, firewall: Firewall) -> Iterator[
    tuple[FaultyCluster, Firewall]
]:
    cluster = FaultyCluster(
        tmp_path,
        zk_connect,
        3,
        # ISR shrinks within the faults' durations, so they are exercised too.
        {"replica.lag.time.max.ms": "5000", "replica.socket.timeout.ms": "5000"},
    )
    try:
        cluster.start()
        yield cluster, firewall
    finally:
        firewall.heal()  # a cut broker cannot stop cleanly
        cluster.close()


@pytest.mark.timeout(600)
def test_jepsen_campaign_sample_loses_no_acknowledged_record(
    faulty_cluster: tuple[FaultyCluster, Firewall],
) -> None:
    """CI sample of the campaign: 20 random faults of every kind, seeded; the seed and the
    schedule are printed on failure (rerun with JEPSEN_SEED=<seed>)."""
    cluster, firewall = faulty_cluster
    seed = int(os.environ.get("JEPSEN_SEED") or random.randrange(1 << 30))
    result = run_campaign(cluster, firewall, seed, faults=20)
    summary = result.summary()
    print(summary)
    assert set(result.counts) == {"kill", "pause", "partition", "isolate", "zk-isolate"} or (
        sum(result.counts.values()) == 20
    ), summary
    assert result.report.acked > 500, summary
    assert result.report.valid, summary
    assert not result.fatal, summary
    assert result.settled, summary
