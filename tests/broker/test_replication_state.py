"""The leader's replication bookkeeping with an injected clock: follower LEOs, the high
watermark (smallest LEO in the ISR, never backwards), ISR shrink after
replica.lag.time.max.ms and expansion once caught up, acks=all completion, a follower's
HW from the leader and fenced replica fetches. No network: the replica manager is
called as the Fetch and Produce handlers call it."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.partition import FollowerTracker
from odradek.broker.replica_manager import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_LEADER_EPOCH,
    Partition,
    ReplicaManager,
)
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.storage.conftest import make_batch

LAG_MS = 30000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0  # seconds

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1000


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rm(tmp_path: Path, clock: Clock) -> ReplicaManager:
    manager = LogManager(tmp_path, LogConfig(), clock=clock)
    manager.startup()
    replicas = ReplicaManager(1, manager, clock=clock)
    changes: list[tuple[set[int], str]] = []

    def writer(partition: Partition, isr: set[int], reason: str) -> None:
        # As the ZooKeeper write does once it succeeded.
        changes.append((set(isr), reason))
        replicas.apply_isr_change(partition, isr)

    replicas.isr_writer = writer
    replicas.isr_changes = changes  # type: ignore[attr-defined]
    config = LogConfig.from_properties({"min.insync.replicas": "2"}, base=LogConfig())
    replicas.become_leader("t", 0, config, leader_epoch=3, isr=[1, 2, 3], replicas=[1, 2, 3])
    return replicas


def produce(rm: ReplicaManager, n: int = 1, acks: int = -1) -> tuple[int, int]:
    result = rm.append("t", 0, make_batch([b"x"] * n), required_acks=acks)
    return result.error_code, result.last_offset + 1


def hw(rm: ReplicaManager) -> int:
    partition = rm.partition("t", 0)
    assert partition is not None
    return partition.high_watermark


def test_high_watermark_is_the_smallest_leo_in_the_isr(rm: ReplicaManager) -> None:
    assert produce(rm, 3) == (NONE, 3)
    assert hw(rm) == 0  # followers not heard from yet hold it
    assert rm.record_follower_fetch("t", 0, 2, 3, 3) == NONE
    assert hw(rm) == 0
    assert rm.record_follower_fetch("t", 0, 3, 2, 3) == NONE
    assert hw(rm) == 2
    assert rm.produce_status("t", 0, 3) is None  # acks=all still waits
    assert rm.record_follower_fetch("t", 0, 3, 3, 3) == NONE
    assert hw(rm) == 3
    assert rm.produce_status("t", 0, 3) == NONE


def test_high_watermark_never_moves_back(rm: ReplicaManager) -> None:
    produce(rm, 2)
    rm.record_follower_fetch("t", 0, 2, 2, 3)
    rm.record_follower_fetch("t", 0, 3, 2, 3)
    assert hw(rm) == 2
    rm.record_follower_fetch("t", 0, 3, 1, 3)  # a late, older fetch
    assert hw(rm) == 2


def test_consumers_read_up_to_the_hw_and_followers_to_the_log_end(rm: ReplicaManager) -> None:
    produce(rm, 2)
    consumer = rm.read("t", 0, 0, 1 << 20)
    assert consumer.error_code == NONE and consumer.size == 0 and consumer.high_watermark == 0
    follower = rm.read("t", 0, 0, 1 << 20, replica_id=2)
    assert follower.error_code == NONE and follower.size > 0


def test_lagging_follower_leaves_the_isr_then_rejoins(rm: ReplicaManager, clock: Clock) -> None:
    produce(rm, 1)
    rm.record_follower_fetch("t", 0, 2, 1, 3)
    rm.record_follower_fetch("t", 0, 3, 0, 3)  # 3 is behind
    clock.advance_ms(LAG_MS - 1)
    rm.record_follower_fetch("t", 0, 2, 1, 3)
    rm.shrink_isrs(LAG_MS)
    assert rm.isr_changes == []  # type: ignore[attr-defined]
    clock.advance_ms(2)
    rm.shrink_isrs(LAG_MS)
    partition = rm.partition("t", 0)
    assert partition is not None
    assert partition.isr == {1, 2}
    isr, reason = rm.isr_changes[-1]  # type: ignore[attr-defined]
    assert isr == {1, 2} and "[3]" in reason
    assert hw(rm) == 1  # 3 no longer holds it back
    # Caught up to the HW: back in the ISR.
    rm.record_follower_fetch("t", 0, 3, 1, 3)
    assert partition.isr == {1, 2, 3}
    assert "replica 3 caught up" in rm.isr_changes[-1][1]  # type: ignore[attr-defined]


def test_a_follower_that_keeps_fetching_but_never_catches_up_is_dropped(
    rm: ReplicaManager, clock: Clock
) -> None:
    rm.record_follower_fetch("t", 0, 2, 0, 3)
    rm.record_follower_fetch("t", 0, 3, 0, 3)
    for _ in range(40):
        produce(rm, 1)
        clock.advance_ms(1000)
        partition = rm.partition("t", 0)
        assert partition is not None
        rm.record_follower_fetch("t", 0, 2, partition.log.log_end_offset, 3)
        # Stuck: never reaches what the leader had at its previous fetch.
        rm.record_follower_fetch("t", 0, 3, 1, 3)
        rm.shrink_isrs(LAG_MS)
    partition = rm.partition("t", 0)
    assert partition is not None
    assert partition.isr == {1, 2}


def test_min_insync_replicas(rm: ReplicaManager, clock: Clock) -> None:
    partition = rm.partition("t", 0)
    assert partition is not None
    error, end = produce(rm, 1)
    assert error == NONE
    rm.record_follower_fetch("t", 0, 2, 0, 3)
    # The ISR shrinks below min.insync.replicas=2 while the produce waits.
    clock.advance_ms(LAG_MS + 1)
    rm.shrink_isrs(LAG_MS)
    assert partition.isr == {1}
    assert rm.produce_status("t", 0, end) == NOT_ENOUGH_REPLICAS_AFTER_APPEND
    # A new acks=all produce is refused before the append; acks=1 is not.
    assert produce(rm, 1, acks=-1)[0] == NOT_ENOUGH_REPLICAS
    assert produce(rm, 1, acks=1)[0] == NONE


def test_replica_fetches_are_fenced_by_leader_epoch(rm: ReplicaManager) -> None:
    assert rm.record_follower_fetch("t", 0, 2, 0, 2) == FENCED_LEADER_EPOCH
    assert rm.record_follower_fetch("t", 0, 2, 0, 4) == UNKNOWN_LEADER_EPOCH
    assert rm.record_follower_fetch("t", 0, 9, 0, 3) == NOT_LEADER_OR_FOLLOWER


def test_a_follower_takes_the_leaders_hw_capped_at_its_log_end(
    tmp_path: Path, clock: Clock
) -> None:
    manager = LogManager(tmp_path / "f", LogConfig(), clock=clock)
    manager.startup()
    follower = ReplicaManager(2, manager, clock=clock)
    partition = follower.become_follower("t", 0, LogConfig(), leader=1, leader_epoch=3)
    assert follower.append("t", 0, make_batch([b"x"]), required_acks=1).error_code == (
        NOT_LEADER_OR_FOLLOWER
    )
    partition.set_follower_high_watermark(10)
    assert partition.high_watermark == 0  # nothing replicated yet


def test_tracker_counts_a_fetch_reaching_the_previous_leo_as_caught_up() -> None:
    now = [0.0]
    tracker = FollowerTracker(1, lambda: now[0])
    tracker.reset([1, 2], leader_leo=0)
    now[0] = 1000
    tracker.record_fetch(2, 0, leader_leo=5)  # caught up at t=1000 (LEO was 0 then... 5 now)
    now[0] = 2000
    tracker.record_fetch(2, 5, leader_leo=8)  # reached the LEO of its previous fetch
    assert tracker.followers[2].last_caught_up_ms == 1000
    assert tracker.out_of_sync([1, 2], 1500) == set()
    assert tracker.out_of_sync([1, 2], 500) == {2}


def test_leader_throttles_only_out_of_sync_listed_followers_over_the_quota(
    rm: ReplicaManager, clock: Clock
) -> None:
    from odradek.broker.replication_quota import ReplicationQuota

    quota = ReplicationQuota(1, "leader.replication.throttled.replicas", samples=2, clock=clock)
    quota.set_rate(100)  # bytes/s: one read exceeds it
    rm.leader_quota = quota
    partition = rm.partition("t", 0)
    assert partition is not None
    config = LogConfig.from_properties({"leader.replication.throttled.replicas": "0:1"})
    rm.update_config("t", config)
    rm.apply_isr_change(partition, {1, 2})  # 3 is out of sync
    produce(rm, 5, acks=1)
    first = rm.read("t", 0, 0, 1 << 20, replica_id=3)
    assert first.size > 0  # under the quota: served, and recorded
    assert quota.is_quota_exceeded()
    assert rm.read("t", 0, 0, 1 << 20, replica_id=3).size == 0  # over it: left out
    assert rm.bytes_available("t", 0, 0, 0, limit=1, replica_id=3) == 0
    assert rm.read("t", 0, 0, 1 << 20, replica_id=2).size > 0  # in sync: never throttled
    assert rm.read("t", 0, 0, 1 << 20).error_code == NONE  # consumers are not throttled
    clock.advance_ms(5000)  # the samples expire: served again
    assert rm.read("t", 0, 0, 1 << 20, replica_id=3).size > 0
    # A partition not listed for this broker is never throttled.
    other = LogConfig.from_properties({"leader.replication.throttled.replicas": "0:2"})
    rm.update_config("t", other)
    quota.record(10_000)
    assert rm.read("t", 0, 0, 1 << 20, replica_id=3).size > 0


def test_low_watermark_is_the_smallest_log_start_among_live_replicas(rm: ReplicaManager) -> None:
    """DeleteRecords' completion rule (Kafka's lowWatermarkIfLeader): the leader's log
    start and each live follower's as its fetches state it; one not heard from holds it
    at -1, one on a dead broker does not count, and a move wakes the partition's waiters."""
    woken: list[tuple[str, int]] = []
    rm._on_data_appended = lambda topic, index: woken.append((topic, index))
    produce(rm, 5)
    for follower in (2, 3):
        rm.record_follower_fetch("t", 0, follower, 5, 3, log_start_offset=0)
    partition = rm.partition("t", 0)
    assert partition is not None and hw(rm) == 5
    partition.log.maybe_increment_log_start_offset(3)
    assert rm.low_watermark(partition) == 0
    woken.clear()
    rm.record_follower_fetch("t", 0, 2, 5, 3, log_start_offset=3)
    assert woken == [("t", 0)] and rm.low_watermark(partition) == 0
    rm.record_follower_fetch("t", 0, 3, 5, 3, log_start_offset=3)
    assert rm.low_watermark(partition) == 3
    woken.clear()
    rm.record_follower_fetch("t", 0, 3, 5, 3, log_start_offset=3)  # unchanged: no wake-up
    rm.record_follower_fetch("t", 0, 3, 5, 3)  # a fetch that states none (Fetch < v5)
    assert woken == [] and rm.low_watermark(partition) == 3

    tracker = FollowerTracker(1, lambda: 0.0)
    tracker.reset([1, 2, 3], 10)
    tracker.record_fetch(2, 10, 10, log_start_offset=4)
    assert tracker.low_watermark(6, [1, 2, 3], lambda _b: True) == -1  # 3 not heard from
    assert tracker.low_watermark(6, [1, 2, 3], lambda b: b != 3) == 4  # 3's broker is dead
