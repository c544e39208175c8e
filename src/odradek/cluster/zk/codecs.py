"""The bytes of each znode, exactly as Kafka 3.x writes them.

Mirrors the ``encode``/``decode`` pairs of ``core/src/main/scala/kafka/zk/ZkData.scala``
(Kafka 3.9): compact JSON (Jackson writes no spaces), the same keys and ``version``
numbers, timestamps as strings of milliseconds, the controller epoch as a bare decimal.
A Kafka broker or tool pointed at the same ZooKeeper reads what odradek writes and the
other way round.

Decoding is strict: anything that is not what Kafka would have written (bad JSON, a
missing key, a wrong type, a bool where an int belongs) raises :class:`ZNodeDecodeError`
naming the znode and the problem, never a ``KeyError`` or ``TypeError`` from deep inside.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BrokerEndpoint",
    "BrokerRegistration",
    "ControllerRegistration",
    "PartitionState",
    "ProducerIdBlock",
    "TopicAssignment",
    "ZNodeDecodeError",
    "random_kafka_uuid",
]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Kafka's default listener-name -> protocol map when a registration has none.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's EndPoint.uriParseExp: LISTENER://host:port, host maybe [ipv6] or empty.
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)$")


class ZNodeDecodeError(ValueError):
    """A znode's data is not in the format Kafka writes; ``what`` names the znode kind."""

    def __init__(self, what: str, problem: str, data: bytes | None = None) -> None:
        shown = "" if data is None else f": {data[:200]!r}"
        super().__init__(f"malformed {what} znode ({problem}){shown}")
        self.what = what
        self.problem = problem


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class _Decoder:
    """Typed access to one parsed znode; every failure is a ZNodeDecodeError."""

    def __init__(self, what: str, data: bytes | None) -> None:
        self.what = what
        self.data = data
        if data is None:
            self.fail("no data")
        try:
            self.root = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            self.fail(f"not JSON: {exc}")

    def fail(self, problem: str) -> Any:
        raise ZNodeDecodeError(self.what, problem, self.data)

    def obj(self, value: Any = None, name: str = "top level") -> dict[str, Any]:
        value = self.root if value is None else value
        if not isinstance(value, dict):
            self.fail(f"{name} is not a JSON object")
        return value

    def get(self, obj: Mapping[str, Any], key: str) -> Any:
        if key not in obj:
            self.fail(f"missing {key!r}")
        return obj[key]

    def integer(self, value: Any, name: str, low: int = INT32_MIN, high: int = INT32_MAX) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{name} is not an integer")
        if not low <= value <= high:
            self.fail(f"{name} {value} is out of range")
        return value

    def string(self, value: Any, name: str) -> str:
        if not isinstance(value, str):
            self.fail(f"{name} is not a string")
        return value

    def int_list(self, value: Any, name: str) -> list[int]:
        if not isinstance(value, list):
            self.fail(f"{name} is not a JSON array")
        return [self.integer(item, f"{name} element") for item in value]

    def version(self, obj: Mapping[str, Any], expected: Iterable[int]) -> int:
        version = self.integer(self.get(obj, "version"), "version")
        allowed = tuple(expected)
        if version not in allowed:
            self.fail(f"unsupported version {version}, expected one of {allowed}")
        return version

    def topic_partitions(self, obj: Mapping[str, Any], extra: tuple[str, ...] = ()) -> list[dict]:
        items = self.get(obj, "partitions")
        if not isinstance(items, list):
            self.fail("partitions is not a JSON array")
        out = []
        for item in items:
            entry = self.obj(item, "partition entry")
            decoded = {
                "topic": self.string(self.get(entry, "topic"), "topic"),
                "partition": self.integer(self.get(entry, "partition"), "partition", 0),
            }
            for key in extra:
                decoded[key] = self.int_list(self.get(entry, key), key)
            out.append(decoded)
        return out


