"""Per-topic log configuration, with Kafka's topic-level config names, types and defaults.

A :class:`LogConfig` is immutable; a topic override is a new instance built with
:meth:`LogConfig.from_properties` from ``{"retention.ms": "3600000", ...}`` (the strings an
AdminClient sends in CreateTopics / AlterConfigs) on top of a base config (the broker's
defaults). Every value is validated the way Kafka's ``ConfigDef`` validates it (same type,
same range); an unknown name or a bad value raises :class:`ValueError` with a one-line
message that names the key, which the broker turns into INVALID_CONFIG.

The timestamp bounds follow Kafka 3.6+ (KIP-937): ``message.timestamp.before.max.ms`` and
``message.timestamp.after.max.ms`` win when set; otherwise the older, deprecated
``message.timestamp.difference.max.ms`` bounds both directions.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

CLEANUP_POLICY_DELETE = "delete"
CLEANUP_POLICY_COMPACT = "compact"
TIMESTAMP_TYPE_CREATE = "CreateTime"
TIMESTAMP_TYPE_LOG_APPEND = "LogAppendTime"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_INTEGER = re.compile(r"\s*[-+]?\d+\s*")


@dataclass(frozen=True)
class ConfigKey:
    """One topic config: its Kafka name, the LogConfig field, Kafka's type name and a doc line."""

    name: str
    field: str
    type: str  # Kafka's ConfigDef type: INT, LONG, DOUBLE, STRING, LIST, BOOLEAN
    doc: str
    check: Callable[[Any], str | None]  # returns an error message, or None when valid


