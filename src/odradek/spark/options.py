"""Options of the ``odradek`` Spark source and sink, named and checked as Spark's Kafka connector.

A job written for ``format("kafka")`` runs against odradek by changing only the format name,
so this module accepts the Kafka connector's option names (case-insensitively, as Spark
passes them), applies the same defaults, and refuses the same combinations. Every problem is
reported as one :class:`OptionError` whose message names the option and says what to do.

Source options (batch and streaming)::

    kafka.bootstrap.servers          required, "host:port[,host:port...]"
    subscribe | subscribePattern | assign
                                     exactly one: comma-separated topics, a regex matched
                                     against the whole topic name, or {"topic":[0,1]}
    startingOffsets                  earliest | latest (streaming only) | {"t":{"0":23,"1":-2}}
    endingOffsets                    latest | {"t":{"0":50,"1":-1}}          (batch only)
    startingTimestamp                one timestamp (ms) for every partition
    startingOffsetsByTimestamp       {"t":{"0":1700000000000}}
    startingOffsetsByTimestampStrategy  error (default) | latest
    endingTimestamp / endingOffsetsByTimestamp                             (batch only)
    maxOffsetsPerTrigger / minOffsetsPerTrigger / maxTriggerDelay          (streaming only)
    minPartitions / maxRecordsPerPartition     split large offset ranges into more tasks
    failOnDataLoss                   true (default) | false
    includeHeaders                   false (default) | true
    kafka.isolation.level, kafka.max.partition.fetch.bytes, kafka.fetch.max.bytes,
    kafka.request.timeout.ms, kafka.client.id, kafkaConsumer.pollTimeoutMs

Sink options: kafka.bootstrap.servers, topic (overrides a topic column), includeHeaders,
and producer settings kafka.acks, kafka.compression.type, kafka.batch.size, kafka.linger.ms,
kafka.max.request.size, kafka.enable.idempotence, kafka.request.timeout.ms,
kafka.delivery.timeout.ms, kafka.client.id.

Precedence follows Spark: startingTimestamp > startingOffsetsByTimestamp > startingOffsets, and
endingTimestamp > endingOffsetsByTimestamp > endingOffsets. Options the Kafka connector knows
but odradek has no use for (groupIdPrefix, kafka.group.id, fetchOffset.*) are accepted and
ignored so that existing jobs keep running; any other unknown option is an error, because a
misspelt option silently ignored is a bug waiting to happen.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

EARLIEST = -2  # as in Spark's KafkaOffsetRangeLimit and Kafka's ListOffsets
LATEST = -1

TopicPartition = tuple[str, int]


class OptionError(ValueError):
    """A missing, malformed or conflicting option of the odradek Spark source or sink."""


# --- option names --------------------------------------------------------------------------

BOOTSTRAP = "kafka.bootstrap.servers"
STRATEGIES = ("assign", "subscribe", "subscribePattern")

_SOURCE_OPTIONS = (
    "assign",
    "subscribe",
    "subscribePattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "includeHeaders",
    "kafkaConsumer.pollTimeoutMs",
    # Known to Spark's connector, meaningless here (no consumer group is used): accepted.
    "groupIdPrefix",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
)
_SOURCE_KAFKA_PARAMS = (
    BOOTSTRAP,
    "kafka.isolation.level",
    "kafka.max.partition.fetch.bytes",
    "kafka.fetch.max.bytes",
    "kafka.request.timeout.ms",
    "kafka.client.id",
    "kafka.group.id",
    "kafka.security.protocol",
)
_SINK_OPTIONS = ("topic", "includeHeaders", "exactlyOnce", "transactionalIdPrefix")
_SINK_KAFKA_PARAMS = (
    BOOTSTRAP,
    "kafka.acks",
    "kafka.compression.type",
    "kafka.batch.size",
    "kafka.linger.ms",
    "kafka.max.request.size",
    "kafka.enable.idempotence",
    "kafka.request.timeout.ms",
    "kafka.delivery.timeout.ms",
    "kafka.client.id",
    "kafka.security.protocol",
    "kafka.transaction.timeout.ms",
)
# Options Spark itself sets or passes along (a streaming sink sees the query's checkpoint).
_SPARK_INTERNAL = ("path", "paths", "checkpointLocation", "queryName")

# Kafka params Spark's connector refuses, with its reason (the source manages offsets itself).
_UNSUPPORTED_SOURCE_PARAMS = {
    "kafka.auto.offset.reset": "set the source option 'startingOffsets' instead",
    "kafka.key.deserializer": "keys are always returned as binary; cast them in the query",
    "kafka.value.deserializer": "values are always returned as binary; cast them in the query",
    "kafka.enable.auto.commit": "the source does not commit offsets; Spark checkpoints them",
    "kafka.interceptor.classes": "interceptors are not supported",
}
_UNSUPPORTED_SINK_PARAMS = {
    "kafka.key.serializer": "keys are written as binary; cast the key column to string or binary",
    "kafka.value.serializer": "values are written as binary; cast the value column",
    "kafka.transactional.id": (
        "set 'exactlyOnce' to 'true' instead: each task writes with its own transactional id, "
        "'transactionalIdPrefix'-<query id>-<partition>"
    ),
}

_COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")


def _canonical(names: tuple[str, ...]) -> dict[str, str]:
    return {name.lower(): name for name in names}


# --- small parsers ---------------------------------------------------------------------------


def _lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Spark hands options over case-insensitively; normalise once."""
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}