# --- /brokers/ids/<id> (BrokerIdZNode, version 5) -------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    listener: str
    host: str
    port: int
    security_protocol: str

    @property
    def connection_string(self) -> str:
        # Kafka's EndPoint.connectionString: brackets around IPv6 hosts.
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    # feature name -> (min_version, max_version), as SupportedVersionRange
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    version: int = 5

    def encode(self) -> bytes:
        # The top-level host/port are the first PLAINTEXT endpoint, or null/-1 (older
        # clients that only speak PLAINTEXT read them).
        plaintext = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        body: dict[str, Any] = {
            "features": {
                name: {"min_version": low, "max_version": high}
                for name, (low, high) in self.features.items()
            },
            "listener_security_protocol_map": {
                e.listener: e.security_protocol for e in self.endpoints
            },
            "endpoints": [e.connection_string for e in self.endpoints],
            "jmx_port": self.jmx_port,
            "port": plaintext.port if plaintext else -1,
            "host": plaintext.host if plaintext else None,
            "version": self.version,
            "timestamp": str(self.timestamp_ms),
        }
        if self.rack is not None:
            body["rack"] = self.rack
        return _dumps(body)

    @classmethod
    def decode(cls, broker_id: int, data: bytes | None) -> BrokerRegistration:
        d = _Decoder(f"broker registration /brokers/ids/{broker_id}", data)
        obj = d.obj()
        version = d.version(obj, range(1, 6))
        jmx_port = d.integer(d.get(obj, "jmx_port"), "jmx_port")
        if version == 1:
            host = d.string(d.get(obj, "host"), "host")
            port = d.integer(d.get(obj, "port"), "port", -1, 65535)
            endpoints: tuple[BrokerEndpoint, ...] = (
                BrokerEndpoint("PLAINTEXT", host, port, "PLAINTEXT"),
            )
        else:
            raw_map = obj.get("listener_security_protocol_map")
            if raw_map is None:
                protocols = {name: name for name in SECURITY_PROTOCOLS}
            else:
                protocols = {
                    d.string(k, "listener name"): d.string(v, "security protocol")
                    for k, v in d.obj(raw_map, "listener_security_protocol_map").items()
                }
            raw_endpoints = d.get(obj, "endpoints")
            if not isinstance(raw_endpoints, list):
                d.fail("endpoints is not a JSON array")
            parsed = []
            for raw in raw_endpoints:
                match = _ENDPOINT.match(d.string(raw, "endpoint"))
                if match is None:
                    d.fail(f"endpoint {raw!r} is not LISTENER://host:port")
                listener, host, port = match.group(1), match.group(2), int(match.group(3))
                if listener not in protocols:
                    d.fail(f"listener {listener!r} has no security protocol")
                parsed.append(BrokerEndpoint(listener, host, port, protocols[listener]))
            endpoints = tuple(parsed)
        rack = obj.get("rack")
        if rack is not None:
            rack = d.string(rack, "rack")
        timestamp = obj.get("timestamp", "0")
        if not isinstance(timestamp, str) or not timestamp.lstrip("-").isdigit():
            d.fail("timestamp is not a decimal string")
        features: dict[str, tuple[int, int]] = {}
        for name, ranges in d.obj(obj.get("features", {}), "features").items():
            ranges = d.obj(ranges, f"feature {name}")
            features[name] = (
                d.integer(d.get(ranges, "min_version"), "min_version", -(2**15), 2**15 - 1),
                d.integer(d.get(ranges, "max_version"), "max_version", -(2**15), 2**15 - 1),
            )
        return cls(broker_id, endpoints, rack, jmx_port, int(timestamp), features, version)


# --- /controller and /controller_epoch ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    broker_id: int
    timestamp_ms: int = 0
    kraft_controller_epoch: int = -1  # -1: a ZooKeeper controller (KIP-866 migrations)

    def encode(self) -> bytes:
        return _dumps(
            {
                "version": 2,
                "brokerid": self.broker_id,
                "timestamp": str(self.timestamp_ms),
                "kraftControllerEpoch": self.kraft_controller_epoch,
            }
        )

    @classmethod
    def decode(cls, data: bytes | None) -> ControllerRegistration:
        d = _Decoder("controller /controller", data)
        obj = d.obj()
        d.version(obj, (1, 2))
        broker = d.integer(d.get(obj, "brokerid"), "brokerid")
        timestamp = obj.get("timestamp", "0")
        if not isinstance(timestamp, str) or not timestamp.lstrip("-").isdigit():
            d.fail("timestamp is not a decimal string")
        kraft_epoch = d.integer(obj.get("kraftControllerEpoch", -1), "kraftControllerEpoch")
        return cls(broker, int(timestamp), kraft_epoch)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    what = "controller epoch /controller_epoch"
    if data is None:
        raise ZNodeDecodeError(what, "no data")
    text = data.decode("ascii", "replace")
    if not text.isdigit() and not (text.startswith("-") and text[1:].isdigit()):
        raise ZNodeDecodeError(what, "not a decimal integer", data)
    value = int(text)
    if not INT32_MIN <= value <= INT32_MAX:
        raise ZNodeDecodeError(what, "out of range", data)
    return value


