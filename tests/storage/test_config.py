from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.config import CONFIG_KEYS, LONG_MAX, TOPIC_CONFIG_KEYS, LogConfig


def test_defaults_are_kafkas() -> None:
    props = LogConfig().to_properties()
    assert props["segment.bytes"] == "1073741824"
    assert props["segment.ms"] == "604800000"
    assert props["segment.index.bytes"] == "10485760"
    assert props["index.interval.bytes"] == "4096"
    assert props["retention.ms"] == "604800000"
    assert props["retention.bytes"] == "-1"
    assert props["cleanup.policy"] == "delete"
    assert props["delete.retention.ms"] == "86400000"
    assert props["min.cleanable.dirty.ratio"] == "0.5"
    assert props["max.compaction.lag.ms"] == str(LONG_MAX)
    assert props["file.delete.delay.ms"] == "60000"
    assert props["flush.messages"] == str(LONG_MAX)
    assert props["max.message.bytes"] == "1048588"
    assert props["message.timestamp.type"] == "CreateTime"
    assert props["min.insync.replicas"] == "1"
    assert props["unclean.leader.election.enable"] == "false"
    assert props["compression.type"] == "producer"
    assert set(props) == TOPIC_CONFIG_KEYS


def test_from_properties_overrides_a_base() -> None:
    base = LogConfig(retention_ms=1000)
    config = LogConfig.from_properties(
        {
            "segment.bytes": " 2048 ",
            "cleanup.policy": "delete, compact",
            "unclean.leader.election.enable": "TRUE",
            "min.cleanable.dirty.ratio": "0.25",
        },
        base=base,
    )
    assert config.segment_bytes == 2048
    assert config.retention_ms == 1000  # from the base
    assert config.cleanup_policy == "compact,delete"
    assert config.compact and config.delete
    assert config.unclean_leader_election_enable is True
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.overrides(base) == {
        "segment.bytes": "2048",
        "cleanup.policy": "compact,delete",
        "unclean.leader.election.enable": "true",
        "min.cleanable.dirty.ratio": "0.25",
    }


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"segment.bytes": "abc"}, "segment.bytes"),
        ({"segment.bytes": "1.5"}, "segment.bytes"),
        ({"segment.bytes": "10"}, "at least 14"),
        ({"segment.bytes": str(2**31)}, "out of range"),
        ({"retention.ms": "-2"}, "retention.ms"),
        ({"flush.messages": "0"}, "flush.messages"),
        ({"cleanup.policy": "compact,bogus"}, "cleanup.policy"),
        ({"cleanup.policy": ""}, "cleanup.policy"),
        ({"message.timestamp.type": "WallClock"}, "message.timestamp.type"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
        ({"min.cleanable.dirty.ratio": "nan"}, "min.cleanable.dirty.ratio"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        (
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
            "min.compaction.lag.ms",
        ),
    ],
)
def test_bad_configs_name_the_key(props: dict[str, str], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        LogConfig.from_properties(props)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ValueError, match=r"segment\.ms"):
        LogConfig(segment_ms=0)
    with pytest.raises(ValueError, match=r"max\.message\.bytes"):
        LogConfig(max_message_bytes="big")  # type: ignore[arg-type]


def test_timestamp_bounds_fall_back_to_the_deprecated_difference() -> None:
    config = LogConfig.from_properties({"message.timestamp.difference.max.ms": "5000"})
    assert config.timestamp_before_max_ms == 5000
    assert config.timestamp_after_max_ms == 5000
    config = LogConfig.from_properties(
        {"message.timestamp.difference.max.ms": "5000", "message.timestamp.after.max.ms": "10"}
    )
    assert config.timestamp_before_max_ms == 5000
    assert config.timestamp_after_max_ms == 10


def test_max_segment_ms_is_capped_by_compaction_lag() -> None:
    assert LogConfig(segment_ms=1000).max_segment_ms == 1000
    compacted = LogConfig(segment_ms=1000, cleanup_policy="compact", max_compaction_lag_ms=300)
    assert compacted.max_segment_ms == 300


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_properties_round_trip(data: st.DataObject) -> None:
    changes = {}
    for key in CONFIG_KEYS:
        if key.type in ("INT", "LONG") and data.draw(st.booleans()):
            default = getattr(LogConfig(), key.field)
            changes[key.field] = data.draw(st.integers(max(default - 5, 1), default + 5))
    try:
        config = dataclasses.replace(LogConfig(), **changes)
    except ValueError:
        return  # e.g. a compaction lag conflict drawn at random
    assert LogConfig.from_properties(config.to_properties()) == config