def _parse_bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise OptionError(f"Option '{name}' must be 'true' or 'false', got '{text}'")


def _parse_int(name: str, text: str, *, minimum: int | None = None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"Option '{name}' must be an integer, got '{text}'") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"Option '{name}' must be at least {minimum}, got {value}")
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h)?\s*$", re.IGNORECASE)
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def _parse_duration_ms(name: str, text: str) -> int:
    """Spark's maxTriggerDelay takes a duration such as '15m', '30s' or a number of ms."""
    match = _DURATION.match(text)
    if match is None:
        raise OptionError(f"Option '{name}' must be a duration such as '15m', '30s' or '500ms'")
    unit = (match.group(2) or "ms").lower()
    return int(match.group(1)) * _DURATION_MS[unit]


def _load_json(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise OptionError(f"Option '{name}' is not valid JSON ({exc.msg}): {text!r}") from None


def parse_partition_map(name: str, text: str) -> dict[TopicPartition, int]:
    """Parse Spark's per-partition JSON ``{"topic":{"0":23,"1":-1}}`` into {(topic, p): n}."""
    data = _load_json(name, text)
    if not isinstance(data, dict):
        raise OptionError(
            f'Option \'{name}\' must be a JSON object like {{"topic":{{"0":23}}}}, got {text!r}'
        )
    result: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict):
            raise OptionError(
                f"Option '{name}': topic '{topic}' must map partition numbers to numbers, "
                f'like {{"{topic}":{{"0":23}}}}'
            )
        for partition_text, value in partitions.items():
            try:
                partition = int(partition_text)
            except ValueError:
                partition = -1
            if partition < 0:
                raise OptionError(
                    f"Option '{name}': '{partition_text}' in topic '{topic}' "
                    "is not a partition number"
                )
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(
                    f"Option '{name}': value for {topic}-{partition} must be an integer, "
                    f"got {value!r}"
                )
            result[(topic, partition)] = value
    return result


def parse_assign(text: str) -> tuple[TopicPartition, ...]:
    """Parse ``{"topicA":[0,1],"topicB":[2,4]}``."""
    data = _load_json("assign", text)
    if not isinstance(data, dict) or not data:
        raise OptionError(
            "Option 'assign' must be a JSON object of topics to partition lists, "
            f'like {{"topicA":[0,1]}}, got {text!r}'
        )
    assigned: list[TopicPartition] = []
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise OptionError(
                f"Option 'assign': topic '{topic}' must map to a list of partition numbers"
            )
        assigned.extend((topic, p) for p in partitions)
    if not assigned:
        raise OptionError(f"Option 'assign' names no partitions: {text!r}")
    return tuple(sorted(set(assigned)))


def _parse_timestamp(name: str, text: str) -> int:
    return _parse_int(name, text, minimum=0)


# --- subscriptions and offset specs ----------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """Which partitions the source reads: fixed topics, a pattern, or an explicit assignment."""

    kind: Literal["assign", "subscribe", "subscribePattern"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether a topic (as listed by the broker) belongs to this subscription."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            # Java's Pattern.matcher(topic).matches() is a whole-string match.
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assignment)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(f"{t}-{p}" for t, p in self.assignment)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the broker.

    ``kind`` is ``earliest``, ``latest``, ``offsets`` (per-partition numbers, -2/-1 allowed),
    ``timestamp`` (one timestamp for every partition) or ``timestamps`` (per partition).
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: Literal["error", "latest"] = "error"
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    poll_timeout_ms: int = 120_000
    max_partition_fetch_bytes: int = 1_048_576
    fetch_max_bytes: int = 52_428_800
    request_timeout_ms: int = 30_000
    client_id: str = "odradek-spark"