# --- /brokers/topics/<topic> (TopicZNode, version 3) ----------------------------------


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    partitions: Mapping[int, tuple[int, ...]]  # partition -> replicas, preferred first
    topic_id: str | None = None  # Kafka's Uuid string (22 chars of URL-safe base64)
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "version": 3,
            "partitions": {str(p): list(r) for p, r in self.partitions.items()},
            "adding_replicas": {str(p): list(r) for p, r in self.adding_replicas.items() if r},
            "removing_replicas": {str(p): list(r) for p, r in self.removing_replicas.items() if r},
        }
        if self.topic_id is not None:
            body["topic_id"] = self.topic_id
        return _dumps(body)

    @classmethod
    def decode(cls, topic: str, data: bytes | None) -> TopicAssignment:
        d = _Decoder(f"topic assignment /brokers/topics/{topic}", data)
        obj = d.obj()
        d.version(obj, (1, 2, 3))

        def replica_map(key: str, required: bool) -> dict[int, tuple[int, ...]]:
            raw = d.get(obj, key) if required else obj.get(key, {})
            out = {}
            for name, replicas in d.obj(raw, key).items():
                if not name.isdigit():
                    d.fail(f"{key} has partition {name!r}, not a number")
                out[int(name)] = tuple(d.int_list(replicas, f"{key}[{name}]"))
            return out

        topic_id = obj.get("topic_id")
        if topic_id is not None:
            topic_id = d.string(topic_id, "topic_id")
            try:
                parse_kafka_uuid(topic_id)
            except ValueError as exc:
                d.fail(str(exc))
        return cls(
            replica_map("partitions", True),
            topic_id,
            replica_map("adding_replicas", False),
            replica_map("removing_replicas", False),
        )


# --- /brokers/topics/<t>/partitions/<p>/state (TopicPartitionStateZNode) --------------


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leader, ISR and epochs of one partition; the znode's version is kept beside it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING (after unclean election)

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": 1,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state != 0:  # Kafka writes it only when not RECOVERED
            body["leader_recovery_state"] = self.leader_recovery_state
        return _dumps(body)

    @classmethod
    def decode(cls, data: bytes | None, what: str = "partition state") -> PartitionState:
        d = _Decoder(what, data)
        obj = d.obj()
        d.version(obj, (1,))
        recovery = d.integer(obj.get("leader_recovery_state", 0), "leader_recovery_state")
        if recovery not in (0, 1):
            d.fail(f"leader_recovery_state {recovery} is neither 0 nor 1")
        return cls(
            leader=d.integer(d.get(obj, "leader"), "leader"),
            leader_epoch=d.integer(d.get(obj, "leader_epoch"), "leader_epoch"),
            isr=tuple(d.int_list(d.get(obj, "isr"), "isr")),
            controller_epoch=d.integer(d.get(obj, "controller_epoch"), "controller_epoch"),
            leader_recovery_state=recovery,
        )


# --- /config/<type>/<name> and /config/changes/config_change_<seq> --------------------


def encode_config_entity(config: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(config)})


def decode_config_entity(data: bytes | None, what: str = "config entity") -> dict[str, str]:
    d = _Decoder(what, data)
    obj = d.obj()
    d.version(obj, (1,))
    config = d.obj(d.get(obj, "config"), "config")
    return {key: d.string(value, f"config value of {key!r}") for key, value in config.items()}


