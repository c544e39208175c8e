"""The ZooKeeper-era controller -> broker RPCs that kio 0.6.5 no longer has.

kio is generated from Kafka 4.x, which dropped LeaderAndIsr (4), StopReplica (5),
UpdateMetadata (6) and ControlledShutdown (7). Their field layouts are written down
here as Python data mirroring Kafka 3.9's message schemas
(``clients/src/main/resources/common/message/{LeaderAndIsr,StopReplica,UpdateMetadata,
ControlledShutdown}{Request,Response}.json`` in apache/kafka): the same field names,
types, version ranges, defaults and tags. From them this module makes frozen
dataclasses of exactly kio's shape, one set per (API, version, request/response), so
odradek's schema-walking reader (:func:`odradek.protocol.lenient.read_entity`), kio's
encoder (``kio.serial.entity_writer``) and :func:`odradek.protocol.build.build` all work
on them unchanged. Field names, types, optionality, tags and defaults were compared, for
every version, with the classes kio 0.5.0 generated for these APIs (it still had them):
they agree except that kio 0.5.0 also gives broker-id arrays an empty default, which
does not change a byte on the wire.

These APIs are not in the advertised version table: nothing handles them yet.
"""

from __future__ import annotations

import dataclasses
import io
import re
import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

from odradek.protocol.lenient import read_entity

__all__ = [
    "CONTROLLED_SHUTDOWN",
    "INTERBROKER_VERSIONS",
    "LEADER_AND_ISR",
    "STOP_REPLICA",
    "UPDATE_METADATA",
    "decode_request_body",
    "decode_response_body",
    "encode_body",
    "is_flexible",
    "request_class",
    "request_header_version",
    "response_class",
]

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7


_NO_DEFAULT: Any = object()


@dataclass(frozen=True)
class F:
    """One field, as in Kafka's JSON: ``versions`` and ``nullable`` are ranges "a-b"/"a+"."""

    name: str
    type: str  # int8..int64, bool, string, uuid, []int32, []<Struct>
    versions: str
    nullable: str | None = None
    default: Any = _NO_DEFAULT  # the JSON's default, when it gives one
    tag: int | None = None
    fields: tuple[F, ...] = ()  # an inline struct's fields


@dataclass(frozen=True)
class Schema:
    name: str
    api_key: int
    valid: tuple[int, int]
    flexible_from: int
    fields: tuple[F, ...]
    common: dict[str, tuple[F, ...]] = dataclasses.field(default_factory=dict)


# --- LeaderAndIsr (Kafka 3.9: LeaderAndIsrRequest.json / LeaderAndIsrResponse.json) ---

_LEADER_AND_ISR_PARTITION_STATE = (
    F("TopicName", "string", "0-1"),
    F("PartitionIndex", "int32", "0+"),
    F("ControllerEpoch", "int32", "0+"),
    F("Leader", "int32", "0+"),
    F("LeaderEpoch", "int32", "0+"),
    F("Isr", "[]int32", "0+"),
    F("PartitionEpoch", "int32", "0+"),
    F("Replicas", "[]int32", "0+"),
    F("AddingReplicas", "[]int32", "3+"),
    F("RemovingReplicas", "[]int32", "3+"),
    F("IsNew", "bool", "1+", default=False),
    F("LeaderRecoveryState", "int8", "6+", default=0),
)

LEADER_AND_ISR_REQUEST = Schema(
    "LeaderAndIsrRequest",
    LEADER_AND_ISR,
    (0, 7),
    4,
    (
        F("ControllerId", "int32", "0+"),
        F("isKRaftController", "bool", "7+", default=False),
        F("ControllerEpoch", "int32", "0+"),
        F("BrokerEpoch", "int64", "2+", default=-1),
        F("Type", "int8", "5+"),
        F("UngroupedPartitionStates", "[]LeaderAndIsrPartitionState", "0-1"),
        F(
            "TopicStates",
            "[]LeaderAndIsrTopicState",
            "2+",
            fields=(
                F("TopicName", "string", "2+"),
                F("TopicId", "uuid", "5+"),
                F("PartitionStates", "[]LeaderAndIsrPartitionState", "2+"),
            ),
        ),
        F(
            "LiveLeaders",
            "[]LeaderAndIsrLiveLeader",
            "0+",
            fields=(
                F("BrokerId", "int32", "0+"),
                F("HostName", "string", "0+"),
                F("Port", "int32", "0+"),
            ),
        ),
    ),
    {"LeaderAndIsrPartitionState": _LEADER_AND_ISR_PARTITION_STATE},
)

