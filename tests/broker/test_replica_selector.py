"""KIP-392 on one replica manager: Kafka's RackAwareReplicaSelector, which replicas a
leader may point a consumer at, and what a follower serves a consumer."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.replica_manager import NONE, NOT_LEADER_OR_FOLLOWER, ReplicaManager
from odradek.broker.replica_selector import (
    RACK_AWARE_REPLICA_SELECTOR,
    RackAwareReplicaSelector,
    ReplicaView,
    make_selector,
)
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.storage.conftest import make_batch

RACKS = {1: "a", 2: "b", 3: "b"}


def view(broker: int, leo: int = 10, since_ms: float = 0.0) -> ReplicaView:
    return ReplicaView(broker, RACKS.get(broker), leo, since_ms)


def test_rack_aware_selector_rules() -> None:
    selector = RackAwareReplicaSelector()
    leader = view(1)
    everyone = [leader, view(2, 10), view(3, 12)]
    assert selector.select("", leader, everyone) is leader  # no rack: the leader
    assert selector.select("z", leader, everyone) is leader  # no replica in that rack
    assert selector.select("a", leader, everyone) is leader  # the leader is in the rack
    # Several in the rack: the most caught up (log end, then most recently caught up).
    assert selector.select("b", leader, everyone).broker_id == 3
    tied = [leader, view(2, 12, since_ms=5), view(3, 12, since_ms=900)]
    assert selector.select("b", leader, tied).broker_id == 2


def test_selector_class_config() -> None:
    assert make_selector("") is None
    assert isinstance(make_selector(RACK_AWARE_REPLICA_SELECTOR), RackAwareReplicaSelector)
    config = BrokerConfig({"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR})
    assert config.get("replica.selector.class") == RACK_AWARE_REPLICA_SELECTOR
    assert BrokerConfig({}).get("replica.selector.class") == ""
    with pytest.raises(ConfigError, match=r"replica\.selector\.class"):
        BrokerConfig({"replica.selector.class": "com.example.MySelector"})


def replicas_on(tmp_path: Path, broker_id: int) -> ReplicaManager:
    logs = LogManager(tmp_path / str(broker_id), LogConfig())
    logs.startup()
    manager = ReplicaManager(broker_id, logs)
    manager.broker_rack = RACKS.get
    return manager


def test_leader_points_a_consumer_at_an_in_sync_replica_of_its_rack(tmp_path: Path) -> None:
    rm = replicas_on(tmp_path, 1)
    rm.become_leader("t", 0, LogConfig(), leader_epoch=0, isr=[1, 2, 3], replicas=[1, 2, 3])
    assert rm.append("t", 0, make_batch([b"x"] * 4), required_acks=1).error_code == NONE
    assert rm.record_follower_fetch("t", 0, 2, 4, 0) == NONE
    assert rm.record_follower_fetch("t", 0, 3, 2, 0) == NONE

    # No selector configured: served by the leader.
    assert rm.read("t", 0, 0, 1000, client_rack="b").preferred_read_replica == -1
    rm.replica_selector = RackAwareReplicaSelector()
    redirected = rm.read("t", 0, 0, 1000, client_rack="b")
    assert redirected.preferred_read_replica == 2  # the most caught up of rack b
    assert redirected.size == 0 and redirected.high_watermark == 2
    # From offset 3 only broker 2's log holds it; rack a is the leader's own.
    assert rm.preferred_read_replica("t", 0, 3, "b") == 2
    assert rm.read("t", 0, 0, 1000, client_rack="a").preferred_read_replica == -1
    assert rm.read("t", 0, 0, 1000, client_rack="").preferred_read_replica == -1
    # Pre-v11 consumers (no rack field) and followers are never redirected.
    assert rm.read("t", 0, 0, 1000).preferred_read_replica == -1
    assert rm.read("t", 0, 0, 1000, replica_id=2).preferred_read_replica == -1
    # Out of the ISR: no longer a candidate.
    rm.apply_isr_change(rm.partition("t", 0), {1, 3})  # type: ignore[arg-type]
    assert rm.preferred_read_replica("t", 0, 0, "b") == 3
    assert rm.preferred_read_replica("t", 0, 3, "b") is None


def test_a_follower_serves_kip392_consumers_up_to_its_high_watermark(tmp_path: Path) -> None:
    leader = replicas_on(tmp_path, 1)
    leader.become_leader("t", 0, LogConfig(), leader_epoch=0, isr=[1, 2], replicas=[1, 2])
    leader.append("t", 0, make_batch([b"x"] * 3), required_acks=1)
    leader.append("t", 0, make_batch([b"y"] * 2), required_acks=1)
    follower = replicas_on(tmp_path, 2)
    part = follower.become_follower("t", 0, LogConfig(), leader=1, leader_epoch=0, replicas=[1, 2])
    source = leader.partition("t", 0)
    assert source is not None
    for region in source.log.read(0, 1 << 20).regions:
        part.log.append_as_follower(region.read())
    part.set_follower_high_watermark(3)

    assert follower.read("t", 0, 0, 1 << 20).error_code == NOT_LEADER_OR_FOLLOWER
    served = follower.read("t", 0, 0, 1 << 20, client_rack="b")
    assert served.error_code == NONE and served.high_watermark == 3
    committed = source.log.read(0, 1 << 20, max_offset=3)  # the first batch only
    assert b"".join(r.read() for r in served.regions) == b"".join(
        r.read() for r in committed.regions
    )
    assert served.size < source.log.read(0, 1 << 20).size  # not the batch above its HW
    assert follower.read("t", 0, 3, 1 << 20, client_rack="b").size == 0  # above its HW
    assert follower.follower_reads[("t", 0)] == 2
    # A follower does not redirect anyone (it is not the leader).
    follower.replica_selector = RackAwareReplicaSelector()
    assert follower.read("t", 0, 0, 1 << 20, client_rack="a").preferred_read_replica == -1
