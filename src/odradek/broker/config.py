"""Broker configuration with Apache Kafka's key names and defaults.

Sources, later ones winning: built-in defaults, a ``server.properties``-style file
(read as Java's ``Properties.load`` reads it, :mod:`odradek.properties`), and
``--override key=value`` pairs from the command line. Bad values raise :class:`ConfigError`
with a one-line message naming the key, so the CLI can print it without a traceback. Every
broker key Kafka documents (:mod:`odradek.broker.kafka_config_names`) is accepted; the ones
with no effect here are collected in :attr:`BrokerConfig.unused` for a start-up warning.
Any other key is refused, with a did-you-mean suggestion.

The broker-wide ``log.*`` keys are the defaults for every topic; they map onto the
topic-level keys of :class:`odradek.storage.config.LogConfig` exactly as Kafka maps them
(``log.segment.bytes`` -> ``segment.bytes``, ``log.roll.ms`` -> ``segment.ms``, ...).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek import properties
from odradek.broker.kafka_config_names import (
    ACCEPTED_WITHOUT_EFFECT,
    KAFKA_BROKER_CONFIG_NAMES,
    PLUGIN_KEYS,
    is_kafka_broker_key,
)
from odradek.broker.listeners import (
    DEFAULT_PROTOCOL_MAP,
    Endpoint,
    parse_advertised,
    parse_listeners,
    parse_protocol_map,
)
from odradek.broker.replica_selector import RACK_AWARE_REPLICA_SELECTOR, SELECTOR_CLASSES

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid."""


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str  # "int", "long", "double", "bool", "string", "list", "password"
    default: Any
    doc: str
    validator: Callable[[Any], str | None] | None = None
    # Broker keys that set a topic default: the topic-level name they map to.
    topic_key: str | None = None
    read_only: bool = True  # dynamic broker configs (AlterConfigs on a broker) are the exceptions