LEADER_AND_ISR_RESPONSE = Schema(
    "LeaderAndIsrResponse",
    LEADER_AND_ISR,
    (0, 7),
    4,
    (
        F("ErrorCode", "int16", "0+"),
        F("PartitionErrors", "[]LeaderAndIsrPartitionError", "0-4"),
        F(
            "Topics",
            "[]LeaderAndIsrTopicError",
            "5+",
            fields=(
                F("TopicId", "uuid", "5+"),
                F("PartitionErrors", "[]LeaderAndIsrPartitionError", "5+"),
            ),
        ),
    ),
    {
        "LeaderAndIsrPartitionError": (
            F("TopicName", "string", "0-4"),
            F("PartitionIndex", "int32", "0+"),
            F("ErrorCode", "int16", "0+"),
        )
    },
)

# --- StopReplica (StopReplicaRequest.json / StopReplicaResponse.json) -----------------

STOP_REPLICA_REQUEST = Schema(
    "StopReplicaRequest",
    STOP_REPLICA,
    (0, 4),
    2,
    (
        F("ControllerId", "int32", "0+"),
        F("isKRaftController", "bool", "4+", default=False),
        F("ControllerEpoch", "int32", "0+"),
        F("BrokerEpoch", "int64", "1+", default=-1),
        F("DeletePartitions", "bool", "0-2"),
        F(
            "UngroupedPartitions",
            "[]StopReplicaPartitionV0",
            "0",
            fields=(F("TopicName", "string", "0"), F("PartitionIndex", "int32", "0")),
        ),
        F(
            "Topics",
            "[]StopReplicaTopicV1",
            "1-2",
            fields=(F("Name", "string", "1-2"), F("PartitionIndexes", "[]int32", "1-2")),
        ),
        F(
            "TopicStates",
            "[]StopReplicaTopicState",
            "3+",
            fields=(
                F("TopicName", "string", "3+"),
                F(
                    "PartitionStates",
                    "[]StopReplicaPartitionState",
                    "3+",
                    fields=(
                        F("PartitionIndex", "int32", "3+"),
                        F("LeaderEpoch", "int32", "3+", default=-1),
                        F("DeletePartition", "bool", "3+"),
                    ),
                ),
            ),
        ),
    ),
)

