"""Group coordinator settings, with Kafka's broker config names and defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["GroupConfig"]


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    group_max_size: int = 2**31 - 1  # group.max.size
    offsets_retention_minutes: int = 10080  # offsets.retention.minutes (7 days)
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    # offsets.topic.num.partitions: for creating the topic; the coordinator maps groups with the
    # partition count of the topic that exists (OffsetsLogAccess.num_partitions).
    offsets_topic_num_partitions: int = 50
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs (not a broker config there): how long a
    # brand-new member may wait in its first JoinGroup before it is dropped.
    group_new_member_join_timeout_ms: int = 300_000

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_broker_config(cls, get: Callable[[str], object]) -> GroupConfig:
        """Read the Kafka-named keys through ``get(name)`` (e.g. ``BrokerConfig.get``); a key
        the broker config does not know keeps its default."""
        values: dict[str, int] = {}
        for field_name, key in _KEYS.items():
            try:
                value = get(key)
            except (KeyError, LookupError):
                continue
            if value is not None:
                values[field_name] = int(value)  # type: ignore[call-overload]
        return cls(**values)


_KEYS = {
    "group_min_session_timeout_ms": "group.min.session.timeout.ms",
    "group_max_session_timeout_ms": "group.max.session.timeout.ms",
    "group_initial_rebalance_delay_ms": "group.initial.rebalance.delay.ms",
    "group_max_size": "group.max.size",
    "offsets_retention_minutes": "offsets.retention.minutes",
    "offsets_retention_check_interval_ms": "offsets.retention.check.interval.ms",
    "offsets_topic_num_partitions": "offsets.topic.num.partitions",
    "offset_metadata_max_bytes": "offset.metadata.max.bytes",
}
