"""Admin: topics, partitions, configs, offsets, record deletion and the cluster's shape.

Routing follows Kafka: topic creation, deletion and partition growth go to the controller
(re-found after NOT_CONTROLLER), broker configs to that broker, offsets and record deletion to
each partition's leader, the rest to any broker.

Errors: the broker answers per item (per topic, per resource, per partition). Every failed item
becomes a :class:`KafkaError` with Kafka's name (``TOPIC_ALREADY_EXISTS``...) and a message that
names the item; when any item fails, the call raises the first failure (in request order) and
that exception's ``errors`` maps *every* failed item to its error, so callers creating many
topics can see all of them. Retriable top-level trouble (NOT_CONTROLLER, a lost connection) is
retried a few times first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.core import ClientUser, KafkaClient
from odradek.client.entities import build_request
from odradek.client.errors import ClientError, KafkaError
from odradek.client.fetcher import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    isolation_level_id,
    list_offsets,
)
from odradek.client.log_dirs import LogDirDescription
from odradek.client.log_dirs import describe_log_dirs as _describe_log_dirs
from odradek.client.metadata import BrokerInfo, ClusterMetadata
from odradek.client.security import ClientSecurity
from odradek.client.versions import (
    ALTER_CLIENT_QUOTAS,
    ALTER_CONFIGS,
    ALTER_PARTITION_REASSIGNMENTS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_PARTITION_REASSIGNMENTS,
)

log = logging.getLogger(__name__)

__all__ = ["Admin", "ConfigEntry", "ConfigResource", "NewTopic", "PartitionReassignment"]

TopicPartition = tuple[str, int]

MAX_TIMESTAMP = -3  # ListOffsets: the record with the largest timestamp (KIP-734)

RESOURCE_TYPES = {"topic": 2, "broker": 4, "broker_logger": 8}
_RESOURCE_NAMES = {code: name for name, code in RESOURCE_TYPES.items()}
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
ELECTION_TYPES = {"preferred": 0, "unclean": 1}  # Kafka's ElectionType values
ALTER_OPERATIONS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}
_ATTEMPTS = 4


@dataclass(frozen=True)
class PartitionReassignment:
    """A reassignment in progress (Kafka's PartitionReassignment): the full replica set
    during the move, and the replicas being added and removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 partitions / replication factor: the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True)
class ConfigResource:
    """A thing with configs: ``ConfigResource("topic", "events")``, ``("broker", "0")``."""

    type: str
    name: str

    def __post_init__(self) -> None:
        if self.type not in RESOURCE_TYPES:
            raise ValueError(
                f"config resource type must be one of {', '.join(RESOURCE_TYPES)}, "
                f"not {self.type!r}"
            )

    @property
    def type_code(self) -> int:
        return RESOURCE_TYPES[self.type]


@dataclass(frozen=True)
class ConfigEntry:
    value: str | None
    read_only: bool
    is_default: bool
    source: str  # Kafka's ConfigSource name, e.g. DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG
    sensitive: bool
    # With include_synonyms: (name, value, source) of each setting it could come from,
    # highest precedence first (Kafka's ConfigEntry.synonyms).
    synonyms: tuple[tuple[str, str | None, str], ...] = ()


def _check_topic_names(names: Sequence[object]) -> None:
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a topic name must be a non-empty string, not {name!r}")


def _raise_failures(failures: dict[Hashable, KafkaError]) -> None:
    if failures:
        first = next(iter(failures.values()))
        first.errors = dict(failures)
        raise first


def _offset_spec(spec: str | int) -> int:
    if spec == "earliest":
        return EARLIEST_TIMESTAMP
    if spec == "latest":
        return LATEST_TIMESTAMP
    if spec == "max_timestamp":
        return MAX_TIMESTAMP
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return spec
    raise ValueError(
        f"an offset spec is 'earliest', 'latest', 'max_timestamp' or a timestamp >= 0, not {spec!r}"
    )