# The sink's default kafka.batch.size. Java's producer uses 16 KiB to bound the latency a batch
# adds while it fills up; a Spark write task has its rows at hand, so larger batches cost no
# latency and cut the Produce requests (and their per-request CPU on both sides) 16-fold:
# measured with 100-byte rows, 5.4 -> 1.5 us of client CPU and 1.8 -> 0.45 us of broker CPU
# per row. It stays well below the 1 MiB max.request.size and topic max.message.bytes defaults
# (and, by default, at most half of kafka.max.request.size, so a full batch and its request fit).
SINK_BATCH_SIZE = 262_144


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None = None
    include_headers: bool = False
    acks: int = -1
    compression_type: str = "none"
    batch_size: int = SINK_BATCH_SIZE
    linger_ms: int = 0
    max_request_size: int = 1_048_576
    enable_idempotence: bool = True
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    client_id: str = "odradek-spark"
    exactly_once: bool = False
    transactional_id_prefix: str = "odradek-spark"
    transaction_timeout_ms: int = 60_000


# --- validation --------------------------------------------------------------------------------


def _check_names(
    opts: Mapping[str, str],
    allowed_options: tuple[str, ...],
    allowed_kafka: tuple[str, ...],
    unsupported: Mapping[str, str],
    role: str,
) -> None:
    known = _canonical(allowed_options + allowed_kafka + _SPARK_INTERNAL)
    for key in opts:
        if key in unsupported:
            raise OptionError(
                f"Kafka option '{key}' is not supported by the {role}: {unsupported[key]}"
            )
        if key in known:
            continue
        if key.startswith("kafka.") or key.startswith("kafkaconsumer."):
            # Other Kafka client settings (timeouts, buffer sizes...) do not change results;
            # accept them so configurations written for Kafka keep working.
            continue
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
        hint = f"; did you mean '{known[close[0]]}'?" if close else ""
        raise OptionError(f"Unknown option '{key}' for the {role}{hint}")


def _bootstrap(opts: Mapping[str, str], role: str) -> str:
    servers = opts.get(BOOTSTRAP.lower(), "").strip()
    if not servers:
        raise OptionError(f"Option '{BOOTSTRAP}' must be specified for the {role}")
    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError(
                f"Option '{BOOTSTRAP}' must be a comma-separated list of host:port, got '{servers}'"
            )
    protocol = opts.get("kafka.security.protocol", "PLAINTEXT").strip().upper()
    if protocol != "PLAINTEXT":
        raise OptionError(
            f"Option 'kafka.security.protocol' = '{protocol}' is not supported; "
            "odradek speaks PLAINTEXT only"
        )
    return servers


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in STRATEGIES if name.lower() in opts]
    if not given:
        raise OptionError(
            "One of the options 'assign', 'subscribe' or 'subscribePattern' must be specified "
            "to choose what to read"
        )
    if len(given) > 1:
        raise OptionError(
            "Only one of the options 'assign', 'subscribe' or 'subscribePattern' can be "
            f"specified; got {', '.join(given)}"
        )
    kind = given[0]
    value = opts[kind.lower()]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"Option 'subscribe' names no topics: '{value}'")
        return Subscription("subscribe", topics=tuple(dict.fromkeys(topics)))
    if kind == "subscribePattern":
        if not value.strip():
            raise OptionError("Option 'subscribePattern' must be a non-empty regular expression")
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(
                f"Option 'subscribePattern' is not a valid regex ({exc}): {value!r}"
            ) from None
        return Subscription("subscribePattern", pattern=value)
    return Subscription("assign", assignment=parse_assign(value))


def _starting_spec(opts: Mapping[str, str], *, streaming: bool) -> OffsetSpec:
    if "startingtimestamp" in opts:
        return OffsetSpec(
            "timestamp", timestamp=_parse_timestamp("startingTimestamp", opts["startingtimestamp"])
        )
    if "startingoffsetsbytimestamp" in opts:
        stamps = parse_partition_map(
            "startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"]
        )
        for (topic, partition), ts in stamps.items():
            if ts < 0:
                raise OptionError(
                    f"Option 'startingOffsetsByTimestamp': timestamp for {topic}-{partition} "
                    f"must not be negative, got {ts}"
                )
        return OffsetSpec("timestamps", offsets=stamps)
    default = "latest" if streaming else "earliest"
    text = opts.get("startingoffsets", default).strip()
    if text.lower() == "earliest":
        return OffsetSpec("earliest")
    if text.lower() == "latest":
        if not streaming:
            raise OptionError(
                "Option 'startingOffsets' can't be 'latest' for batch queries: "
                "use 'earliest' or per-partition offsets"
            )
        return OffsetSpec("latest")
    if not text.startswith("{"):
        raise OptionError(
            "Option 'startingOffsets' must be 'earliest', 'latest' or per-partition JSON "
            f'like {{"topic":{{"0":23,"1":-2}}}}, got \'{text}\''
        )
    offsets = parse_partition_map("startingOffsets", text)
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(
                f"Option 'startingOffsets': offset {offset} for {topic}-{partition} is invalid; "
                "use a non-negative offset, -2 for earliest or -1 for latest"
            )
        if offset == LATEST and not streaming:
            raise OptionError(
                f"Option 'startingOffsets': {topic}-{partition} is -1 (latest), "
                "which is not allowed for batch queries"
            )
    return OffsetSpec("offsets", offsets=offsets)