def _at_least(minimum: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value >= minimum else f"Value must be at least {minimum}"

    return check


def _any(_value: Any) -> str | None:
    return None


def _between(low: float, high: float) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if low <= value <= high else f"Value must be between {low} and {high}"

    return check


def _one_of(*allowed: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in allowed else f"String must be one of: {', '.join(allowed)}"

    return check


def _cleanup_policy(value: Any) -> str | None:
    parts = value.split(",") if value else []
    for part in parts:
        if part not in (CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE):
            return f"{part!r} is neither compact nor delete"
    if not parts:
        return "must name at least one of compact, delete"
    return None


_THROTTLED_REPLICA = re.compile(r"^\s*\d+\s*:\s*\d+\s*$")


def check_throttled_replicas(name: str, value: Any) -> str | None:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker,...``."""
    text = str(value).strip()
    if text in ("", "*") or all(_THROTTLED_REPLICA.match(e) for e in text.split(",")):
        return None
    return (
        f"{name} must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


def _throttled_replicas(name: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return check_throttled_replicas(name, value)

    return check


CONFIG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("segment.bytes", "segment_bytes", "INT", "Size of one log segment file.",
              _at_least(14)),
    ConfigKey("segment.ms", "segment_ms", "LONG",
              "Roll a new segment after this long even if the current one is not full.",
              _at_least(1)),
    ConfigKey("segment.jitter.ms", "segment_jitter_ms", "LONG",
              "Maximum random jitter subtracted from segment.ms to avoid thundering rolls.",
              _at_least(0)),
    ConfigKey("segment.index.bytes", "segment_index_bytes", "INT",
              "Maximum size of a segment's offset (and time) index; a full index rolls.",
              _at_least(4)),
    ConfigKey("index.interval.bytes", "index_interval_bytes", "INT",
              "Bytes of log between two offset index entries.", _at_least(0)),
    ConfigKey("retention.ms", "retention_ms", "LONG",
              "Delete segments whose newest record is older than this (-1: keep forever).",
              _at_least(-1)),
    ConfigKey("retention.bytes", "retention_bytes", "LONG",
              "Delete the oldest segments while the partition is larger (-1: no limit).", _any),
    ConfigKey("cleanup.policy", "cleanup_policy", "LIST",
              "delete, compact or compact,delete.", _cleanup_policy),
    ConfigKey("delete.retention.ms", "delete_retention_ms", "LONG",
              "How long tombstones survive compaction.", _at_least(0)),
    ConfigKey("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "DOUBLE",
              "Dirty fraction of the log above which it is compacted.", _between(0, 1)),
    ConfigKey("min.compaction.lag.ms", "min_compaction_lag_ms", "LONG",
              "Minimum age of a record before it can be compacted.", _at_least(0)),
    ConfigKey("max.compaction.lag.ms", "max_compaction_lag_ms", "LONG",
              "Maximum time a record stays ineligible for compaction.", _at_least(1)),
    ConfigKey("file.delete.delay.ms", "file_delete_delay_ms", "LONG",
              "Delay before a deleted segment's files are removed from disk.", _at_least(0)),
    ConfigKey("flush.messages", "flush_messages", "LONG",
              "fsync after this many messages have been appended.", _at_least(1)),
    ConfigKey("flush.ms", "flush_ms", "LONG",
              "fsync after this long since the last flush.", _at_least(0)),
    ConfigKey("max.message.bytes", "max_message_bytes", "INT",
              "Largest record batch the topic accepts.", _at_least(0)),
    ConfigKey("message.timestamp.type", "message_timestamp_type", "STRING",
              "CreateTime (keep the producer's) or LogAppendTime (stamp the broker's).",
              _one_of(TIMESTAMP_TYPE_CREATE, TIMESTAMP_TYPE_LOG_APPEND)),
    ConfigKey("message.timestamp.difference.max.ms", "message_timestamp_difference_max_ms",
              "LONG", "Deprecated: bound on |record timestamp - broker time| for CreateTime.",
              _at_least(0)),
    ConfigKey("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", "LONG",
              "How far in the past a CreateTime timestamp may be.", _at_least(0)),
    ConfigKey("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", "LONG",
              "How far in the future a CreateTime timestamp may be.", _at_least(0)),
    ConfigKey("min.insync.replicas", "min_insync_replicas", "INT",
              "Replicas that must acknowledge an acks=all write.", _at_least(1)),
    ConfigKey("unclean.leader.election.enable", "unclean_leader_election_enable", "BOOLEAN",
              "Allow an out-of-sync replica to become leader (may lose data).", _any),
    ConfigKey("compression.type", "compression_type", "STRING",
              "Final codec of the topic; producer keeps the producer's codec.",
              _one_of(*COMPRESSION_TYPES)),
    # Replication throttles (KIP-73): which replicas the broker quotas apply to.
    ConfigKey("leader.replication.throttled.replicas", "leader_replication_throttled_replicas",
              "LIST", "Replicas (partition:broker,... or *) whose leader throttles them.",
              _throttled_replicas("leader.replication.throttled.replicas")),
    ConfigKey("follower.replication.throttled.replicas",
              "follower_replication_throttled_replicas", "LIST",
              "Replicas (partition:broker,... or *) throttled on the follower side.",
              _throttled_replicas("follower.replication.throttled.replicas")),
)  # fmt: skip

KEYS_BY_NAME: dict[str, ConfigKey] = {key.name: key for key in CONFIG_KEYS}
KEYS_BY_FIELD: dict[str, ConfigKey] = {key.field: key for key in CONFIG_KEYS}
TOPIC_CONFIG_KEYS: frozenset[str] = frozenset(KEYS_BY_NAME)

_RANGES = {"INT": (INT_MIN, INT_MAX), "LONG": (LONG_MIN, LONG_MAX)}


@dataclass(frozen=True)
class LogConfig:
    """The settings of one partition's log; field names are Kafka's with ``_`` for ``.``."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = CLEANUP_POLICY_DELETE
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = TIMESTAMP_TYPE_CREATE
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""

    def __post_init__(self) -> None:
        # Normalise the list form so "delete, compact" and "compact,delete" compare equal.
        if isinstance(self.cleanup_policy, str):
            parts = sorted({p.strip() for p in self.cleanup_policy.split(",") if p.strip()})
            object.__setattr__(self, "cleanup_policy", ",".join(parts))
        for key in CONFIG_KEYS:
            _validate(key, getattr(self, key.field))
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ValueError(
                f"conflict topic config setting min.compaction.lag.ms "
                f"({self.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({self.max_compaction_lag_ms})"
            )

    # -- derived settings ---------------------------------------------------------------

    @cached_property  # read on every append; the config is frozen
    def compact(self) -> bool:
        return CLEANUP_POLICY_COMPACT in self.cleanup_policy.split(",")

    @cached_property  # read on every append; the config is frozen
    def delete(self) -> bool:
        return CLEANUP_POLICY_DELETE in self.cleanup_policy.split(",")

    @cached_property  # read on every append; the config is frozen
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == TIMESTAMP_TYPE_LOG_APPEND

    @property
    def timestamp_before_max_ms(self) -> int:
        """Effective bound on how old a CreateTime timestamp may be (KIP-937 fallback)."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """Effective bound on how far in the future a CreateTime timestamp may be."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @cached_property  # read on every append; the config is frozen
    def max_segment_ms(self) -> int:
        """segment.ms, shortened by max.compaction.lag.ms on compacted topics as Kafka does."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    # -- conversion to and from Kafka's string properties --------------------------------

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """``base`` (default: Kafka's defaults) with the named topic configs overridden.

        Raises ValueError naming the key for an unknown name or a bad value.
        """
        changes: dict[str, Any] = {}
        for name, raw in props.items():
            key = KEYS_BY_NAME.get(name)
            if key is None:
                raise ValueError(f"Unknown topic config name: {name}")
            changes[key.field] = _parse(key, raw)
        return dataclasses.replace(base if base is not None else cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """Every topic config as Kafka's name -> string value."""
        return {key.name: _format(getattr(self, key.field)) for key in CONFIG_KEYS}

    def overrides(self, base: LogConfig | None = None) -> dict[str, str]:
        """Only the configs that differ from ``base`` (default: Kafka's defaults)."""
        reference = (base if base is not None else LogConfig()).to_properties()
        return {k: v for k, v in self.to_properties().items() if reference[k] != v}


def _validate(key: ConfigKey, value: Any) -> None:
    kind = key.type
    if kind in ("INT", "LONG"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"Invalid value {value!r} for configuration {key.name}: not an int")
        low, high = _RANGES[kind]
        if not low <= value <= high:
            raise ValueError(
                f"Invalid value {value} for configuration {key.name}: out of range for {kind}"
            )
    elif kind == "DOUBLE":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"Invalid value {value!r} for configuration {key.name}: not a number")
    elif kind == "BOOLEAN":
        if not isinstance(value, bool):
            raise ValueError(f"Invalid value {value!r} for configuration {key.name}: not a boolean")
    elif not isinstance(value, str):
        raise ValueError(f"Invalid value {value!r} for configuration {key.name}: not a string")
    problem = key.check(value)
    if problem is not None:
        raise ValueError(f"Invalid value {value} for configuration {key.name}: {problem}")


def _parse(key: ConfigKey, raw: object) -> Any:
    """Parse a property string the way Kafka's ConfigDef does (trimmed, case-insensitive bools)."""
    if not isinstance(raw, str):
        raw = str(raw)
    text = raw.strip()
    kind = key.type
    if kind in ("INT", "LONG"):
        if not _INTEGER.fullmatch(text):
            raise ValueError(
                f"Invalid value {raw!r} for configuration {key.name}: Not a number of type {kind}"
            )
        return int(text)
    if kind == "DOUBLE":
        try:
            number = float(text)
        except ValueError:
            raise ValueError(
                f"Invalid value {raw!r} for configuration {key.name}: Not a number of type DOUBLE"
            ) from None
        if number != number:  # NaN passes float() but no range check
            raise ValueError(f"Invalid value {raw!r} for configuration {key.name}: NaN")
        return number
    if kind == "BOOLEAN":
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise ValueError(
                f"Invalid value {raw!r} for configuration {key.name}: Expected value to be "
                f"either true or false"
            )
        return lowered == "true"
    if kind == "LIST":
        return ",".join(part.strip() for part in text.split(",") if part.strip())
    return text


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
