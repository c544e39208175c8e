"""ClientQuotaManager: Kafka's quota precedence, per-entity usage and throttle times."""

from __future__ import annotations

from odradek.broker.client_quotas import (
    PRODUCER_BYTE_RATE,
    ClientQuotaManager,
    SampledRate,
    entity_key,
    validate_value,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _manager(quotas: list) -> tuple[ClientQuotaManager, Clock]:
    clock = Clock()
    manager = ClientQuotaManager(11, 1.0, clock)
    manager.replace({entity_key(e): v for e, v in quotas})
    return manager, clock


def test_precedence_follows_kafka() -> None:
    manager, _ = _manager(
        [
            ({"user": "u", "client-id": "c"}, {PRODUCER_BYTE_RATE: 1}),
            ({"user": "u", "client-id": None}, {PRODUCER_BYTE_RATE: 2}),
            ({"user": "u"}, {PRODUCER_BYTE_RATE: 3}),
            ({"user": None, "client-id": "c"}, {PRODUCER_BYTE_RATE: 4}),
            ({"user": None, "client-id": None}, {PRODUCER_BYTE_RATE: 5}),
            ({"user": None}, {PRODUCER_BYTE_RATE: 6}),
            ({"client-id": "c"}, {PRODUCER_BYTE_RATE: 7}),
            ({"client-id": None}, {PRODUCER_BYTE_RATE: 8}),
        ]
    )
    assert manager.quota_for(PRODUCER_BYTE_RATE, "u", "c") == (1, "u", "c")
    assert manager.quota_for(PRODUCER_BYTE_RATE, "u", "other") == (2, "u", "other")
    assert manager.quota_for(PRODUCER_BYTE_RATE, "v", "c") == (4, "v", "c")
    assert manager.quota_for(PRODUCER_BYTE_RATE, "v", "other") == (5, "v", "other")
    assert manager.quota_for(PRODUCER_BYTE_RATE, "", "c") == (7, "", "c")
    assert manager.quota_for(PRODUCER_BYTE_RATE, "", "x") == (8, "", "x")
    manager.update(entity_key({"user": "u", "client-id": None}), {})
    manager.update(entity_key({"user": "u", "client-id": "c"}), {})
    # users/<user> is shared by every client id of the user: its usage has no client tag.
    assert manager.quota_for(PRODUCER_BYTE_RATE, "u", "x") == (3, "u", "")
    assert manager.quota_for("consumer_byte_rate", "u", "x") is None


def test_throttle_time_grows_with_the_overshoot() -> None:
    manager, clock = _manager([({"client-id": "c"}, {PRODUCER_BYTE_RATE: 1000})])
    # 10 s of minimum window: 10 000 bytes are within the quota, more are not.
    assert manager.record(PRODUCER_BYTE_RATE, "User:ANONYMOUS", "c", 10_000) == 0
    assert manager.record(PRODUCER_BYTE_RATE, "User:ANONYMOUS", "other", 50_000) == 0
    throttle = manager.record(PRODUCER_BYTE_RATE, "User:ANONYMOUS", "c", 5_000)
    assert throttle == 5000  # (1500 - 1000) / 1000 * 10 s
    # 15 000 + 10 000 bytes over 10 s at 1000 B/s: 15 s more to bring it back (unbounded).
    assert manager.record(PRODUCER_BYTE_RATE, "User:ANONYMOUS", "c", 10_000) == 15_000
    # Once the samples age out, the client is within its quota again.
    clock.now += 30
    assert manager.record(PRODUCER_BYTE_RATE, "User:ANONYMOUS", "c", 100) == 0


def test_user_quota_counts_the_principal_name() -> None:
    manager, _ = _manager([({"user": "alice"}, {PRODUCER_BYTE_RATE: 10})])
    assert manager.record(PRODUCER_BYTE_RATE, "User:bob", "c", 10**6) == 0
    assert manager.record(PRODUCER_BYTE_RATE, "User:alice", "c", 10**6) > 0


def test_sampled_rate_spans_at_least_samples_minus_one_windows() -> None:
    rate = SampledRate(3, 1.0)
    rate.record(100, 0.0)
    assert rate.rate(0.5) == 50.0  # 100 over the 2 s minimum
    rate.record(100, 1.5)
    rate.record(100, 2.5)
    assert rate.rate(3.0) == 100.0  # 300 over 3 s
    assert rate.rate(10.0) == 0.0  # every sample expired


def test_validate_value() -> None:
    assert validate_value(PRODUCER_BYTE_RATE, 1024.0) is None
    assert validate_value("request_percentage", 12.5) is None
    assert "whole" in (validate_value(PRODUCER_BYTE_RATE, 1.5) or "")
    assert "positive" in (validate_value(PRODUCER_BYTE_RATE, 0.0) or "")
    assert "Invalid configuration key" in (validate_value("x", 1.0) or "")