STOP_REPLICA_RESPONSE = Schema(
    "StopReplicaResponse",
    STOP_REPLICA,
    (0, 4),
    2,
    (
        F("ErrorCode", "int16", "0+"),
        F(
            "PartitionErrors",
            "[]StopReplicaPartitionError",
            "0+",
            fields=(
                F("TopicName", "string", "0+"),
                F("PartitionIndex", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
            ),
        ),
    ),
)

# --- UpdateMetadata (UpdateMetadataRequest.json / UpdateMetadataResponse.json) --------

UPDATE_METADATA_REQUEST = Schema(
    "UpdateMetadataRequest",
    UPDATE_METADATA,
    (0, 8),
    6,
    (
        F("ControllerId", "int32", "0+"),
        F("isKRaftController", "bool", "8+", default=False),
        F("Type", "int8", "8+", default=0, tag=0),
        F("ControllerEpoch", "int32", "0+"),
        F("BrokerEpoch", "int64", "5+", default=-1),
        F("UngroupedPartitionStates", "[]UpdateMetadataPartitionState", "0-4"),
        F(
            "TopicStates",
            "[]UpdateMetadataTopicState",
            "5+",
            fields=(
                F("TopicName", "string", "5+"),
                F("TopicId", "uuid", "7+"),
                F("PartitionStates", "[]UpdateMetadataPartitionState", "5+"),
            ),
        ),
        F(
            "LiveBrokers",
            "[]UpdateMetadataBroker",
            "0+",
            fields=(
                F("Id", "int32", "0+"),
                F("V0Host", "string", "0"),
                F("V0Port", "int32", "0"),
                F(
                    "Endpoints",
                    "[]UpdateMetadataEndpoint",
                    "1+",
                    fields=(
                        F("Port", "int32", "1+"),
                        F("Host", "string", "1+"),
                        F("Listener", "string", "3+"),
                        F("SecurityProtocol", "int16", "1+"),
                    ),
                ),
                F("Rack", "string", "2+", nullable="0+"),
            ),
        ),
    ),
    {
        "UpdateMetadataPartitionState": (
            F("TopicName", "string", "0-4"),
            F("PartitionIndex", "int32", "0+"),
            F("ControllerEpoch", "int32", "0+"),
            F("Leader", "int32", "0+"),
            F("LeaderEpoch", "int32", "0+"),
            F("Isr", "[]int32", "0+"),
            F("ZkVersion", "int32", "0+"),
            F("Replicas", "[]int32", "0+"),
            F("OfflineReplicas", "[]int32", "4+"),
        )
    },
)

UPDATE_METADATA_RESPONSE = Schema(
    "UpdateMetadataResponse", UPDATE_METADATA, (0, 8), 6, (F("ErrorCode", "int16", "0+"),)
)

# --- ControlledShutdown (ControlledShutdownRequest.json / ...Response.json) -----------

CONTROLLED_SHUTDOWN_REQUEST = Schema(
    "ControlledShutdownRequest",
    CONTROLLED_SHUTDOWN,
    (0, 3),
    3,
    (F("BrokerId", "int32", "0+"), F("BrokerEpoch", "int64", "2+", default=-1)),
)

CONTROLLED_SHUTDOWN_RESPONSE = Schema(
    "ControlledShutdownResponse",
    CONTROLLED_SHUTDOWN,
    (0, 3),
    3,
    (
        F("ErrorCode", "int16", "0+"),
        F(
            "RemainingPartitions",
            "[]RemainingPartition",
            "0+",
            fields=(F("TopicName", "string", "0+"), F("PartitionIndex", "int32", "0+")),
        ),
    ),
)

_SCHEMAS: dict[tuple[int, EntityType], Schema] = {
    (s.api_key, kind): s
    for s, kind in (
        (LEADER_AND_ISR_REQUEST, EntityType.request),
        (LEADER_AND_ISR_RESPONSE, EntityType.response),
        (STOP_REPLICA_REQUEST, EntityType.request),
        (STOP_REPLICA_RESPONSE, EntityType.response),
        (UPDATE_METADATA_REQUEST, EntityType.request),
        (UPDATE_METADATA_RESPONSE, EntityType.response),
        (CONTROLLED_SHUTDOWN_REQUEST, EntityType.request),
        (CONTROLLED_SHUTDOWN_RESPONSE, EntityType.response),
    )
}

INTERBROKER_VERSIONS: dict[int, tuple[int, int]] = {
    LEADER_AND_ISR: LEADER_AND_ISR_REQUEST.valid,
    STOP_REPLICA: STOP_REPLICA_REQUEST.valid,
    UPDATE_METADATA: UPDATE_METADATA_REQUEST.valid,
    CONTROLLED_SHUTDOWN: CONTROLLED_SHUTDOWN_REQUEST.valid,
}
"""Kafka 3.9's version ranges of these APIs (not advertised by odradek yet)."""


# --- from schema data to kio-shaped dataclasses ----------------------------------------

_SCALARS: dict[str, tuple[type, str]] = {
    "int8": (i8, "int8"),
    "int16": (i16, "int16"),
    "int32": (i32, "int32"),
    "int64": (i64, "int64"),
    "bool": (bool, "bool"),
    "string": (str, "string"),
    "uuid": (uuid.UUID, "uuid"),
}


def _in_range(spec: str | None, version: int) -> bool:
    if spec is None:
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


def _snake(name: str) -> str:
    # kio's field names: KafkaCase -> snake_case (isKRaftController -> is_kraft_controller).
    # kio's field names (isKRaftController -> is_k_raft_controller), with a trailing "_"
    # where the name would shadow a builtin (Id -> id_, Type -> type_).
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return f"{snake}_" if snake in ("id", "type") else snake


def _build_class(
    schema: Schema,
    name: str,
    fields: tuple[F, ...],
    version: int,
    entity_type: EntityType,
    made: dict[str, type],
) -> type:
    flexible = version >= schema.flexible_from
    specs: list[tuple[str, Any, dataclasses.Field]] = []
    for spec in fields:
        if not _in_range(spec.versions, version):
            continue
        nullable = _in_range(spec.nullable, version)
        metadata: dict[str, Any] = {}
        if spec.type.startswith("[]"):
            element = spec.type[2:]
            if element in _SCALARS:
                inner, kafka_type = _SCALARS[element]
                metadata["kafka_type"] = kafka_type
            else:
                struct_fields = spec.fields or schema.common[element]
                if element not in made:
                    made[element] = _build_class(
                        schema, element, struct_fields, version, EntityType.nested, made
                    )
                inner = made[element]
            annotation: Any = tuple[inner, ...]  # type: ignore[valid-type]
        elif spec.name == "ErrorCode" and spec.type == "int16":
            annotation, metadata["kafka_type"] = ErrorCode, "error_code"  # as kio does
        else:
            annotation, metadata["kafka_type"] = _SCALARS[spec.type]
        if nullable or spec.type == "uuid":
            annotation = annotation | None  # kio types every uuid as optional
        tagged = spec.tag is not None and flexible
        if tagged:
            metadata["tag"] = spec.tag
        if spec.default is not _NO_DEFAULT:
            field = dataclasses.field(metadata=metadata, default=_typed(annotation, spec.default))
        else:
            field = dataclasses.field(metadata=metadata)
        specs.append((_snake(spec.name), annotation, field))
    if entity_type is EntityType.request:
        header = RequestHeaderV2 if flexible else RequestHeaderV1
    else:
        header = ResponseHeaderV1 if flexible else ResponseHeaderV0
    namespace = {
        "__type__": entity_type,
        "__version__": i16(version),
        "__flexible__": flexible,
        "__api_key__": i16(schema.api_key),
        "__header_schema__": header,
    }
    cls = dataclasses.make_dataclass(
        name, specs, namespace=namespace, frozen=True, slots=True, kw_only=True
    )
    cls.__module__ = __name__
    return cls


def _typed(annotation: Any, value: Any) -> Any:
    return annotation(value) if annotation in (i8, i16, i32, i64) else value


@cache
def _entity(api_key: int, version: int, entity_type: EntityType) -> type:
    schema = _SCHEMAS.get((api_key, entity_type))
    if schema is None:
        raise LookupError(f"no interbroker schema for API key {api_key}")
    low, high = schema.valid
    if not low <= version <= high:
        raise LookupError(f"{schema.name} has versions {low}..{high}, not {version}")
    return _build_class(schema, schema.name, schema.fields, version, entity_type, {})


def request_class(api_key: int, version: int) -> type:
    """The request dataclass of ``api_key`` at ``version`` (LookupError if none)."""
    return _entity(api_key, version, EntityType.request)


def response_class(api_key: int, version: int) -> type:
    return _entity(api_key, version, EntityType.response)


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


def request_header_version(api_key: int, version: int) -> int:
    """ControlledShutdown v0 alone uses request header v0 (no client id), as in Kafka's
    schema comment; the rest use v1, or v2 when flexible."""
    if api_key == CONTROLLED_SHUTDOWN and version == 0:
        return 0
    return 2 if is_flexible(api_key, version) else 1


def encode_body(entity: Any) -> bytes:
    """The body bytes of a request or response entity (no header, no size prefix)."""
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def decode_request_body(api_key: int, version: int, payload: bytes | memoryview) -> Any:
    """Read a request body with the schema-walking reader; trailing bytes are ignored, as
    Kafka does. Malformed input raises what ``read_entity`` raises."""
    return read_entity(request_class(api_key, version), _readonly(payload), 0)[0]


def decode_response_body(api_key: int, version: int, payload: bytes | memoryview) -> Any:
    return read_entity(response_class(api_key, version), _readonly(payload), 0)[0]


def _readonly(payload: bytes | memoryview) -> bytes | memoryview:
    if isinstance(payload, memoryview) and not payload.readonly:
        return payload.toreadonly()
    return payload