def _at_least(minimum: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value >= minimum else f"must be at least {minimum}"

    return check


def _between(low: float, high: float) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if low <= value <= high else f"must be between {low} and {high}"

    return check


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return check


def _cleanup_policy(value: Any) -> str | None:
    parts = [p.strip() for p in str(value).split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        return "must be a list of delete and/or compact"
    return None


def _ip_overrides(value: Any) -> str | None:
    try:
        parse_ip_overrides(value)
    except ValueError as exc:
        return str(exc)
    return None


def parse_ip_overrides(raw: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs, comma-separated."""
    overrides: dict[str, int] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip() or not count.strip().isdigit():
            raise ValueError(f"expected host:count pairs, got {item!r}")
        overrides[host.strip().strip("[]")] = int(count)
    return overrides


def _replica_selector(value: Any) -> str | None:
    if value in SELECTOR_CLASSES:
        return None
    return f"only {RACK_AWARE_REPLICA_SELECTOR} is supported"
def _authorizer_class(value: Any) -> str | None:
    from odradek.broker.security.authorizer import KNOWN_AUTHORIZERS

    if value and str(value).strip() not in KNOWN_AUTHORIZERS:
        return f"unknown authorizer (supported: {', '.join(sorted(KNOWN_AUTHORIZERS))})"
    return None


def _super_users(value: Any) -> str | None:
    for part in str(value or "").split(";"):
        kind, sep, name = part.strip().partition(":")
        if part.strip() and not (sep and kind and name):
            return f"{part.strip()!r} is not a principal of the form Type:name (User:admin)"
    return None


def _zookeeper_connect(value: Any) -> str | None:
    # Non-empty turns cluster mode on (odradek.broker.cluster_mode); check the form here
    # so a typo is a one-line config error, not a connection failure later.
    if not value:
        return None
    from odradek.cluster.zk.paths import InvalidConnectString, parse_connect

    try:
        parse_connect(str(value))
    except InvalidConnectString as exc:
        return str(exc)
    return None


_KEYS: list[ConfigKey] = [
    # Identity and listeners.
    ConfigKey(
        "broker.id",
        "int",
        0,
        "This broker's id; -1 with ZooKeeper and broker.id.generation.enable = generate one.",
        _at_least(-1),
    ),
    ConfigKey("node.id", "int", -1, "Alias of broker.id (KRaft name); -1 means use broker.id."),
    ConfigKey(
        "listeners",
        "string",
        "PLAINTEXT://127.0.0.1:9092",
        "Where the broker listens: NAME://host:port, comma-separated; PLAINTEXT, SSL, "
        "SASL_PLAINTEXT and SASL_SSL listeners (docs/security.md).",
    ),
    ConfigKey(
        "listener.security.protocol.map",
        "string",
        DEFAULT_PROTOCOL_MAP,
        "Listener name to security protocol, as NAME:PROTOCOL pairs.",
    ),
    ConfigKey(
        "advertised.listeners",
        "string",
        "",
        "What clients are told to connect to; defaults to listeners.",
    ),
    ConfigKey("broker.rack", "string", "", "Rack of this broker, for rack-aware placement."),
    ConfigKey(
        "replica.selector.class",
        "string",
        "",
        "Replica selector for fetch from follower (KIP-392); empty: consumers read from leaders.",
        _replica_selector,
    ),
    ConfigKey("cluster.id", "string", "", "Cluster id; generated and persisted when empty."),
    # Storage.
    ConfigKey("log.dirs", "string", "", "Data directory (one). Overrides log.dir."),
    ConfigKey("log.dir", "string", "odradek-data", "Data directory used when log.dirs is empty."),
    ConfigKey(
        "log.segment.bytes", "int", 1073741824, "Segment size.", _at_least(14), "segment.bytes"
    ),
    ConfigKey("log.roll.ms", "long", None, "Segment age before a roll.", None, "segment.ms"),
    ConfigKey("log.roll.hours", "int", 168, "Segment age in hours.", _at_least(1)),
    ConfigKey(
        "log.index.size.max.bytes",
        "int",
        10485760,
        "Max index file size.",
        _at_least(4),
        "segment.index.bytes",
    ),
    ConfigKey(
        "log.index.interval.bytes",
        "int",
        4096,
        "Bytes between offset index entries.",
        _at_least(0),
        "index.interval.bytes",
    ),
    ConfigKey("log.retention.ms", "long", None, "Retention time.", None, "retention.ms"),
    ConfigKey("log.retention.minutes", "int", None, "Retention time in minutes."),
    ConfigKey("log.retention.hours", "int", 168, "Retention time in hours."),
    ConfigKey(
        "log.retention.bytes", "long", -1, "Retention size per partition.", None, "retention.bytes"
    ),
    ConfigKey(
        "log.retention.check.interval.ms",
        "long",
        300000,
        "How often retention runs.",
        _at_least(1),
    ),
    ConfigKey(
        "log.cleanup.policy",
        "list",
        "delete",
        "Default cleanup policy.",
        _cleanup_policy,
        "cleanup.policy",
    ),
    ConfigKey(
        "log.flush.interval.messages",
        "long",
        LONG_MAX,
        "Messages before an fsync.",
        _at_least(1),
        "flush.messages",
    ),
    ConfigKey("log.flush.interval.ms", "long", None, "Time before an fsync.", None, "flush.ms"),
    ConfigKey(
        "log.flush.scheduler.interval.ms",
        "long",
        LONG_MAX,
        "How often the flusher checks logs.",
    ),
    ConfigKey(
        "log.flush.offset.checkpoint.interval.ms",
        "int",
        60000,
        "How often recovery points are checkpointed.",
        _at_least(0),
    ),
    ConfigKey(
        "log.segment.delete.delay.ms",
        "long",
        60000,
        "Delay before a deleted segment's files are removed.",
        _at_least(0),
        "file.delete.delay.ms",
    ),
    ConfigKey(
        "log.message.timestamp.type",
        "string",
        "CreateTime",
        "Timestamp type of appended records.",
        _one_of("CreateTime", "LogAppendTime"),
        "message.timestamp.type",
    ),
    ConfigKey("log.cleaner.enable", "bool", True, "Run the log cleaner (compaction)."),
    ConfigKey("log.cleaner.threads", "int", 1, "Cleaner threads.", _at_least(0)),
    ConfigKey("log.cleaner.backoff.ms", "long", 15000, "Cleaner sleep when idle.", _at_least(0)),
    ConfigKey(
        "log.cleaner.delete.retention.ms",
        "long",
        86400000,
        "How long tombstones are kept.",
        _at_least(0),
        "delete.retention.ms",
    ),
    ConfigKey(
        "log.cleaner.min.cleanable.ratio",
        "double",
        0.5,
        "Dirty ratio that makes a log cleanable.",
        _between(0, 1),
        "min.cleanable.dirty.ratio",
    ),
    ConfigKey(
        "log.cleaner.min.compaction.lag.ms",
        "long",
        0,
        "Minimum age before a record may be compacted.",
        _at_least(0),
        "min.compaction.lag.ms",
    ),
    ConfigKey(
        "message.max.bytes",
        "int",
        1048588,
        "Largest record batch accepted.",
        _at_least(0),
        "max.message.bytes",
    ),
    ConfigKey(
        "compression.type",
        "string",
        "producer",
        "Compression of stored batches.",
        _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        "compression.type",
    ),
    ConfigKey(
        "min.insync.replicas",
        "int",
        1,
        "Replicas that must acknowledge acks=all.",
        _at_least(1),
        "min.insync.replicas",
    ),
    ConfigKey(
        "unclean.leader.election.enable",
        "bool",
        False,
        "Allow electing an out-of-sync replica.",
        None,
        "unclean.leader.election.enable",
    ),
    # Topics.
    ConfigKey("num.partitions", "int", 1, "Partitions of auto-created topics.", _at_least(1)),
    ConfigKey(
        "default.replication.factor", "int", 1, "Replication factor of new topics.", _at_least(1)
    ),
    ConfigKey("auto.create.topics.enable", "bool", True, "Create topics on first metadata use."),
    # Authorization (security.authorizer): Kafka's AclAuthorizer keys.
    ConfigKey(
        "authorizer.class.name",
        "string",
        "",
        "kafka.security.authorizer.AclAuthorizer (or StandardAuthorizer) turns ACLs on.",
        _authorizer_class,
    ),
    ConfigKey(
        "super.users",
        "string",
        "",
        "Principals allowed everything, ';'-separated.",
        _super_users,
    ),
    ConfigKey(
        "allow.everyone.if.no.acl.found", "bool", False, "Allow a resource that has no ACLs."
    ),
    ConfigKey("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    # Network.
    ConfigKey("socket.request.max.bytes", "int", 104857600, "Largest request frame.", _at_least(1)),
    ConfigKey(
        "connections.max.idle.ms",
        "long",
        600000,
        "Idle connections are closed after this; a negative value never closes them.",
    ),
    ConfigKey(
        "queued.max.request.bytes",
        "long",
        -1,
        "Bytes of requests held (received or being answered) across the broker before "
        "reading pauses; -1 means no limit.",
    ),
    ConfigKey(
        "quota.window.num",
        "int",
        11,
        "Samples a client quota's rate is measured over (KIP-13).",
        _at_least(1),
    ),
    ConfigKey(
        "quota.window.size.seconds",
        "int",
        1,
        "Length of one client quota sample, in seconds.",
        _at_least(1),
    ),
    ConfigKey(
        "max.connections",
        "int",
        2**31 - 1,
        "Connections the broker accepts; further ones wait until one closes.",
        _at_least(0),
    ),
    ConfigKey(
        "max.connections.per.ip",
        "int",
        2**31 - 1,
        "Connections allowed from one IP address; more are closed at once.",
        _at_least(0),
    ),
    ConfigKey(
        "max.connections.per.ip.overrides",
        "string",
        "",
        "Per-IP or per-hostname limits overriding max.connections.per.ip, as host:count pairs.",
        _ip_overrides,
    ),
    ConfigKey(
        "queued.max.requests", "int", 500, "In-flight requests per connection.", _at_least(1)
    ),
    ConfigKey(
        "num.network.threads",
        "int",
        3,
        "Threads that decode large requests and encode their responses off the event loop.",
        _at_least(1),
    ),
    ConfigKey("num.io.threads", "int", 8, "Threads for blocking storage work.", _at_least(1)),
    ConfigKey(
        "num.recovery.threads.per.data.dir",
        "int",
        1,
        "Threads that load (and after an unclean stop, recover) the logs at start-up.",
        _at_least(1),
    ),
    ConfigKey(
        "append.thread.min.bytes",
        "int",
        -1,
        "Produce appends of at least this many bytes are validated and written on a dedicated "
        "append thread instead of the event loop; -1 never (odradek's own key).",
        _at_least(-1),
    ),
    ConfigKey(
        "produce.lane.enable",
        "bool",
        True,
        "Answer Produce requests naming one partition on the direct path (no generic decoding "
        "or dispatch; the answers are the same); false sends every request through the "
        "generic handler (odradek's own key, for comparison).",
    ),
    ConfigKey("fetch.max.bytes", "int", 57671680, "Largest fetch response.", _at_least(1024)),
    ConfigKey(
        "group.initial.rebalance.delay.ms", "int", 3000, "Delay of a new group's first rebalance."
    ),
    ConfigKey("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout."),
    ConfigKey("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout."),
    ConfigKey("group.max.size", "int", 2**31 - 1, "Most members in one group.", _at_least(1)),
    ConfigKey(
        "offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", _at_least(1)
    ),
    ConfigKey("offsets.topic.replication.factor", "int", 3, "Replicas of __consumer_offsets."),
    ConfigKey(
        "offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets."
    ),
    ConfigKey("offsets.retention.minutes", "int", 10080, "Offsets of empty groups expire after."),
    ConfigKey("offsets.retention.check.interval.ms", "long", 600000, "How often offsets expire."),
    ConfigKey("offset.metadata.max.bytes", "int", 4096, "Largest commit metadata."),
    ConfigKey(
        "offsets.commit.timeout.ms",
        "int",
        5000,
        "How long an offset commit waits for the offsets partition's ISR.",
        _at_least(1),
    ),
    ConfigKey(
        "transactional.id.expiration.ms", "int", 604800000, "Idle transactional ids expire after."
    ),
    ConfigKey("producer.id.expiration.ms", "int", 86400000, "Idle producer ids expire after."),
    ConfigKey(
        "transaction.state.log.num.partitions",
        "int",
        50,
        "Partitions of __transaction_state.",
        _at_least(1),
    ),
    ConfigKey("transaction.state.log.replication.factor", "int", 3, "Replicas of it."),
    ConfigKey("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of it."),
    ConfigKey("transaction.state.log.segment.bytes", "int", 104857600, "Its segment size."),
    ConfigKey(
        "transaction.max.timeout.ms", "int", 900000, "Largest transaction timeout.", _at_least(1)
    ),
    ConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "int",
        10000,
        "How often timed-out transactions are aborted.",
        _at_least(1),
    ),
    ConfigKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "int",
        3600000,
        "How often expired transactional ids are removed.",
        _at_least(1),
    ),
    ConfigKey(
        "replica.lag.time.max.ms", "long", 30000, "A follower this far behind leaves the ISR."
    ),
    ConfigKey(
        "replica.high.watermark.checkpoint.interval.ms",
        "long",
        5000,
        "How often high watermarks are written to replication-offset-checkpoint.",
        _at_least(1),
    ),
    # Replication (odradek.broker.replica_fetcher), Kafka's names and defaults.
    ConfigKey("num.replica.fetchers", "int", 1, "Fetcher tasks per source broker.", _at_least(1)),
    ConfigKey(
        "max.incremental.fetch.session.cache.slots",
        "int",
        1000,
        "Incremental fetch sessions (KIP-227) the broker keeps.",
        _at_least(0),
    ),
    ConfigKey("replica.fetch.max.bytes", "int", 1048576, "Bytes per partition per replica fetch."),
    ConfigKey(
        "replica.fetch.response.max.bytes", "int", 10485760, "Bytes per replica fetch response."
    ),
    ConfigKey("replica.fetch.min.bytes", "int", 1, "Bytes a replica fetch waits for."),
    ConfigKey("replica.fetch.wait.max.ms", "int", 500, "Longest wait of a replica fetch."),
    ConfigKey("replica.fetch.backoff.ms", "int", 1000, "Pause after a failed replica fetch."),
    ConfigKey("replica.socket.timeout.ms", "int", 30000, "Replica fetch socket timeout."),
    # Replication throttles (odradek.broker.replication_quota): the rate's sample windows.
    ConfigKey(
        "replication.quota.window.num", "int", 11, "Samples of the replication rate.", _at_least(1)
    ),
    ConfigKey(
        "replication.quota.window.size.seconds",
        "int",
        1,
        "Length of one replication rate sample.",
        _at_least(1),
    ),
    ConfigKey(
        "zookeeper.connect",
        "string",
        "",
        "ZooKeeper for clusters; empty = the embedded single broker.",
        _zookeeper_connect,
    ),
    ConfigKey(
        "zookeeper.session.timeout.ms", "int", 18000, "ZooKeeper session timeout.", _at_least(1)
    ),
    # Cluster mode (odradek.broker.cluster_mode) keys, Kafka's names and defaults.
    ConfigKey(
        "zookeeper.connection.timeout.ms",
        "int",
        None,
        "Wait this long to connect to ZooKeeper; unset = zookeeper.session.timeout.ms.",
        _at_least(1),
    ),
    ConfigKey(
        "broker.id.generation.enable",
        "bool",
        True,
        "With ZooKeeper, broker.id -1 gets a generated id above reserved.broker.max.id.",
    ),
    ConfigKey(
        "reserved.broker.max.id",
        "int",
        1000,
        "Generated broker ids start above this.",
        _at_least(0),
    ),
    ConfigKey("controlled.shutdown.enable", "bool", True, "Move leadership away before stopping."),
    ConfigKey(
        "controlled.shutdown.max.retries",
        "int",
        3,
        "Attempts at a controlled shutdown before stopping anyway.",
        _at_least(0),
    ),
    ConfigKey(
        "controlled.shutdown.retry.backoff.ms",
        "int",
        5000,
        "Wait between controlled shutdown attempts.",
        _at_least(0),
    ),
    ConfigKey(
        "auto.leader.rebalance.enable",
        "bool",
        True,
        "The controller moves leadership back to preferred replicas.",
    ),
    ConfigKey(
        "leader.imbalance.check.interval.seconds",
        "int",
        300,
        "How often the controller checks leader imbalance.",
        _at_least(1),
    ),
    ConfigKey(
        "leader.imbalance.per.broker.percentage",
        "int",
        10,
        "Imbalance per broker above which preferred leaders are elected.",
        _between(0, 100),
    ),
    ConfigKey(
        "inter.broker.listener.name",
        "string",
        "",
        "Listener brokers and the controller use to reach each other (default: the first "
        "PLAINTEXT one).",
    ),
    ConfigKey(
        "controller.socket.timeout.ms",
        "int",
        30000,
        "Timeout of the controller's requests to brokers.",
        _at_least(1),
    ),
    # Observability (odradek's own keys; Kafka exports JMX instead of an HTTP endpoint).
    ConfigKey(
        "metrics.port",
        "int",
        None,
        "Port of the Prometheus endpoint (GET /metrics); unset = no endpoint. 0 = any free port.",
        _between(0, 65535),
    ),
    ConfigKey("metrics.host", "string", "127.0.0.1", "Address the Prometheus endpoint binds."),
    ConfigKey(
        "log.format",
        "string",
        "text",
        "Broker log lines: text, or json (one JSON object per line).",
        _one_of("text", "json"),
    ),
    ConfigKey(
        "log.slow.request.threshold.ms",
        "long",
        -1,
        "Requests taking at least this long are logged by kafka.request.logger; -1 = never.",
        _at_least(-1),
    ),
]

KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}

_TRUE = {"true"}
_FALSE = {"false"}


def parse_value(key: ConfigKey, raw: str) -> Any:
    """Turn the text form of a value into its typed form, or raise ConfigError."""
    text = raw.strip()
    try:
        if key.type in ("int", "long"):
            value: Any = int(text)
            limit = 2**31 - 1 if key.type == "int" else LONG_MAX
            if not -limit - 1 <= value <= limit:
                raise ValueError
        elif key.type == "double":
            value = float(text)
        elif key.type == "bool":
            lowered = text.lower()
            if lowered not in _TRUE | _FALSE:
                raise ValueError
            value = lowered in _TRUE
        else:
            value = text
    except ValueError:
        raise ConfigError(f"invalid value {raw!r} for {key.name}: expected {key.type}") from None
    if key.validator is not None:
        problem = key.validator(value)
        if problem:
            raise ConfigError(f"invalid value {raw!r} for {key.name}: {problem}")
    return value


def read_properties(path: Path) -> dict[str, str]:
    """A Java .properties file, read as ``Properties.load`` does (:mod:`odradek.properties`)."""
    try:
        return properties.read_properties(path)
    except properties.PropertiesError as exc:
        raise ConfigError(str(exc)) from None


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """``['key=value', ...]`` from ``--override`` flags."""
    props: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects key=value, got {pair!r}")
        props[key.strip()] = value
    return props


class BrokerConfig:
    """Typed, validated broker settings. Attribute access uses Kafka's names via ``get``."""

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self._values: dict[str, Any] = {k.name: k.default for k in _KEYS}
        self.originals: dict[str, str] = {}
        # Kafka broker keys given but not acted on here: name -> raw value.
        self.unused: dict[str, str] = {}
        # ssl.* / sasl.* and their listener.name.<l>. forms, read by broker.security.
        self.security_props: dict[str, str] = {}
        for name, raw in (props or {}).items():
            self.set(name, raw)
        self._check_listeners()
        self._check_network()
        self._check_broker_id()

    @classmethod
    def load(cls, path: Path | None = None, overrides: list[str] | None = None) -> BrokerConfig:
        props: dict[str, str] = {}
        if path is not None:
            props.update(read_properties(path))
        props.update(parse_overrides(overrides or []))
        return cls(props)

    def set(self, name: str, raw: str) -> None:
        key = KEYS.get(name)
        if key is None:
            self._set_unknown(name, raw)
            return
        self._values[name] = parse_value(key, raw)
        self.originals[name] = raw
        self._note_unused(name, raw)

    def _note_unused(self, name: str, raw: str) -> None:
        if name in ACCEPTED_WITHOUT_EFFECT:
            self.unused[name] = raw

    def _set_unknown(self, name: str, raw: str) -> None:
        from odradek.broker.security.settings import is_security_key

        if is_kafka_broker_key(name):
            if is_security_key(name):
                self.security_props[name] = raw
            self.unused[name] = raw  # until a secured listener reads it
            return
        known = sorted(KAFKA_BROKER_CONFIG_NAMES | PLUGIN_KEYS | KEYS.keys())
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown config key {name!r}{hint}")

    def get(self, name: str) -> Any:
        return self._values[name]

    def is_default(self, name: str) -> bool:
        return name not in self.originals

    # Derived settings -------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        node_id = self._values["node.id"]
        return node_id if node_id >= 0 else self._values["broker.id"]

    @property
    def data_dir(self) -> Path:
        dirs = self._values["log.dirs"] or self._values["log.dir"]
        first = dirs.split(",")[0].strip()
        if "," in dirs:
            # One log dir per broker keeps the checkpoint files simple; scale out with brokers.
            raise ConfigError("log.dirs: only one data directory per broker is supported")
        return Path(first)

    @property
    def listeners(self) -> list[Endpoint]:
        """Every listener to bind, validated (see :mod:`odradek.broker.listeners`)."""
        protocols = parse_protocol_map(self._values["listener.security.protocol.map"])
        return parse_listeners(self._values["listeners"], protocols)

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        """What clients are told, one per listener in the order of ``listeners``."""
        protocols = parse_protocol_map(self._values["listener.security.protocol.map"])
        return parse_advertised(self._values["advertised.listeners"], protocols, self.listeners)

    @property
    def listener(self) -> tuple[str, int]:
        """Host and port of the first listener."""
        first = self.listeners[0]
        return first.host or "0.0.0.0", first.port

    @property
    def advertised_listener(self) -> tuple[str, int]:
        first = self.advertised_listeners[0]
        return first.host or "0.0.0.0", first.port

    @property
    def zookeeper_connect(self) -> str:
        return self._values["zookeeper.connect"]

    def _check_broker_id(self) -> None:
        # -1 means "generate one", which only a ZooKeeper cluster can do (Kafka refuses it
        # too when generation is off or there is nothing to generate it from).
        if self.broker_id >= 0:
            return
        if not self.zookeeper_connect:
            raise ConfigError("broker.id: must be at least 0 without zookeeper.connect")
        if not self._values["broker.id.generation.enable"]:
            raise ConfigError("broker.id: -1 needs broker.id.generation.enable=true")

    def _check_listeners(self) -> None:
        self.advertised_listeners  # noqa: B018 - validates listeners too, on construction
        used: set[str] = set()
        self.listener_security(used)  # TLS files load, SASL mechanisms are supported
        self.inter_broker = self._inter_broker_security(used)
        for name in used:
            self.unused.pop(name, None)

    def _inter_broker_security(self, used: set[str]) -> Any:
        """How this broker reaches the others (:mod:`odradek.broker.security.inter_broker`);
        None for a lone broker without its default PLAINTEXT inter-broker listener."""
        from odradek.broker.security.inter_broker import inter_broker_security

        given = {**self.unused, **self.security_props, **self.originals}
        return inter_broker_security(
            given,
            self.advertised_listeners,
            parse_protocol_map(self._values["listener.security.protocol.map"]),
            cluster=bool(self.zookeeper_connect),
            used=used,
        )

    def listener_security(self, used: set[str] | None = None) -> dict[str, Any]:
        """Each secured listener's settings (:mod:`odradek.broker.security.settings`)."""
        from odradek.broker.security.settings import listener_security

        return {
            endpoint.name: listener_security(
                endpoint.name, endpoint.protocol, self.security_props, used
            )
            for endpoint in self.listeners
            if endpoint.protocol != "PLAINTEXT"
        }

    def _check_network(self) -> None:
        # Kafka's own cross-key checks (KafkaConfig.validateValues).
        queued = self._values["queued.max.request.bytes"]
        if 0 < queued < self._values["socket.request.max.bytes"]:
            raise ConfigError(
                f"queued.max.request.bytes ({queued}) must be larger or equal to "
                f"socket.request.max.bytes ({self._values['socket.request.max.bytes']})"
            )
        if self._values["max.connections.per.ip"] == 0 and not parse_ip_overrides(
            self._values["max.connections.per.ip.overrides"]
        ):
            raise ConfigError(
                "max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides is set"
            )

    def topic_defaults(self) -> dict[str, str]:
        """The topic-level config defaults this broker's ``log.*`` keys imply."""
        out: dict[str, str] = {}
        for key in _KEYS:
            value = self._values[key.name]
            if key.topic_key is None or value is None:
                continue
            out[key.topic_key] = _to_text(value)
        out["retention.ms"] = str(self._retention_ms())
        out["segment.ms"] = str(
            self._values["log.roll.ms"]
            if self._values["log.roll.ms"] is not None
            else self._values["log.roll.hours"] * 3600_000
        )
        if self._values["log.flush.interval.ms"] is None:
            out["flush.ms"] = str(LONG_MAX)
        return out

    def _retention_ms(self) -> int:
        if self._values["log.retention.ms"] is not None:
            return self._values["log.retention.ms"]
        if self._values["log.retention.minutes"] is not None:
            return self._values["log.retention.minutes"] * 60_000
        return self._values["log.retention.hours"] * 3600_000

    def describe(self) -> list[tuple[ConfigKey, str | None]]:
        """Every key with its current value as text, for DescribeConfigs on the broker."""
        return [
            (key, None if self._values[key.name] is None else _to_text(self._values[key.name]))
            for key in _KEYS
        ]


def _to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