def _ending_spec(opts: Mapping[str, str]) -> OffsetSpec:
    if "endingtimestamp" in opts:
        return OffsetSpec(
            "timestamp", timestamp=_parse_timestamp("endingTimestamp", opts["endingtimestamp"])
        )
    if "endingoffsetsbytimestamp" in opts:
        stamps = parse_partition_map("endingOffsetsByTimestamp", opts["endingoffsetsbytimestamp"])
        return OffsetSpec("timestamps", offsets=stamps)
    text = opts.get("endingoffsets", "latest").strip()
    if text.lower() == "latest":
        return OffsetSpec("latest")
    if text.lower() == "earliest":
        raise OptionError("Option 'endingOffsets' can't be 'earliest' for batch queries")
    if not text.startswith("{"):
        raise OptionError(
            "Option 'endingOffsets' must be 'latest' or per-partition JSON "
            f'like {{"topic":{{"0":50,"1":-1}}}}, got \'{text}\''
        )
    offsets = parse_partition_map("endingOffsets", text)
    for (topic, partition), offset in offsets.items():
        if offset == EARLIEST:
            raise OptionError(
                f"Option 'endingOffsets': {topic}-{partition} is -2 (earliest), "
                "which is not allowed for batch queries"
            )
        if offset < LATEST:
            raise OptionError(
                f"Option 'endingOffsets': offset {offset} for {topic}-{partition} is invalid; "
                "use a non-negative offset or -1 for latest"
            )
    return OffsetSpec("offsets", offsets=offsets)


