"""The replication throttle's rate and replica lists (Kafka's ReplicationQuotaManager)."""

from __future__ import annotations

import pytest

from odradek.broker.replication_quota import (
    FOLLOWER_RATE,
    LEADER_RATE,
    ReplicationQuota,
    ReplicationQuotas,
    check_rate,
    throttled_partitions,
)
from odradek.storage.config import LogConfig


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_throttled_partitions_are_those_listed_with_this_broker() -> None:
    assert throttled_partitions("0:1, 1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1", 3) == frozenset()
    assert throttled_partitions("*", 3) is None  # every partition
    assert throttled_partitions("", 1) == frozenset()


def test_topic_config_validation_is_kafkas() -> None:
    config = LogConfig.from_properties({"follower.replication.throttled.replicas": "0:1,1:2"})
    assert config.follower_replication_throttled_replicas == "0:1,1:2"
    assert LogConfig.from_properties({"leader.replication.throttled.replicas": "*"})
    with pytest.raises(ValueError, match=r"must be the literal '\*' or a list of replicas"):
        LogConfig.from_properties({"leader.replication.throttled.replicas": "0-1"})
    assert check_rate(LEADER_RATE, "1048576") is None
    assert "at least 0" in str(check_rate(LEADER_RATE, "-5"))
    assert "at least 0" in str(check_rate(LEADER_RATE, "fast"))


def test_unthrottled_until_a_rate_is_set() -> None:
    quota = ReplicationQuota(1, "leader.replication.throttled.replicas")
    assert not quota.is_throttled(0, "*")
    quota.set_rate(1000)
    assert quota.is_throttled(0, "*")
    assert quota.is_throttled(0, {"leader.replication.throttled.replicas": "0:1"})
    assert not quota.is_throttled(1, {"leader.replication.throttled.replicas": "0:1"})
    assert not quota.is_throttled(0, {})


def test_rate_counts_at_least_the_full_windows_and_forgets_old_ones() -> None:
    clock = Clock()
    quota = ReplicationQuota(1, "x", samples=3, window_s=1.0, clock=clock)
    quota.set_rate(1000)
    quota.record(1500)
    # One sample only: measured over (samples - 1) windows, 1500 / 2 s.
    assert quota.rate() == pytest.approx(750)
    assert not quota.is_quota_exceeded()
    clock.now += 0.5
    quota.record(1000)
    assert quota.rate() == pytest.approx(1250)
    assert quota.is_quota_exceeded()
    clock.now += 5  # every window expired
    assert quota.rate() == 0 and not quota.is_quota_exceeded()


def test_broker_configs_set_and_clear_both_rates() -> None:
    quotas = ReplicationQuotas(2)
    quotas.apply_broker_configs({LEADER_RATE: "100", FOLLOWER_RATE: "200"})
    assert (quotas.leader.limit, quotas.follower.limit) == (100, 200)
    quotas.apply_broker_configs({})
    assert (quotas.leader.limit, quotas.follower.limit) == (None, None)


def test_describe_configs_lists_a_set_throttle_rate() -> None:
    from odradek.broker.config import BrokerConfig
    from odradek.broker.handlers.configs import broker_config_entries

    entries = broker_config_entries(BrokerConfig(), {LEADER_RATE: "500"}, {LEADER_RATE: 2}, None)
    found = {e["name"]: e for e in entries["configs"]}
    assert found[LEADER_RATE]["value"] == "500"
    assert found[LEADER_RATE]["config_source"] == 2  # DYNAMIC_BROKER_CONFIG
    assert FOLLOWER_RATE not in found
    only = broker_config_entries(BrokerConfig(), {LEADER_RATE: "500"}, {LEADER_RATE: 2}, [
        FOLLOWER_RATE
    ])
    assert only == {"configs": []}
