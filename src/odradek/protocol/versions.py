"""The one table of Kafka API versions odradek advertises and decodes.

``SUPPORTED`` maps an API key to the inclusive ``(min, max)`` version range that odradek
answers in ApiVersions and accepts on the wire. The broker serves a subset of it:
``advertised(enabled_api_keys)`` restricts the table to the APIs that have a handler, so a
client never sees an API nobody answers.

How the ranges were chosen (see /work/shared/FACTS.md for what each client sends):

* Every range includes non-flexible versions, because aiokafka 0.14 implements none of the
  flexible ones: it picks the highest version it knows inside our range and fails when there
  is no overlap.
* Produce starts at 3 and Fetch at 4: those are the first versions that carry record batch
  v2, the only message format odradek stores. librdkafka requires exactly these minima.
* Nothing that needs topic ids is advertised, because odradek names topics only by name:
  Fetch stops at 12 (13 replaces the topic name with a topic id), Metadata at 9 (10 starts
  returning topic ids, 12 accepts them), CreateTopics at 6 (7 returns the new topic's id),
  DeleteTopics at 5 (6 deletes by id), Produce at 11 (12 is the KIP-890 "transactions v2"
  implicit AddPartitionsToTxn; 13 uses topic ids), OffsetCommit at 9 and OffsetFetch at 8
  (10 uses topic ids; OffsetFetch 9 carries KIP-848 member epochs).
* kafka-python 3 infers the broker release from advertised maxima (its
  ``infer_broker_version_from_api_versions``) and switches features on that guess; with
  Produce 11 it guesses 3.8, so idempotence (Metadata >= 4), fetch sessions (Fetch >= 7;
  served by odradek.broker.fetch_session) and producer epoch bumps (2.5-level maxima) are
  on. ListOffsets 7 alone would already give 3.0.
* Versions whose only change is "the client must be prepared for a new error code"
  (Produce 11, FindCoordinator 5, InitProducerId 5, AddOffsetsToTxn 4, EndTxn 4,
  TxnOffsetCommit 4: TRANSACTION_ABORTABLE, KIP-890) are included: they oblige the client,
  not the broker.
* Versions that change broker semantics beyond what odradek implements stop short:
  ListOffsets 7 (8+ are tiered-storage timestamps -4/-5/-6 and a timeout), DescribeGroups 5
  (6 changes the not-found error, KIP-1043), ListGroups 4 (5 filters by group type, KIP-848),
  DescribeCluster 1 (2 lists fenced brokers), AddPartitionsToTxn 3 (4+ is the broker-to-broker
  batched verification of KIP-890), InitProducerId 5 (6 is two-phase commit, KIP-939),
  FindCoordinator 5 (6 adds share groups).
* The minima follow kio 0.6.5 (generated from Kafka 4.x schemas, which dropped the oldest
  versions of Produce, Fetch, ListOffsets, OffsetCommit, OffsetFetch, CreateTopics,
  DeleteTopics, DescribeConfigs and OffsetForLeaderEpoch). Metadata starts at 1 because
  v0's "an empty topic list means all topics" quirk is not worth honouring; every client
  here sends 4 or newer. JoinGroup keeps 0 and 1 (Kafka 4.0 restored them for old
  librdkafka); a handler must default the rebalance timeout to the session timeout there.
* Handlers must honour the batched forms that come with the advertised versions:
  FindCoordinator >= 4 (``coordinator_keys``), LeaveGroup >= 3 (``members``), OffsetFetch
  >= 8 (``groups``), and JoinGroup >= 4 (KIP-394 MEMBER_ID_REQUIRED is allowed, not
  required).
* The ZooKeeper-era inter-broker RPCs (LeaderAndIsr 0-7, StopReplica 0-4, UpdateMetadata
  0-8, ControlledShutdown 0-3: Kafka 3.9's ranges) are decoded and encoded like every other
  API (their classes come from ``interbroker``, kio no longer has them); a broker
  advertises them only once it has handlers for them, like every other key.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from functools import cache

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map

from odradek.protocol import interbroker

# API keys by Kafka's names, for readable code elsewhere (Kafka's ApiKeys enum).
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
LEADER_AND_ISR = interbroker.LEADER_AND_ISR
STOP_REPLICA = interbroker.STOP_REPLICA
UPDATE_METADATA = interbroker.UPDATE_METADATA
CONTROLLED_SHUTDOWN = interbroker.CONTROLLED_SHUTDOWN
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
OFFSET_DELETE = 47
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 11),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    METADATA: (1, 9),
    # Controller -> broker and broker -> controller (ZooKeeper mode), Kafka 3.9's ranges.
    LEADER_AND_ISR: (0, 7),
    STOP_REPLICA: (0, 4),
    UPDATE_METADATA: (0, 8),
    CONTROLLED_SHUTDOWN: (0, 3),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 8),
    FIND_COORDINATOR: (0, 5),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 4),
    # SASL listeners (KIP-152): v0 handshake then raw tokens, v1 then SaslAuthenticate.
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 2),
    # v4 differs from v3 only in what features may report; kafka-python tries 4 first.
    API_VERSIONS: (0, 4),
    CREATE_TOPICS: (2, 6),
    DELETE_TOPICS: (1, 5),
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 5),
    # Clients use it to detect log truncation after a leader change (KIP-320); followers too.
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 4),
    END_TXN: (0, 4),
    # Broker to broker (transaction coordinator -> partition leaders); kio starts at 1.
    WRITE_TXN_MARKERS: (1, 1),
    TXN_OFFSET_COMMIT: (0, 4),
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    # kio starts at 1 (Kafka 4 dropped v0); 5 adds KIP-1066 cordoned directories.
    DESCRIBE_LOG_DIRS: (1, 4),
    CREATE_PARTITIONS: (0, 3),
    DELETE_GROUPS: (0, 2),
    # Served in cluster mode only (the controller elects); v0-2 as Kafka 3.9.
    ELECT_LEADERS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    # Cluster mode only (the controller answers); v1 is KIP-860's replication-factor
    # check, which Kafka 3.9 does not have either.
    ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    OFFSET_DELETE: (0, 0),
    # Client quotas (KIP-546); v1 is v0 with the flexible encoding.
    48: (0, 1),
    49: (0, 1),
    # KIP-554 SCRAM credential management (salted passwords come from the client).
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    DESCRIBE_CLUSTER: (0, 1),
    # Operators' views of producers and transactions (kafka-transactions.sh); kio's ranges.
    DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
    # ACL administration (kafka-acls.sh); kio starts at 1 (Kafka 4 dropped v0).
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
}
"""api_key -> (min, max) odradek advertises and decodes. Treat as read-only."""


_INTERBROKER_NAMES = {
    LEADER_AND_ISR: "LeaderAndIsr",
    STOP_REPLICA: "StopReplica",
    UPDATE_METADATA: "UpdateMetadata",
    CONTROLLED_SHUTDOWN: "ControlledShutdown",
}


def api_name(api_key: int) -> str:
    """Kafka's CamelCase name of an API key (``"ApiVersions"``), or ``"Unknown(<key>)"``."""
    if api_key in _INTERBROKER_NAMES:
        return _INTERBROKER_NAMES[api_key]
    snake = api_key_map.get(api_key)
    if snake is None:
        return f"Unknown({api_key})"
    return "".join(part.capitalize() for part in snake.split("_"))


