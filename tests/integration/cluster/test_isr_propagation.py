"""A leader's ISR change reaches every broker's Metadata (Kafka's IsrChangeNotificationHandler).

The leader writes the new ISR to the partition-state znode and an
``/isr_change_notification`` child; only the controller tells the other brokers, with
UpdateMetadata. So a broker that neither leads the partition nor is the controller shows
the new ISR only if that path works. The ZooKeeper session outlives the pause here, so the
controller never sees the follower die: the shrink is the leader's own.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest

from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]

# The follower is paused for much less than its ZooKeeper session lasts.
SETTINGS = {
    "replica.lag.time.max.ms": "3000",
    "zookeeper.session.timeout.ms": "40000",
}


def _isr(cluster: BrokerCluster, broker_id: int, topic: str) -> tuple[int, ...]:
    partition = cluster.metadata(broker_id, topic).topics[topic].partitions[0]
    return tuple(sorted(partition.isrs))


def test_isr_shrink_and_expand_reach_every_brokers_metadata(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(3, **SETTINGS)
    cluster.create_topic("isr", 1)
    wait_for(lambda: _isr(cluster, 1, "isr") == (1, 2, 3), 30, "an ISR of three")
    leader = cluster.leaders("isr", via=1)[0]
    controller = cluster.controller_id()
    # Pause a follower that is not the controller (the controller must keep working).
    paused = next(b for b in (1, 2, 3) if b not in (leader, controller))
    process = cluster.brokers[paused].proc
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)
    try:
        expected = tuple(sorted({1, 2, 3} - {paused}))
        for broker_id in (1, 2, 3):
            if broker_id == paused:
                continue
            wait_for(
                lambda b=broker_id: _isr(cluster, b, "isr") == expected,
                30,
                f"broker {broker_id}'s Metadata to show the ISR {expected}",
            )
        # Still registered: the controller did not act on a broker failure.
        assert paused in cluster.zk.get_broker_ids()
    finally:
        os.kill(process.pid, signal.SIGCONT)
    # It catches up, the leader adds it back, and every broker (itself too) says so.
    for broker_id in (1, 2, 3):
        wait_for(
            lambda b=broker_id: _isr(cluster, b, "isr") == (1, 2, 3),
            30,
            f"broker {broker_id}'s Metadata to show the ISR expanded again",
        )
    # The controller consumed the leader's notifications.
    wait_for(
        lambda: cluster.zk.get_isr_change_notifications() == [],
        10,
        "the ISR change notifications deleted",
    )
    leader_log = cluster.brokers[leader].log_text()
    assert "ISR shrink" in leader_log and "ISR expand" in leader_log
