"""GroupAdmin: consumer groups and their committed offsets, seen from outside the group.

What kafka-consumer-groups and the Java Admin's ``*ConsumerGroup*`` calls do, on top of
:class:`~odradek.client.core.KafkaClient`:

* :meth:`GroupAdmin.find_coordinator` — FindCoordinator (v0-3 one key, v4+ a batch of keys);
  answers are cached per group and forgotten when a coordinator says it is not one.
* :meth:`GroupAdmin.list_groups` — ListGroups, sent to *every* broker (each coordinator only
  knows the groups of the ``__consumer_offsets`` partitions it leads); v4+ filters by state.
* :meth:`GroupAdmin.describe_groups` — DescribeGroups to each group's coordinator. A group that
  does not exist is described as state ``Dead`` without members, whatever the version (v6
  answers GROUP_ID_NOT_FOUND, older versions a Dead group, as Kafka did).
* :meth:`GroupAdmin.fetch_offsets` / :meth:`GroupAdmin.commit_offsets` — OffsetFetch and
  OffsetCommit (as a "simple" consumer: generation -1, no member id, which the coordinator
  accepts only while the group has no members — the rule kafka-consumer-groups relies on).
* :meth:`GroupAdmin.delete_groups` / :meth:`GroupAdmin.delete_offsets` — DeleteGroups (only
  empty groups: NON_EMPTY_GROUP otherwise) and OffsetDelete (KIP-496).
* :meth:`GroupAdmin.describe_offsets` — per partition the committed offset, the log end offset
  (high watermark, via ListOffsets) and the lag, plus the member it is assigned to.
* :meth:`GroupAdmin.plan_reset` — the new offsets of kafka-consumer-groups ``--reset-offsets``
  (earliest, latest, an offset, a datetime, a shift), clamped to the partition's valid range.

Wire format decoded here (everything else is kio's): a consumer member's assignment in
DescribeGroups is Kafka's ``ConsumerProtocolAssignment``, non-flexible, version first::

    version: int16
    assigned_partitions: int32 count, each = topic (int16 length + UTF-8), int32 count, int32...
    user_data: int32 length + bytes (-1 = null)          (read but not returned)

Every version (0-3) starts that way, and later versions may only append fields, so the prefix
is read and the rest ignored.

Errors: a broker's per-item error becomes :class:`~odradek.client.errors.KafkaError` with
Kafka's name; when several items fail, the first (in request order) is raised and its
``errors`` maps every failed item to its error. Coordinator trouble (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, a lost connection) is retried a few
times, finding the coordinator again each time. :class:`SyncGroupAdmin` is the blocking twin.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from odradek.client.core import ClientUser, KafkaClient
from odradek.client.entities import build_request
from odradek.client.errors import ClientError, KafkaError
from odradek.client.fetcher import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from odradek.client.security import ClientSecurity
from odradek.client.sync import _SyncBase

__all__ = [
    "ConsumerAssignment",
    "GroupAdmin",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "OffsetAndMetadata",
    "PartitionOffsets",
    "ResetSpec",
    "SyncGroupAdmin",
    "decode_consumer_assignment",
]

T = TypeVar("T")
TopicPartition = tuple[str, int]

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
OFFSET_DELETE = 47

# Highest version of each API whose meaning this module implements. OffsetCommit and
# OffsetFetch v10 address topics by id, which this client does not track.
_MAX_VERSIONS = {
    OFFSET_COMMIT: 9,
    OFFSET_FETCH: 9,
    FIND_COORDINATOR: 6,
    DESCRIBE_GROUPS: 6,
    LIST_GROUPS: 5,
    DELETE_GROUPS: 2,
    OFFSET_DELETE: 0,
}

_GROUP_KEY_TYPE = 0
_ATTEMPTS = 5
# Errors after which the group's coordinator must be looked up again before a retry.
_COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    }
)
RESET_STRATEGIES = ("earliest", "latest", "offset", "datetime", "shift")


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str  # "consumer" for consumer groups, "" for offsets-only groups
    state: str  # Kafka's names: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    coordinator: int  # node id of the broker that listed it


@dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    """A consumer member's decoded assignment (``ConsumerProtocolAssignment``)."""

    version: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # raw subscription (empty unless the group is Stable)
    assignment: bytes  # raw assignment (empty unless the group is Stable)
    # Decoded assignment for consumer groups; () when empty or not a consumer assignment.
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor's name ("range", "cooperative-sticky"...) when Stable
    members: tuple[MemberDescription, ...]
    coordinator: int  # node id

    @property
    def exists(self) -> bool:
        return self.state != "Dead"

    @property
    def is_empty(self) -> bool:
        """No members (Empty or Dead): the states in which offsets may be reset."""
        return self.state in ("Empty", "Dead")


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One row of ``kafka-consumer-groups --describe``."""

    topic: str
    partition: int
    committed: int | None  # None: nothing committed
    log_end_offset: int | None  # None: the partition does not exist (any more)
    member: MemberDescription | None  # who it is assigned to right now, if anyone

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.committed, 0)


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """Where ``plan_reset`` moves offsets: ``strategy`` is one of :data:`RESET_STRATEGIES`;
    ``value`` is the offset (``offset``), epoch milliseconds (``datetime``) or the signed
    distance (``shift``), unused for ``earliest``/``latest``."""

    strategy: str
    value: int = 0

    def __post_init__(self) -> None:
        if self.strategy not in RESET_STRATEGIES:
            raise ValueError(
                f"reset strategy must be one of {', '.join(RESET_STRATEGIES)}, "
                f"not {self.strategy!r}"
            )
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise ValueError(f"reset value must be an integer, not {self.value!r}")
        if self.strategy == "offset" and self.value < 0:
            raise ValueError(f"cannot reset to a negative offset ({self.value})")
        if self.strategy == "datetime" and self.value < 0:
            raise ValueError(f"cannot reset to a negative timestamp ({self.value})")


def decode_consumer_assignment(data: bytes) -> ConsumerAssignment:
    """Decode a ``ConsumerProtocolAssignment`` (see the module docstring); ValueError if the
    bytes are not one. Empty bytes (a member without assignment) decode to no partitions."""
    view = memoryview(data)
    if len(view) == 0:
        return ConsumerAssignment(-1, ())
    if len(view) < 6:
        raise ValueError("consumer assignment shorter than its header")
    version, topic_count = struct.unpack_from(">hi", view, 0)
    if version < 0:
        raise ValueError(f"consumer assignment has negative version {version}")
    if topic_count < -1 or topic_count > len(view):
        raise ValueError(f"consumer assignment has an impossible topic count {topic_count}")
    pos = 6
    partitions: list[TopicPartition] = []
    for _ in range(max(topic_count, 0)):
        if pos + 2 > len(view):
            raise ValueError("consumer assignment truncated in a topic name")
        (length,) = struct.unpack_from(">h", view, pos)
        pos += 2
        if length < 0 or pos + length > len(view):
            raise ValueError("consumer assignment has a bad topic name length")
        try:
            topic = bytes(view[pos : pos + length]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"consumer assignment topic is not UTF-8: {exc}") from None
        pos += length
        if pos + 4 > len(view):
            raise ValueError("consumer assignment truncated in a partition count")
        (count,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if count < 0 or pos + 4 * count > len(view):
            raise ValueError(f"consumer assignment has an impossible partition count {count}")
        partitions.extend((topic, p) for p in struct.unpack_from(f">{count}i", view, pos))
        pos += 4 * count
    return ConsumerAssignment(version, tuple(partitions))


def _raise_failures(failures: Mapping[Hashable, KafkaError]) -> None:
    if failures:
        first = next(iter(failures.values()))
        first.errors = dict(failures)
        raise first


def _check_group_ids(group_ids: Sequence[object]) -> None:
    if isinstance(group_ids, str):
        raise TypeError("expected a list of group ids, not one string")
    for group_id in group_ids:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError(f"a group id must be a non-empty string, not {group_id!r}")


def _check_partitions(partitions: Sequence[object]) -> list[TopicPartition]:
    checked: list[TopicPartition] = []
    for tp in partitions:
        if (
            not isinstance(tp, tuple)
            or len(tp) != 2
            or not isinstance(tp[0], str)
            or not tp[0]
            or isinstance(tp[1], bool)
            or not isinstance(tp[1], int)
            or tp[1] < 0
        ):
            raise ValueError(f"a partition is (topic, index >= 0), not {tp!r}")
        checked.append((tp[0], tp[1]))
    return checked


def _by_topic(partitions: Sequence[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return grouped


class GroupAdmin(ClientUser):
    """Async consumer-group administration: ``async with GroupAdmin("host:9092") as admin``."""

    def __init__(
        self,
        client_or_bootstrap: KafkaClient | str | Sequence[str],
        *,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        client_id: str = "odradek-group-admin",
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
        self._coordinators: dict[str, int] = {}
        self._closed = False

    async def start(self) -> None:
        if self._closed:
            raise ClientError("group admin client is closed")
        await self._client.start()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._close_client()

    # -- plumbing ------------------------------------------------------------------------------

    async def _send(self, node: int | None, api_key: int, build: Callable[[int], object]) -> Any:
        """Send at the highest version both sides support, capped at what this module knows."""
        connection = await self._client.connection(node)
        version = min(connection.version_for(api_key), _MAX_VERSIONS[api_key])
        low = connection.api_versions.get(api_key, (0, 0))[0]
        if version < low:
            raise KafkaError(
                ErrorCode.unsupported_version,
                f"broker {connection.node_id} needs api {api_key} v{low}+, "
                f"this client speaks up to v{version}",
            )
        return await self._client.send(connection.node_id, build(version))

    async def _with_coordinator(
        self, group_id: str, call: Callable[[int], Awaitable[T]], error_of: Callable[[T], int]
    ) -> T:
        """Run ``call(coordinator)``; retry coordinator errors and lost connections."""
        last: Exception | None = None
        for attempt in range(_ATTEMPTS):
            if attempt:
                await asyncio.sleep(self.retry_backoff_ms / 1000 * attempt)
            try:
                node = await self.find_coordinator(group_id)
                answer = await call(node)
            except ClientError as exc:
                self._coordinators.pop(group_id, None)
                last = exc
                continue
            except KafkaError as exc:
                if exc.code not in _COORDINATOR_ERRORS:
                    raise
                self._coordinators.pop(group_id, None)
                last = exc
                continue
            code = error_of(answer)
            if code in _COORDINATOR_ERRORS:
                self._coordinators.pop(group_id, None)
                last = KafkaError(code, f"group {group_id!r}")
                continue
            return answer
        assert last is not None
        raise last

    # -- FindCoordinator -----------------------------------------------------------------------

    async def find_coordinator(self, group_id: str, *, refresh: bool = False) -> int:
        """Node id of ``group_id``'s coordinator (cached unless ``refresh``)."""
        _check_group_ids([group_id])
        if not refresh and group_id in self._coordinators:
            return self._coordinators[group_id]
        last: KafkaError | None = None
        for attempt in range(_ATTEMPTS):
            if attempt:
                await asyncio.sleep(self.retry_backoff_ms / 1000 * attempt)
            response = await self._send(
                None,
                FIND_COORDINATOR,
                lambda v: build_request(
                    FIND_COORDINATOR,
                    v,
                    key=group_id,
                    key_type=_GROUP_KEY_TYPE,
                    coordinator_keys=[group_id],
                ),
            )
            answer = response.coordinators[0] if hasattr(response, "coordinators") else response
            code = int(answer.error_code)
            if code:
                last = KafkaError(code, f"FindCoordinator for group {group_id!r}")
                if last.retriable:
                    continue
                raise last
            node = int(answer.node_id)
            if node not in self._client.cluster.brokers:
                await self._client.metadata([], refresh=True)
            self._coordinators[group_id] = node
            return node
        assert last is not None
        raise last

    # -- ListGroups ----------------------------------------------------------------------------

    async def list_groups(self, states: Sequence[str] = ()) -> list[GroupListing]:
        """Every group on every broker, sorted by id; ``states`` keeps only those states
        (compared case-insensitively, also against brokers too old to filter)."""
        cluster = await self._client.metadata([], refresh=True)
        wanted = {s.lower() for s in states}
        listings: dict[str, GroupListing] = {}
        for node in sorted(cluster.brokers):
            for attempt in range(_ATTEMPTS):
                response = await self._send(
                    node,
                    LIST_GROUPS,
                    lambda v: build_request(
                        LIST_GROUPS, v, states_filter=list(states), types_filter=[]
                    ),
                )
                code = int(response.error_code)
                if code == ErrorCode.coordinator_load_in_progress and attempt < _ATTEMPTS - 1:
                    await asyncio.sleep(self.retry_backoff_ms / 1000 * (attempt + 1))
                    continue
                if code:
                    raise KafkaError(code, f"ListGroups on broker {node}")
                for group in response.groups:
                    state = str(getattr(group, "group_state", "") or "")
                    if wanted and state and state.lower() not in wanted:
                        continue
                    listings[str(group.group_id)] = GroupListing(
                        str(group.group_id), str(group.protocol_type or ""), state, node
                    )
                break
        return [listings[g] for g in sorted(listings)]

    # -- DescribeGroups ------------------------------------------------------------------------

    async def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupDescription]:
        """Describe each group (an unknown one as state ``Dead``); see the module docstring."""
        _check_group_ids(group_ids)
        result: dict[str, GroupDescription] = {}
        failures: dict[Hashable, KafkaError] = {}
        for group_id in dict.fromkeys(group_ids):
            # One request per group: groups may live on different coordinators, and a group's
            # coordinator error must only retry that group.
            def call(node: int, group_id: str = group_id) -> Awaitable[Any]:
                return self._send(
                    node,
                    DESCRIBE_GROUPS,
                    lambda v: build_request(
                        DESCRIBE_GROUPS,
                        v,
                        groups=[group_id],
                        include_authorized_operations=False,
                    ),
                )

            response = await self._with_coordinator(
                group_id, call, lambda r: int(r.groups[0].error_code)
            )
            described = response.groups[0]
            code = int(described.error_code)
            node = self._coordinators.get(group_id, -1)
            if code == ErrorCode.group_id_not_found:
                result[group_id] = GroupDescription(group_id, "Dead", "", "", (), node)
                continue
            if code:
                failures[group_id] = KafkaError(code, f"DescribeGroups for group {group_id!r}")
                continue
            protocol_type = str(described.protocol_type or "")
            members = tuple(self._member(m, protocol_type, group_id) for m in described.members)
            result[group_id] = GroupDescription(
                group_id,
                str(described.group_state or "Dead"),
                protocol_type,
                str(described.protocol_data or ""),
                members,
                node,
            )
        _raise_failures(failures)
        return result

    async def describe_group(self, group_id: str) -> GroupDescription:
        return (await self.describe_groups([group_id]))[group_id]

    @staticmethod
    def _member(member: Any, protocol_type: str, group_id: str) -> MemberDescription:
        assignment = bytes(member.member_assignment or b"")
        partitions: tuple[TopicPartition, ...] = ()
        if protocol_type == "consumer" and assignment:
            try:
                partitions = decode_consumer_assignment(assignment).partitions
            except ValueError as exc:
                raise ClientError(
                    f"group {group_id!r}: member {member.member_id} has a malformed "
                    f"consumer assignment: {exc}"
                ) from None
        return MemberDescription(
            member_id=str(member.member_id),
            group_instance_id=getattr(member, "group_instance_id", None),
            client_id=str(member.client_id),
            client_host=str(member.client_host),
            metadata=bytes(member.member_metadata or b""),
            assignment=assignment,
            partitions=partitions,
        )

    # -- OffsetFetch / OffsetCommit ------------------------------------------------------------

    async def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of ``group_id`` (None: every partition it has committed);
        partitions without a committed offset are left out of the result. With
        ``require_stable`` (KIP-447, OffsetFetch v7+) a partition whose offset is still
        pending in an open transaction fails with UNSTABLE_OFFSET_COMMIT."""
        _check_group_ids([group_id])
        wanted = None if partitions is None else _check_partitions(partitions)
        if wanted == []:
            return {}
        topics = (
            None
            if wanted is None
            else [{"name": t, "partition_indexes": p} for t, p in _by_topic(wanted).items()]
        )

        def call(node: int) -> Awaitable[Any]:
            return self._send(
                node,
                OFFSET_FETCH,
                lambda v: build_request(
                    OFFSET_FETCH,
                    v,
                    group_id=group_id,
                    topics=topics,
                    groups=[{"group_id": group_id, "topics": topics}],
                    require_stable=require_stable,
                ),
            )

        def group_of(response: Any) -> Any:
            return response.groups[0] if hasattr(response, "groups") else response

        def error_of(response: Any) -> int:
            answer = group_of(response)
            code = int(getattr(answer, "error_code", 0))
            if code:
                return code
            # v0-1 report group errors on each partition.
            for topic in answer.topics:
                for part in topic.partitions:
                    if int(part.error_code) in _COORDINATOR_ERRORS:
                        return int(part.error_code)
            return 0

        response = await self._with_coordinator(group_id, call, error_of)
        answer = group_of(response)
        code = int(getattr(answer, "error_code", 0))
        if code:
            raise KafkaError(code, f"OffsetFetch for group {group_id!r}")
        result: dict[TopicPartition, OffsetAndMetadata] = {}
        failures: dict[Hashable, KafkaError] = {}
        for topic in answer.topics:
            for part in topic.partitions:
                tp = (str(topic.name), int(part.partition_index))
                if int(part.error_code):
                    failures[tp] = KafkaError(
                        part.error_code, f"OffsetFetch for {tp[0]}-{tp[1]} of group {group_id!r}"
                    )
                elif int(part.committed_offset) >= 0:
                    result[tp] = OffsetAndMetadata(
                        int(part.committed_offset),
                        str(part.metadata or ""),
                        int(getattr(part, "committed_leader_epoch", -1)),
                    )
        _raise_failures(failures)
        return result

    async def commit_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Commit offsets for ``group_id`` from outside the group (kafka-consumer-groups does
        this for resets). The coordinator refuses (UNKNOWN_MEMBER_ID) while it has members."""
        _check_group_ids([group_id])
        values: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, item in offsets.items():
            (checked,) = _check_partitions([tp])
            entry = item if isinstance(item, OffsetAndMetadata) else OffsetAndMetadata(item)
            if isinstance(entry.offset, bool) or not isinstance(entry.offset, int):
                raise ValueError(f"offset of {tp} must be an integer, not {entry.offset!r}")
            if entry.offset < 0:
                raise ValueError(f"offset of {tp} must be >= 0, not {entry.offset}")
            values[checked] = entry
        if not values:
            return
        topics = [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": values[(topic, p)].offset,
                        "committed_leader_epoch": values[(topic, p)].leader_epoch,
                        "committed_metadata": values[(topic, p)].metadata,
                    }
                    for p in parts
                ],
            }
            for topic, parts in _by_topic(list(values)).items()
        ]

        def call(node: int) -> Awaitable[Any]:
            return self._send(
                node,
                OFFSET_COMMIT,
                lambda v: build_request(
                    OFFSET_COMMIT,
                    v,
                    group_id=group_id,
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    group_instance_id=None,
                    retention_time=-1,
                    topics=topics,
                ),
            )

        def error_of(response: Any) -> int:
            codes = [int(p.error_code) for t in response.topics for p in t.partitions]
            return next((c for c in codes if c in _COORDINATOR_ERRORS), 0)

        response = await self._with_coordinator(group_id, call, error_of)
        failures: dict[Hashable, KafkaError] = {}
        for topic in response.topics:
            for part in topic.partitions:
                if int(part.error_code):
                    tp = (str(topic.name), int(part.partition_index))
                    failures[tp] = KafkaError(
                        part.error_code,
                        f"OffsetCommit for {tp[0]}-{tp[1]} of group {group_id!r}",
                    )
        _raise_failures({tp: failures[tp] for tp in values if tp in failures})

    # -- DeleteGroups / OffsetDelete -----------------------------------------------------------

    async def delete_groups(self, group_ids: Sequence[str]) -> None:
        """Delete empty groups with their offsets; NON_EMPTY_GROUP for a group with members,
        GROUP_ID_NOT_FOUND for one that does not exist."""
        _check_group_ids(group_ids)
        failures: dict[Hashable, KafkaError] = {}
        for group_id in dict.fromkeys(group_ids):

            def call(node: int, group_id: str = group_id) -> Awaitable[Any]:
                return self._send(
                    node,
                    DELETE_GROUPS,
                    lambda v: build_request(DELETE_GROUPS, v, groups_names=[group_id]),
                )

            response = await self._with_coordinator(
                group_id, call, lambda r: int(r.results[0].error_code)
            )
            code = int(response.results[0].error_code)
            if code:
                failures[group_id] = KafkaError(code, f"group {group_id!r}")
            else:
                self._coordinators.pop(group_id, None)
        _raise_failures(failures)

    async def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]) -> None:
        """Forget the group's committed offsets of ``partitions`` (KIP-496): allowed when the
        group is empty or does not subscribe to the topic (GROUP_SUBSCRIBED_TO_TOPIC)."""
        _check_group_ids([group_id])
        wanted = _check_partitions(partitions)
        if not wanted:
            return
        topics = [
            {"name": t, "partitions": [{"partition_index": p} for p in parts]}
            for t, parts in _by_topic(wanted).items()
        ]

        def call(node: int) -> Awaitable[Any]:
            return self._send(
                node,
                OFFSET_DELETE,
                lambda v: build_request(OFFSET_DELETE, v, group_id=group_id, topics=topics),
            )

        response = await self._with_coordinator(group_id, call, lambda r: int(r.error_code))
        if int(response.error_code):
            raise KafkaError(response.error_code, f"OffsetDelete for group {group_id!r}")
        failures: dict[Hashable, KafkaError] = {}
        for topic in response.topics:
            for part in topic.partitions:
                if int(part.error_code):
                    tp = (str(topic.name), int(part.partition_index))
                    failures[tp] = KafkaError(
                        part.error_code, f"OffsetDelete for {tp[0]}-{tp[1]} of group {group_id!r}"
                    )
        _raise_failures({tp: failures[tp] for tp in wanted if tp in failures})

    # -- composite views -----------------------------------------------------------------------

    async def log_offsets(
        self, partitions: Sequence[TopicPartition], spec: int
    ) -> dict[TopicPartition, int]:
        """ListOffsets for ``partitions``: spec -2 earliest, -1 latest, or a timestamp (the
        first offset at or after it; -1 when there is none)."""
        if not partitions:
            return {}
        answers = await list_offsets(
            self._client,
            dict.fromkeys(partitions, spec),
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
        )
        return {tp: offset for tp, (offset, _) in answers.items()}

    async def describe_offsets(
        self,
        group_id: str,
        *,
        topics: Sequence[str] | None = None,
        description: GroupDescription | None = None,
    ) -> list[PartitionOffsets]:
        """kafka-consumer-groups ``--describe``: every partition the group has an offset for
        or a member is assigned (only ``topics`` if given), sorted by topic and partition.
        Offsets kept for a topic or partition that no longer exists have no log end."""
        group = description or await self.describe_group(group_id)
        committed = await self.fetch_offsets(group_id)
        owners: dict[TopicPartition, MemberDescription] = {}
        for member in group.members:
            for tp in member.partitions:
                owners[tp] = member
        partitions = sorted(set(committed) | set(owners))
        if topics is not None:
            keep = set(topics)
            partitions = [tp for tp in partitions if tp[0] in keep]
        cluster = await self._client.metadata(sorted({t for t, _ in partitions}), refresh=True)
        existing = [
            tp
            for tp in partitions
            if (info := cluster.topics.get(tp[0])) is not None and tp[1] in info.partitions
        ]
        ends: dict[TopicPartition, int | None] = dict.fromkeys(partitions, None)
        ends.update(await self.log_offsets(existing, LATEST_TIMESTAMP))
        return [
            PartitionOffsets(
                tp[0],
                tp[1],
                committed[tp].offset if tp in committed else None,
                ends[tp],
                owners.get(tp),
            )
            for tp in partitions
        ]

    async def plan_reset(
        self, group_id: str, partitions: Sequence[TopicPartition], spec: ResetSpec
    ) -> dict[TopicPartition, int]:
        """The offsets kafka-consumer-groups ``--reset-offsets`` would commit: targets outside
        [log start, log end] are clamped into it, as Kafka does; a datetime after the last
        record resets to the log end; ``shift`` needs a committed offset (ValueError if none)."""
        wanted = sorted(set(_check_partitions(partitions)))
        if not wanted:
            return {}
        earliest = await self.log_offsets(wanted, EARLIEST_TIMESTAMP)
        latest = await self.log_offsets(wanted, LATEST_TIMESTAMP)
        targets: dict[TopicPartition, int]
        if spec.strategy == "earliest":
            targets = dict(earliest)
        elif spec.strategy == "latest":
            targets = dict(latest)
        elif spec.strategy == "offset":
            targets = dict.fromkeys(wanted, spec.value)
        elif spec.strategy == "datetime":
            found = await self.log_offsets(wanted, spec.value)
            targets = {tp: latest[tp] if found[tp] < 0 else found[tp] for tp in wanted}
        else:
            committed = await self.fetch_offsets(group_id, wanted)
            missing = [tp for tp in wanted if tp not in committed]
            if missing:
                topic, partition = missing[0]
                raise ValueError(
                    f"Cannot shift offset for partition {topic}-{partition} since there is "
                    f"no current committed offset (group {group_id!r})"
                )
            targets = {tp: committed[tp].offset + spec.value for tp in wanted}
        return {tp: min(max(targets[tp], earliest[tp]), latest[tp]) for tp in wanted}