def advertised(enabled_api_keys: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
    """The subset of ``SUPPORTED`` for the APIs that have a handler.

    ApiVersions is always included (a broker that cannot answer it is unusable). ``None``
    means every supported API. An API key not in ``SUPPORTED`` raises ``ValueError`` so a
    typo in the broker's handler table is caught at start-up rather than by a client.
    """
    if enabled_api_keys is None:
        return dict(SUPPORTED)
    keys = set(enabled_api_keys)
    unknown = sorted(keys - SUPPORTED.keys())
    if unknown:
        raise ValueError(f"API keys not in odradek's version table: {unknown}")
    keys.add(API_VERSIONS)
    return {key: SUPPORTED[key] for key in sorted(keys)}


def is_supported(
    api_key: int, api_version: int, versions: Mapping[int, tuple[int, int]] = SUPPORTED
) -> bool:
    """True when ``api_version`` of ``api_key`` is inside the given table's range."""
    bounds = versions.get(api_key)
    return bounds is not None and bounds[0] <= api_version <= bounds[1]


@cache
def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether ``api_version`` of ``api_key`` uses the flexible encoding (KIP-482).

    Flexible versions use request header v2 and response header v1 (except ApiVersions,
    whose response header is always v0), compact strings/arrays and tagged fields. Kafka
    declares flexibility as an open range ``"N+"``, so a version kio does not know (a
    client newer than kio, which is what the ApiVersions fallback must parse) has the
    flexibility of the nearest version kio knows. Unknown API keys raise ``KeyError``.
    """
    if api_key in interbroker.INTERBROKER_VERSIONS:
        low, high = interbroker.INTERBROKER_VERSIONS[api_key]
        return interbroker.is_flexible(api_key, min(max(api_version, low), high))
    name = api_key_map[api_key]
    known = sorted(schema_name_map[name])
    nearest = min(known, key=lambda version: (abs(version - api_version), -version))
    return bool(load_request_schema(api_key, nearest).__flexible__)


def build_api_versions_response(
    api_version: int,
    versions: Mapping[int, tuple[int, int]] = SUPPORTED,
    *,
    error_code: ErrorCode = ErrorCode.none,
    throttle_ms: int = 0,
) -> object:
    """The kio ApiVersionsResponse entity of ``api_version`` listing ``versions``.

    No features are reported (odradek has no feature flags), so v3+ carry the defaults
    for the tagged feature fields: clients then stay on the classic group and transaction
    protocols.
    """
    response_type = load_response_schema(API_VERSIONS, api_version)
    module = __import__(response_type.__module__, fromlist=["ApiVersion"])
    api_version_type = module.ApiVersion
    api_keys = tuple(
        api_version_type(api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(versions.items())
    )
    if api_version == 0:
        return response_type(error_code=error_code, api_keys=api_keys)
    return response_type(
        error_code=error_code,
        api_keys=api_keys,
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
    )
