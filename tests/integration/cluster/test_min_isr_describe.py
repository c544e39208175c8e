"""``topics describe --under-min-isr-partitions`` / ``--at-min-isr-partitions`` on a real
cluster, as kafka-topics: a partition is under min ISR when its ISR is smaller than the
topic's ``min.insync.replicas`` (or it has no leader), at min ISR when the two are equal."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cli.helpers import odradek
from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]


def _rows(cluster: BrokerCluster, *flags: str) -> list[tuple[str, str, int]]:
    """(topic, partition, ISR size) of each partition line the filter lists."""
    boot = cluster.bootstrap(*cluster.live())
    lines = odradek("topics", "describe", *flags, "-b", boot).check().lines
    rows = []
    for line in lines:
        fields = dict(item.split(": ", 1) for item in line.strip("\t").split("\t"))
        assert "Partition" in fields, line  # the filters print no topic header lines
        rows.append((fields["Topic"], fields["Partition"], len(fields["Isr"].split(","))))
    return sorted(rows)


def test_min_isr_filters_follow_a_stopped_broker(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(3, **{"auto.leader.rebalance.enable": "false"})
    boot = cluster.bootstrap()
    for topic, min_isr in (("two", "2"), ("three", "3"), ("one", "1")):
        odradek(
            "topics", "create", topic, "-p", "2", "-r", "3",
            "-c", f"min.insync.replicas={min_isr}", "-b", boot,
        ).check()  # fmt: skip
    for topic in ("two", "three", "one"):
        wait_for(
            lambda t=topic: all(
                len(p.isrs) == 3 for p in cluster.metadata(1, t).topics[t].partitions.values()
            ),
            30,
            f"{topic}'s full ISR",
        )

    # All in sync: only min.insync.replicas=3 is "at" its minimum.
    assert _rows(cluster, "--under-min-isr-partitions") == []
    assert _rows(cluster, "--at-min-isr-partitions") == [("three", "0", 3), ("three", "1", 3)]

    # A broker (not the controller) stops: every ISR loses it.
    stopped = next(b for b in (3, 2, 1) if b != cluster.controller_id())
    cluster.brokers[stopped].stop()
    wait_for(
        lambda: len(_rows(cluster, "--under-replicated-partitions")) == 6,
        30,
        "six under-replicated partitions",
    )
    assert _rows(cluster, "--under-min-isr-partitions") == [("three", "0", 2), ("three", "1", 2)]
    assert _rows(cluster, "--at-min-isr-partitions") == [("two", "0", 2), ("two", "1", 2)]
    assert _rows(cluster, "--unavailable-partitions") == []