def _check_assigned_partitions(sub: Subscription, spec: OffsetSpec, name: str) -> None:
    """With 'assign', per-partition JSON may only name assigned partitions (as Spark checks)."""
    if sub.kind != "assign" or spec.kind not in ("offsets", "timestamps"):
        return
    extra = sorted(set(spec.offsets) - set(sub.assignment))
    if extra:
        names = ", ".join(f"{t}-{p}" for t, p in extra)
        raise OptionError(f"Option '{name}' names partitions that are not assigned: {names}")


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the options of a batch (``streaming=False``) or streaming read."""
    opts = _lower_keys(options)
    role = "odradek streaming source" if streaming else "odradek batch source"
    if "topic" in opts:
        raise OptionError(
            "Option 'topic' is for writing; to read, use 'subscribe', 'subscribePattern' "
            "or 'assign'"
        )
    _check_names(opts, _SOURCE_OPTIONS, _SOURCE_KAFKA_PARAMS, _UNSUPPORTED_SOURCE_PARAMS, role)
    servers = _bootstrap(opts, role)
    subscription = _subscription(opts)

    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name.lower() in opts:
                raise OptionError(f"Option '{name}' is for batch queries, not streaming queries")
        ending = OffsetSpec("latest")
    else:
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if name.lower() in opts:
                raise OptionError(f"Option '{name}' is for streaming queries, not batch queries")
        ending = _ending_spec(opts)
    starting = _starting_spec(opts, streaming=streaming)
    _check_assigned_partitions(subscription, starting, "startingOffsets")
    _check_assigned_partitions(subscription, ending, "endingOffsets")

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            "Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got '{strategy}'"
        )

    def optional_positive(name: str) -> int | None:
        return _parse_int(name, opts[name.lower()], minimum=1) if name.lower() in opts else None

    max_per_trigger = optional_positive("maxOffsetsPerTrigger")
    min_per_trigger = optional_positive("minOffsetsPerTrigger")
    if (
        max_per_trigger is not None
        and min_per_trigger is not None
        and min_per_trigger > max_per_trigger
    ):
        raise OptionError(
            f"Option 'minOffsetsPerTrigger' ({min_per_trigger}) must not exceed "
            f"'maxOffsetsPerTrigger' ({max_per_trigger})"
        )
    max_delay = (
        _parse_duration_ms("maxTriggerDelay", opts["maxtriggerdelay"])
        if "maxtriggerdelay" in opts
        else 15 * 60_000
    )

    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionError(
            "Option 'kafka.isolation.level' must be 'read_uncommitted' or 'read_committed', "
            f"got '{isolation}'"
        )

    def kafka_int(name: str, default: int, minimum: int = 1) -> int:
        key = name.lower()
        return _parse_int(name, opts[key], minimum=minimum) if key in opts else default

    return SourceOptions(
        bootstrap_servers=servers,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,  # type: ignore[arg-type]
        fail_on_data_loss=_parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=max_delay,
        min_partitions=optional_positive("minPartitions"),
        max_records_per_partition=optional_positive("maxRecordsPerPartition"),
        include_headers=_parse_bool("includeHeaders", opts.get("includeheaders", "false")),
        isolation_level=isolation,  # type: ignore[arg-type]
        poll_timeout_ms=kafka_int("kafkaConsumer.pollTimeoutMs", 120_000),
        max_partition_fetch_bytes=kafka_int("kafka.max.partition.fetch.bytes", 1_048_576),
        fetch_max_bytes=kafka_int("kafka.fetch.max.bytes", 52_428_800),
        request_timeout_ms=kafka_int("kafka.request.timeout.ms", 30_000),
        client_id=opts.get("kafka.client.id", "odradek-spark").strip() or "odradek-spark",
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the options of a batch or streaming write (the columns are checked separately)."""
    opts = _lower_keys(options)
    role = "odradek sink"
    _check_names(opts, _SINK_OPTIONS, _SINK_KAFKA_PARAMS, _UNSUPPORTED_SINK_PARAMS, role)
    servers = _bootstrap(opts, role)
    topic = opts.get("topic")
    if topic is not None:
        topic = topic.strip()
        if not topic:
            raise OptionError("Option 'topic' must not be empty")

    acks_text = opts.get("kafka.acks", "all").strip().lower()
    acks_map = {"all": -1, "-1": -1, "0": 0, "1": 1}
    if acks_text not in acks_map:
        raise OptionError(f"Option 'kafka.acks' must be one of all, -1, 0, 1; got '{acks_text}'")
    compression = opts.get("kafka.compression.type", "none").strip().lower()
    if compression not in _COMPRESSION_TYPES:
        raise OptionError(
            f"Option 'kafka.compression.type' must be one of {', '.join(_COMPRESSION_TYPES)}; "
            f"got '{compression}'"
        )

    def kafka_int(name: str, default: int, minimum: int = 0) -> int:
        key = name.lower()
        return _parse_int(name, opts[key], minimum=minimum) if key in opts else default

    exactly_once = _parse_bool("exactlyOnce", opts.get("exactlyonce", "false"))
    prefix = opts.get("transactionalidprefix", "odradek-spark").strip()
    if not prefix:
        raise OptionError("Option 'transactionalIdPrefix' must not be empty")
    if exactly_once:
        # The batch-done marker is an offset of the sink's group on partition 0 of this topic.
        if topic is None:
            raise OptionError("Option 'exactlyOnce' needs the option 'topic' (one output topic)")
        if acks_text not in ("all", "-1"):
            raise OptionError("Option 'exactlyOnce' needs 'kafka.acks' = 'all'")
        if opts.get("kafka.enable.idempotence", "true").strip().lower() == "false":
            raise OptionError("Option 'exactlyOnce' needs 'kafka.enable.idempotence' = 'true'")

    max_request_size = kafka_int("kafka.max.request.size", 1_048_576, minimum=1)
    return SinkOptions(
        bootstrap_servers=servers,
        topic=topic,
        include_headers=_parse_bool("includeHeaders", opts.get("includeheaders", "false")),
        acks=acks_map[acks_text],
        compression_type=compression,
        batch_size=kafka_int(
            "kafka.batch.size", min(SINK_BATCH_SIZE, max_request_size // 2), minimum=1
        ),
        linger_ms=kafka_int("kafka.linger.ms", 0),
        max_request_size=max_request_size,
        enable_idempotence=_parse_bool(
            "kafka.enable.idempotence", opts.get("kafka.enable.idempotence", "true")
        ),
        request_timeout_ms=kafka_int("kafka.request.timeout.ms", 30_000, minimum=1),
        delivery_timeout_ms=kafka_int("kafka.delivery.timeout.ms", 120_000, minimum=1),
        client_id=opts.get("kafka.client.id", "odradek-spark").strip() or "odradek-spark",
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
        transaction_timeout_ms=kafka_int("kafka.transaction.timeout.ms", 60_000, minimum=1),
    )