def encode_config_change(entity_path: str) -> bytes:
    """``entity_path`` is ``<type>/<sanitized name>``, e.g. ``topics/orders``."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes | None) -> str:
    d = _Decoder("config change notification", data)
    obj = d.obj()
    d.version(obj, (2,))
    entity_path = d.string(d.get(obj, "entity_path"), "entity_path")
    entity_type, slash, name = entity_path.partition("/")
    if not slash or not entity_type or not name:
        d.fail(f"entity_path {entity_path!r} is not <type>/<name>")
    return entity_path


# --- /admin/... and /isr_change_notification/isr_change_<seq> ------------------------

TopicPartition = tuple[str, int]


def _partition_list(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in sorted(partitions)]


def encode_isr_change(partitions: Iterable[TopicPartition]) -> bytes:
    return _dumps({"version": 1, "partitions": _partition_list(partitions)})


def decode_isr_change(data: bytes | None) -> set[TopicPartition]:
    d = _Decoder("ISR change notification", data)
    obj = d.obj()
    d.version(obj, (1,))
    return {(e["topic"], e["partition"]) for e in d.topic_partitions(obj)}


def encode_preferred_replica_election(partitions: Iterable[TopicPartition]) -> bytes:
    return _dumps({"version": 1, "partitions": _partition_list(partitions)})


def decode_preferred_replica_election(data: bytes | None) -> set[TopicPartition]:
    d = _Decoder("preferred replica election /admin/preferred_replica_election", data)
    obj = d.obj()
    d.version(obj, (1,))
    return {(e["topic"], e["partition"]) for e in d.topic_partitions(obj)}


def encode_reassignment(reassignment: Mapping[TopicPartition, Iterable[int]]) -> bytes:
    partitions = [
        {"topic": t, "partition": p, "replicas": list(reassignment[(t, p)])}
        for t, p in sorted(reassignment)
    ]
    return _dumps({"version": 1, "partitions": partitions})


def decode_reassignment(data: bytes | None) -> dict[TopicPartition, tuple[int, ...]]:
    d = _Decoder("partition reassignment /admin/reassign_partitions", data)
    obj = d.obj()
    d.version(obj, (1,))
    return {
        (e["topic"], e["partition"]): tuple(e["replicas"])
        for e in d.topic_partitions(obj, extra=("replicas",))
    }


# --- /cluster/id ----------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})  # Kafka writes the version as a string


def decode_cluster_id(data: bytes | None) -> str:
    d = _Decoder("cluster id /cluster/id", data)
    obj = d.obj()
    cluster_id = d.string(d.get(obj, "id"), "id")
    if not cluster_id:
        d.fail("id is empty")
    return cluster_id


# --- /latest_producer_id_block -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """The last block of producer ids handed to a broker (Kafka's ProducerIdsBlock):
    ``first`` .. ``last`` inclusive. Kafka writes the two bounds as strings (they are
    longs) and version 1 as a number."""

    broker_id: int
    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def encode(self) -> bytes:
        return _dumps(
            {
                "version": 1,
                "broker": self.broker_id,
                "block_start": str(self.first),
                "block_end": str(self.last),
            }
        )

    @classmethod
    def decode(cls, data: bytes | None) -> ProducerIdBlock:
        d = _Decoder("producer id block /latest_producer_id_block", data)
        obj = d.obj()
        d.version(obj, (1,))
        broker = d.integer(d.get(obj, "broker"), "broker")
        bounds = []
        for key in ("block_start", "block_end"):
            text = d.string(d.get(obj, key), key)
            if not re.fullmatch(r"-?[0-9]+", text):
                d.fail(f"{key} {text!r} is not a decimal number")
            bounds.append(int(text))
        first, last = bounds
        if not 0 <= first <= last < 2**63:
            d.fail(f"block {first}..{last} is not a block of producer ids")
        return cls(broker, first, last)


# --- Kafka's Uuid ---------------------------------------------------------------------


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a 22-character Kafka Uuid")
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{text!r} is not a Kafka Uuid: {exc}") from None


def random_kafka_uuid() -> str:
    """Kafka's Uuid.randomUuid: a random UUID, never the reserved zero or one Uuid and
    never a string starting with '-' (it would read as a command-line option)."""
    while True:
        value = uuid.uuid4()
        text = kafka_uuid_string(value)
        if value.int > 1 and not text.startswith("-"):
            return text