class SyncGroupAdmin(_SyncBase):
    """Blocking :class:`GroupAdmin` on a private event-loop thread; same keyword arguments."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **config: Any) -> None:
        self._admin: GroupAdmin = self._start(
            "odradek-sync-group-admin", lambda: GroupAdmin(bootstrap_servers, **config)
        )

    @property
    def admin(self) -> GroupAdmin:
        """The async admin (only to be used from its loop)."""
        return self._admin

    def find_coordinator(self, group_id: str, *, refresh: bool = False) -> int:
        return self._loop.run(self._admin.find_coordinator(group_id, refresh=refresh))

    def list_groups(self, states: Sequence[str] = ()) -> list[GroupListing]:
        return self._loop.run(self._admin.list_groups(states))

    def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupDescription]:
        return self._loop.run(self._admin.describe_groups(group_ids))

    def describe_group(self, group_id: str) -> GroupDescription:
        return self._loop.run(self._admin.describe_group(group_id))

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._loop.run(self._admin.fetch_offsets(group_id, partitions))

    def commit_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        self._loop.run(self._admin.commit_offsets(group_id, offsets))

    def delete_groups(self, group_ids: Sequence[str]) -> None:
        self._loop.run(self._admin.delete_groups(group_ids))

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]) -> None:
        self._loop.run(self._admin.delete_offsets(group_id, partitions))

    def describe_offsets(
        self, group_id: str, *, topics: Sequence[str] | None = None
    ) -> list[PartitionOffsets]:
        return self._loop.run(self._admin.describe_offsets(group_id, topics=topics))

    def plan_reset(
        self, group_id: str, partitions: Sequence[TopicPartition], spec: ResetSpec
    ) -> dict[TopicPartition, int]:
        return self._loop.run(self._admin.plan_reset(group_id, partitions, spec))

    def close(self) -> None:
        self._close(self._admin)
