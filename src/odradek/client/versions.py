"""Which version of each API the client speaks, given what a broker advertises.

The version used for an API is the highest one in the intersection of

* the broker's advertised range (its ApiVersions response),
* the range kio has classes for (kio is generated from Kafka's JSON schemas), and
* :data:`CLIENT_VERSIONS`: the range whose *semantics* this client implements. Versions beyond it
  change meaning, not just fields: Produce v13 and Fetch v13+ address topics by id (KIP-516),
  Metadata v0 means "all topics" by an empty list rather than null. APIs this table does not
  list (the group APIs other modules send through :meth:`KafkaClient.request`) are limited by
  kio's range only; their callers pick fields per version themselves.

No overlap means the broker is too old or too new for that API: :func:`pick_version` raises
KafkaError(UNSUPPORTED_VERSION) naming both ranges.
"""

from __future__ import annotations

from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from odradek.client.entities import api_name, kio_range
from odradek.client.errors import KafkaError

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
FIND_COORDINATOR = 10
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
ELECT_LEADERS = 43
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
CREATE_PARTITIONS = 37
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
DESCRIBE_CLUSTER = 60
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49

# api_key -> (min, max) this client implements. Why each bound:
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 12),  # v3 = record batch v2 (kio's floor too); v13 sends topic ids
    FETCH: (4, 12),  # v4 = record batch v2 + aborted transactions; v13+ topic ids
    LIST_OFFSETS: (1, 10),  # v1 drops the old offsets array; v11 only adds earliest-pending-upload
    METADATA: (1, 13),  # v0's empty-list-means-all differs; v13 adds a top-level error code (read)
    API_VERSIONS: (0, 3),  # v3 adds client software name/version; v4 only relaxes feature lists
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),  # v6 names topics in DeleteTopicState records (by name here)
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 5),  # v3+ lets an idempotent producer bump its epoch; v6 is KIP-939 2PC
    DESCRIBE_CONFIGS: (1, 4),  # v1 reports config_source (v0 only an is_default flag)
    ALTER_CONFIGS: (0, 2),
    CREATE_PARTITIONS: (0, 3),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DESCRIBE_CLUSTER: (0, 1),  # v2 adds fenced brokers (KRaft only)
    DESCRIBE_LOG_DIRS: (1, 4),  # v4 adds total/usable bytes; v5 cordoned dirs (KIP-1066)
    ADD_PARTITIONS_TO_TXN: (0, 3),  # v4+ is the brokers' batched form (KIP-890)
    ADD_OFFSETS_TO_TXN: (0, 3),  # v4 is KIP-890's client-side marker, same fields
    END_TXN: (0, 4),  # v5 returns a new epoch per transaction (KIP-890 part 2)
    TXN_OFFSET_COMMIT: (0, 3),  # v3 carries generation / member / instance (KIP-447)
}

# The first ApiVersions version a new connection tries. v3 is understood by every broker since
# Kafka 2.4; older ones answer UNSUPPORTED_VERSION with their range and the client retries.
FIRST_API_VERSIONS_VERSION = 3


def client_range(api_key: int) -> tuple[int, int] | None:
    """The versions of ``api_key`` this client can encode with the intended meaning."""
    kio = kio_range(api_key)
    if kio is None:
        return None
    ours = CLIENT_VERSIONS.get(api_key, kio)
    low, high = max(ours[0], kio[0]), min(ours[1], kio[1])
    return (low, high) if low <= high else None


def pick_version(api_key: int, broker_ranges: Mapping[int, tuple[int, int]]) -> int:
    """Highest version of ``api_key`` that both the broker and this client support."""
    ours = client_range(api_key)
    theirs = broker_ranges.get(api_key)
    name = api_name(api_key)
    if ours is None:
        raise KafkaError(ErrorCode.unsupported_version, f"the client does not implement {name}")
    if theirs is None:
        raise KafkaError(ErrorCode.unsupported_version, f"the broker does not support {name}")
    low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
    if low > high:
        raise KafkaError(
            ErrorCode.unsupported_version,
            f"no common {name} version: broker supports v{theirs[0]}-{theirs[1]}, "
            f"client v{ours[0]}-{ours[1]}",
        )
    return high