class Admin(ClientUser):
    """Async admin client: ``async with Admin("host:9092") as admin: ...``."""

    def __init__(
        self,
        client_or_bootstrap: KafkaClient | str | Sequence[str],
        *,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        client_id: str = "odradek-admin",
        security: ClientSecurity | None = None,
    ) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._attach_client(
            client_or_bootstrap,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._closed = False

    async def start(self) -> None:
        if self._closed:
            raise ClientError("admin client is closed")
        await self._client.start()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._close_client()

    # -- plumbing ------------------------------------------------------------------------------

    async def _controller(self) -> int | None:
        controller = self._client.cluster.controller_id
        if controller < 0 or controller not in self._client.cluster.brokers:
            cluster = await self._client.metadata([], refresh=True)
            controller = cluster.controller_id
        return controller if controller >= 0 else None

    async def _to_controller(
        self,
        api_key: int,
        build: Callable[[int], object],
        timeout_ms: int,
        items: Callable[[Any], Sequence[tuple[Hashable, int, str | None]]],
    ) -> dict[Hashable, KafkaError]:
        """Send to the controller, retrying NOT_CONTROLLER and lost connections.

        ``items(response)`` lists (key, error_code, message) per item; returns failed items.
        """
        pending_error: Exception | None = None
        for attempt in range(_ATTEMPTS):
            try:
                node = await self._controller()
                response = await self._client.request(
                    node, api_key, build, timeout_ms=self.request_timeout_ms + timeout_ms
                )
            except ClientError as exc:
                pending_error = exc
            else:
                answers = items(response)
                if any(code == ErrorCode.not_controller for _, code, _ in answers):
                    pending_error = KafkaError(ErrorCode.not_controller, "controller moved")
                else:
                    return {
                        key: KafkaError(code, f"{key}: {message}" if message else str(key))
                        for key, code, message in answers
                        if code
                    }
            self._client.mark_stale()
            await self._client.metadata([], refresh=True)
            await asyncio.sleep(self.retry_backoff_ms / 1000 * (attempt + 1))
        assert pending_error is not None
        raise pending_error

    # -- topics --------------------------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, timeout_ms: int = 30000
    ) -> None:
        """Create topics; raises KafkaError (e.g. TOPIC_ALREADY_EXISTS) if any fails."""
        if not topics:
            return
        for topic in topics:
            if not isinstance(topic, NewTopic):
                raise TypeError(f"expected a NewTopic, not {topic!r}")
        names = [t.name for t in topics]
        _check_topic_names(names)
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate topic names in {names}")
        entries = [
            {
                "name": t.name,
                "num_partitions": -1 if t.replica_assignment else t.num_partitions,
                "replication_factor": -1 if t.replica_assignment else t.replication_factor,
                "assignments": [
                    {"partition_index": p, "broker_ids": list(brokers)}
                    for p, brokers in sorted((t.replica_assignment or {}).items())
                ],
                "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
            }
            for t in topics
        ]
        failures = await self._to_controller(
            CREATE_TOPICS,
            lambda v: build_request(
                CREATE_TOPICS,
                v,
                topics=entries,
                timeout=timeout_ms,
                validate_only=validate_only,
            ),
            timeout_ms,
            lambda r: [
                (str(t.name), int(t.error_code), getattr(t, "error_message", None))
                for t in r.topics
            ],
        )
        if not validate_only:
            for name in names:
                self._client.mark_stale(name)
        _raise_failures(failures)

    async def delete_topics(self, names: Sequence[str], *, timeout_ms: int = 30000) -> None:
        """Delete topics; raises KafkaError (e.g. UNKNOWN_TOPIC_OR_PARTITION) if any fails."""
        if isinstance(names, str):
            raise TypeError("delete_topics takes a list of names, not one string")
        if not names:
            return
        _check_topic_names(names)
        failures = await self._to_controller(
            DELETE_TOPICS,
            lambda v: build_request(
                DELETE_TOPICS,
                v,
                topic_names=list(names),
                topics=[{"name": n, "topic_id": None} for n in names],
                timeout=timeout_ms,
            ),
            timeout_ms,
            lambda r: [
                (str(t.name), int(t.error_code), getattr(t, "error_message", None))
                for t in r.responses
            ],
        )
        for name in names:
            self._client.mark_stale(name)
        _raise_failures(failures)

    async def create_partitions(
        self,
        new_totals: Mapping[str, int],
        *,
        validate_only: bool = False,
        timeout_ms: int = 30000,
    ) -> None:
        """Grow topics to ``new_totals[topic]`` partitions (INVALID_PARTITIONS if not more)."""
        if not new_totals:
            return
        _check_topic_names(list(new_totals))
        for name, total in new_totals.items():
            if not isinstance(total, int) or total <= 0:
                raise ValueError(f"the new partition count of {name!r} must be > 0, not {total!r}")
        failures = await self._to_controller(
            CREATE_PARTITIONS,
            lambda v: build_request(
                CREATE_PARTITIONS,
                v,
                topics=[
                    {"name": t, "count": n, "assignments": None} for t, n in new_totals.items()
                ],
                timeout=timeout_ms,
                validate_only=validate_only,
            ),
            timeout_ms,
            lambda r: [
                (str(t.name), int(t.error_code), getattr(t, "error_message", None))
                for t in r.results
            ],
        )
        if not validate_only:
            for name in new_totals:
                self._client.mark_stale(name)
        _raise_failures(failures)

    async def list_topics(self, *, include_internal: bool = True) -> ClusterMetadata:
        """Fresh metadata for every topic (internal ones like __consumer_offsets optional)."""
        cluster = await self._client.metadata(None, refresh=True)
        if not include_internal:
            cluster.topics = {n: t for n, t in cluster.topics.items() if not t.is_internal}
        return cluster

    async def describe_cluster(self) -> ClusterMetadata:
        """Cluster id, controller and brokers (DescribeCluster, or Metadata on older brokers)."""
        connection = await self._client.connection(None)
        if not connection.supports(DESCRIBE_CLUSTER):
            cluster = await self._client.metadata([], refresh=True)
            cluster.topics = {}
            return cluster
        response = await self._client.request(
            connection.node_id,
            DESCRIBE_CLUSTER,
            lambda v: build_request(
                DESCRIBE_CLUSTER,
                v,
                include_cluster_authorized_operations=False,
                endpoint_type=1,
                include_fenced_brokers=False,
            ),
        )
        if response.error_code:
            raise KafkaError(response.error_code, getattr(response, "error_message", None))
        return ClusterMetadata(
            cluster_id=response.cluster_id,
            controller_id=int(response.controller_id),
            brokers={
                int(b.broker_id): BrokerInfo(int(b.broker_id), str(b.host), int(b.port), b.rack)
                for b in response.brokers
            },
        )

    # -- configs -------------------------------------------------------------------------------

    def _node_for(self, resource: ConfigResource) -> int | None:
        """Broker configs are answered by that broker; topic configs by any."""
        if resource.type in ("broker", "broker_logger") and resource.name:
            try:
                return int(resource.name)
            except ValueError:
                raise ValueError(
                    f"broker resource name must be a broker id, not {resource.name!r}"
                ) from None
        return None

    def _group_by_node(
        self, resources: Sequence[ConfigResource]
    ) -> dict[int | None, list[ConfigResource]]:
        groups: dict[int | None, list[ConfigResource]] = {}
        for resource in resources:
            if not isinstance(resource, ConfigResource):
                raise TypeError(f"expected a ConfigResource, not {resource!r}")
            groups.setdefault(self._node_for(resource), []).append(resource)
        return groups

    async def describe_configs(
        self,
        resources: Sequence[ConfigResource],
        *,
        keys: Sequence[str] | None = None,
        include_synonyms: bool = False,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Current configs of each resource (only ``keys`` if given)."""
        result: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        failures: dict[Hashable, KafkaError] = {}
        for node, group in self._group_by_node(resources).items():
            response = await self._client.request(
                node,
                DESCRIBE_CONFIGS,
                lambda v, group=group: build_request(
                    DESCRIBE_CONFIGS,
                    v,
                    resources=[
                        {
                            "resource_type": r.type_code,
                            "resource_name": r.name,
                            "configuration_keys": None if keys is None else list(keys),
                        }
                        for r in group
                    ],
                    include_synonyms=include_synonyms,
                    include_documentation=False,
                ),
            )
            for res in response.results:
                resource = ConfigResource(
                    _RESOURCE_NAMES.get(int(res.resource_type), "topic"), str(res.resource_name)
                )
                if res.error_code:
                    failures[resource] = KafkaError(
                        res.error_code,
                        f"{resource.type} {resource.name!r}: {res.error_message or ''}".rstrip(
                            ": "
                        ),
                    )
                    continue
                result[resource] = {
                    str(c.name): ConfigEntry(
                        value=c.value,
                        read_only=bool(c.read_only),
                        is_default=int(getattr(c, "config_source", -1)) == 5,
                        source=CONFIG_SOURCES.get(int(getattr(c, "config_source", 0)), "UNKNOWN"),
                        sensitive=bool(c.is_sensitive),
                        synonyms=tuple(
                            (
                                str(s.name),
                                s.value,
                                CONFIG_SOURCES.get(int(s.source), "UNKNOWN"),
                            )
                            for s in (getattr(c, "synonyms", None) or ())
                        ),
                    )
                    for c in res.configs
                }
        _raise_failures({r: failures[r] for r in resources if r in failures})
        return result

    async def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, str]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Replace each resource's overrides with ``configs[resource]`` (Kafka's legacy
        AlterConfigs: keys not given return to their defaults)."""
        await self._alter(
            ALTER_CONFIGS,
            {
                r: [{"name": k, "value": v} for k, v in values.items()]
                for r, values in configs.items()
            },
            validate_only,
        )

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Sequence[tuple[str, str, str | None]]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Apply (name, op, value) changes; op is 'set', 'delete', 'append' or 'subtract'."""
        entries: dict[ConfigResource, list[dict[str, Any]]] = {}
        for resource, items in changes.items():
            entries[resource] = []
            for item in items:
                if not isinstance(item, tuple) or len(item) != 3:
                    raise ValueError(f"a config change is (name, op, value), not {item!r}")
                name, op, value = item
                if op not in ALTER_OPERATIONS:
                    raise ValueError(
                        f"config operation must be one of {', '.join(ALTER_OPERATIONS)}, not {op!r}"
                    )
                entries[resource].append(
                    {"name": name, "config_operation": ALTER_OPERATIONS[op], "value": value}
                )
        await self._alter(INCREMENTAL_ALTER_CONFIGS, entries, validate_only)

    async def _alter(
        self,
        api_key: int,
        entries: Mapping[ConfigResource, list[dict[str, Any]]],
        validate_only: bool,
    ) -> None:
        failures: dict[Hashable, KafkaError] = {}
        for node, group in self._group_by_node(list(entries)).items():
            response = await self._client.request(
                node,
                api_key,
                lambda v, group=group: build_request(
                    api_key,
                    v,
                    resources=[
                        {
                            "resource_type": r.type_code,
                            "resource_name": r.name,
                            "configs": entries[r],
                        }
                        for r in group
                    ],
                    validate_only=validate_only,
                ),
            )
            for res in response.responses:
                if res.error_code:
                    resource = ConfigResource(
                        _RESOURCE_NAMES.get(int(res.resource_type), "topic"),
                        str(res.resource_name),
                    )
                    detail = f": {res.error_message}" if res.error_message else ""
                    failures[resource] = KafkaError(
                        res.error_code, f"{resource.type} {resource.name!r}{detail}"
                    )
        _raise_failures({r: failures[r] for r in entries if r in failures})

    # -- offsets and records -------------------------------------------------------------------

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        isolation_level: str = "read_uncommitted",
    ) -> dict[TopicPartition, tuple[int, int]]:
        """(topic, partition) -> 'earliest' | 'latest' | 'max_timestamp' | timestamp ms:
        returns (offset, timestamp); offset -1 when no record is at or after the timestamp."""
        converted = {tp: _offset_spec(spec) for tp, spec in specs.items()}
        return await list_offsets(
            self._client,
            converted,
            isolation_level=isolation_level_id(isolation_level),
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
        )

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, int]:
        """Delete records before ``before[(topic, partition)]`` (-1: the high watermark);
        returns each partition's new low watermark (log start offset)."""
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, offset in before.items():
            if not isinstance(offset, int) or offset < -1:
                raise ValueError(f"delete_records offset must be >= -1, not {offset!r}")
            by_leader.setdefault(await self._client.leader_for(*tp), {})[tp] = offset
        result: dict[TopicPartition, int] = {}
        failures: dict[Hashable, KafkaError] = {}
        for node, offsets in by_leader.items():
            topics: dict[str, list[dict[str, int]]] = {}
            for (topic, partition), offset in offsets.items():
                topics.setdefault(topic, []).append(
                    {"partition_index": partition, "offset": offset}
                )
            response = await self._client.request(
                node,
                DELETE_RECORDS,
                lambda v, topics=topics: build_request(
                    DELETE_RECORDS,
                    v,
                    topics=[{"name": t, "partitions": p} for t, p in topics.items()],
                    timeout=timeout_ms,
                ),
                timeout_ms=self.request_timeout_ms + timeout_ms,
            )
            for topic in response.topics:
                for part in topic.partitions:
                    tp = (str(topic.name), int(part.partition_index))
                    if part.error_code:
                        failures[tp] = KafkaError(
                            part.error_code, f"DeleteRecords for {tp[0]}-{tp[1]}"
                        )
                    else:
                        result[tp] = int(part.low_watermark)
        _raise_failures({tp: failures[tp] for tp in before if tp in failures})
        return result

    # -- leader elections ----------------------------------------------------------------------

    async def elect_leaders(
        self,
        election_type: str,
        partitions: Sequence[TopicPartition] | None = None,
        *,
        timeout_ms: int = 30000,
    ) -> dict[TopicPartition, KafkaError | None]:
        """ElectLeaders (``"preferred"`` or ``"unclean"``) for ``partitions``, or every
        partition of the cluster with None, sent to the controller. Returns each
        partition's outcome: None when a leader was elected, else its KafkaError
        (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ...), as Kafka's
        ElectLeadersResult. A top-level error raises."""
        if election_type not in ELECTION_TYPES:
            raise ValueError(f"election type must be preferred or unclean, not {election_type!r}")
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for topic, partition in partitions:
                _check_topic_names([topic])
                topics.setdefault(topic, []).append(int(partition))
        answers: dict[TopicPartition, KafkaError | None] = {}

        def items(response: Any) -> list[tuple[Hashable, int, str | None]]:
            answers.clear()
            if getattr(response, "error_code", 0):
                return [("", int(response.error_code), "ElectLeaders")]
            found: list[tuple[Hashable, int, str | None]] = []
            for topic_result in response.replica_election_results:
                for part in topic_result.partition_result:
                    tp = (str(topic_result.topic), int(part.partition_id))
                    code, message = int(part.error_code), part.error_message
                    answers[tp] = KafkaError(code, message) if code else None
                    found.append((tp, code, message))
            return found

        failures = await self._to_controller(
            ELECT_LEADERS,
            lambda v: build_request(
                ELECT_LEADERS,
                v,
                election_type=ELECTION_TYPES[election_type],
                topic_partitions=None
                if topics is None
                else [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                timeout=timeout_ms,
            ),
            timeout_ms,
            items,
        )
        if "" in failures:
            raise failures[""]
        if partitions is not None:
            for tp in partitions:
                self._client.mark_stale(tp[0])
        return dict(sorted(answers.items()))

    # -- partition reassignments ---------------------------------------------------------------

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int = 30000,
    ) -> dict[TopicPartition, KafkaError | None]:
        """AlterPartitionReassignments, sent to the controller: a target replica list per
        partition, None to cancel. Returns each partition's outcome (None = started, or
        cancelled); a top-level error raises. The move itself goes on in the cluster."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), replicas in sorted(reassignments.items()):
            _check_topic_names([topic])
            topics.setdefault(topic, []).append(
                {
                    "partition_index": int(partition),
                    "replicas": None if replicas is None else [int(r) for r in replicas],
                }
            )
        answers: dict[TopicPartition, KafkaError | None] = {}

        def items(response: Any) -> list[tuple[Hashable, int, str | None]]:
            answers.clear()
            if response.error_code:
                return [("", int(response.error_code), response.error_message)]
            found: list[tuple[Hashable, int, str | None]] = []
            for topic_result in response.responses:
                for part in topic_result.partitions:
                    tp = (str(topic_result.name), int(part.partition_index))
                    code, message = int(part.error_code), part.error_message
                    answers[tp] = KafkaError(code, message or "") if code else None
                    found.append((tp, code, message))
            return found

        failures = await self._to_controller(
            ALTER_PARTITION_REASSIGNMENTS,
            lambda v: build_request(
                ALTER_PARTITION_REASSIGNMENTS,
                v,
                timeout=timeout_ms,
                topics=[{"name": t, "partitions": ps} for t, ps in topics.items()],
            ),
            timeout_ms,
            items,
        )
        if "" in failures:
            raise failures[""]
        return dict(sorted(answers.items()))

    async def list_partition_reassignments(
        self, partitions: Sequence[TopicPartition] | None = None, *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, PartitionReassignment]:
        """ListPartitionReassignments, sent to the controller: the reassignments in
        progress (only among ``partitions`` when given)."""
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for topic, partition in partitions:
                topics.setdefault(topic, []).append(int(partition))
        found: dict[TopicPartition, PartitionReassignment] = {}

        def items(response: Any) -> list[tuple[Hashable, int, str | None]]:
            found.clear()
            if response.error_code:
                return [("", int(response.error_code), response.error_message)]
            for topic in response.topics:
                for part in topic.partitions:
                    found[(str(topic.name), int(part.partition_index))] = PartitionReassignment(
                        tuple(int(r) for r in part.replicas),
                        tuple(int(r) for r in part.adding_replicas),
                        tuple(int(r) for r in part.removing_replicas),
                    )
            return []

        failures = await self._to_controller(
            LIST_PARTITION_REASSIGNMENTS,
            lambda v: build_request(
                LIST_PARTITION_REASSIGNMENTS,
                v,
                timeout=timeout_ms,
                topics=None
                if topics is None
                else [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
            ),
            timeout_ms,
            items,
        )
        if "" in failures:
            raise failures[""]
        return dict(sorted(found.items()))

    # -- log directories -----------------------------------------------------------------------

    # -- client quotas (KIP-546) ---------------------------------------------------------

    async def _any_node(self) -> int:
        brokers = self._client.cluster.brokers or (await self._client.metadata([])).brokers
        return min(brokers)

    async def describe_client_quotas(
        self, components: Sequence[tuple[str, int, str | None]], *, strict: bool = False
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """Quota entities matching ``(entity type, match type, name)`` filters (match
        type 0 exact name, 1 the default, 2 any name) and their values."""
        response: Any = await self._client.request(
            await self._any_node(),
            DESCRIBE_CLIENT_QUOTAS,
            lambda v: build_request(
                DESCRIBE_CLIENT_QUOTAS,
                v,
                components=[
                    {"entity_type": t, "match_type": m, "match": n} for t, m, n in components
                ],
                strict=strict,
            ),
        )
        if response.error_code:
            raise KafkaError(response.error_code, response.error_message or "")
        return [
            (
                {e.entity_type: e.entity_name for e in entry.entity},
                {v.key: float(v.value) for v in entry.values},
            )
            for entry in response.entries or ()
        ]

    async def alter_client_quotas(
        self,
        entity: Mapping[str, str | None],
        ops: Mapping[str, float | None],
        *,
        validate_only: bool = False,
    ) -> None:
        """Set (a value) or remove (None) quota keys of one entity."""
        response: Any = await self._client.request(
            await self._any_node(),
            ALTER_CLIENT_QUOTAS,
            lambda v: build_request(
                ALTER_CLIENT_QUOTAS,
                v,
                entries=[
                    {
                        "entity": [
                            {"entity_type": k, "entity_name": n} for k, n in entity.items()
                        ],
                        "ops": [
                            {"key": k, "value": 0.0 if x is None else x, "remove": x is None}
                            for k, x in ops.items()
                        ],
                    }
                ],
                validate_only=validate_only,
            ),
        )
        for entry in response.entries:
            if entry.error_code:
                raise KafkaError(entry.error_code, entry.error_message or "")

    async def describe_log_dirs(
        self,
        brokers: Sequence[int] | None = None,
        partitions: Sequence[TopicPartition] | None = None,
    ) -> dict[int, dict[str, LogDirDescription]]:
        """broker id -> log dir -> its error (offline: KAFKA_STORAGE_ERROR), replicas and
        space (DescribeLogDirs); every broker by default, only ``partitions`` if given."""
        return await _describe_log_dirs(self._client, brokers, partitions)
