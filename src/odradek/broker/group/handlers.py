"""Group APIs: kio request entity in, kio response entity out, for every version kio has.

``GroupHandlers(coordinator, ...)`` offers one ``async handle_<api>(ctx, request)`` per API
and :meth:`GroupHandlers.handlers` maps API keys to them for the broker's dispatch table.
Requests are read with ``getattr`` (fields differ per version) and answers are built as
dicts that :func:`odradek.protocol.build.build_response` fits to the request's version.

Version notes (what changes between versions and how it is honoured):

* FindCoordinator v0-3 carry one ``key``; v4+ a batch of ``coordinator_keys`` (KIP-699). Key
  type 0 is a group, 1 a transactional id (answered through the transaction coordinator
  callback when the broker has one), anything else INVALID_REQUEST.
* JoinGroup v0 has no rebalance timeout (the session timeout is used, as Kafka does); v4+
  gets MEMBER_ID_REQUIRED first (KIP-394); v5+ static membership (KIP-345); v7+ returns the
  protocol type and a nullable protocol name (older versions get ""); v9 skip_assignment.
* LeaveGroup v0-2 leave one member (its error is the top-level error); v3+ a batch.
* OffsetCommit v2-v4 carry ``retention_time``; v6+ leader epochs; v7+ group instance ids.
  v10 addresses topics by id, which odradek does not have: such topics get UNKNOWN_TOPIC_ID.
* OffsetFetch v1 needs explicit topics; v2+ ``null`` topics means all; v0-1 report a group
  error on every partition, v2-7 as the top-level error; v8+ fetch several groups (KIP-709).
  v10 (topic ids) is answered UNKNOWN_TOPIC_ID per topic.
* DescribeGroups v6 answers an unknown group GROUP_ID_NOT_FOUND (KIP-1043); older versions
  describe it as a Dead group with no error, as Kafka did.
* ListGroups v4+ filters by state (KIP-518), v5+ by type (every group here is "classic").

``client_host`` is reported as Kafka does, ``/`` + address (what kafka-consumer-groups shows).
"""

from __future__ import annotations

import datetime
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from odradek.broker.group.coordinator import GroupCoordinator
from odradek.broker.group.group import GroupState
from odradek.broker.group.offsets import OffsetCommitRequestData
from odradek.broker.handlers.common import LARGE_RESPONSE_ITEMS, Ticker
from odradek.broker.requests import ResponseValues
from odradek.protocol.build import build_response
from odradek.protocol.versions import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)

__all__ = [
    "GROUP_API_VERSIONS",
    "GroupHandlers",
    "HandlerContext",
    "NodeAddress",
]


# Versions these handlers implement with Kafka's semantics (kio's range minus the topic-id
# versions of OffsetCommit/OffsetFetch). The protocol layer decides what is advertised.
GROUP_API_VERSIONS: dict[int, tuple[int, int]] = {
    FIND_COORDINATOR: (0, 6),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 6),
    LIST_GROUPS: (0, 5),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
}

NodeAddress = tuple[int, str, int]  # (node_id, host, port)
_GROUP_KEY_TYPE = 0
_TRANSACTION_KEY_TYPE = 1
# AclOperation bits a classic group supports (READ=3, DELETE=6, DESCRIBE=8), reported as
# authorized when asked: odradek has no authorizer in front of the group APIs.
_GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

_MESSAGES = {
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.coordinator_load_in_progress: "The coordinator is loading and hence can't "
    "process requests.",
    ErrorCode.not_coordinator: "This is not the correct coordinator.",
    ErrorCode.invalid_request: "This most likely occurs because of a request being malformed "
    "by the client library or the message was sent to an incompatible broker.",
    ErrorCode.group_id_not_found: "The group id does not exist.",
    ErrorCode.invalid_group_id: "The configured groupId is invalid.",
}


class _Header(Protocol):
    client_id: str | None


class HandlerContext(Protocol):
    """What the handlers need from the network layer's ``RequestContext``."""

    header: _Header
    client_host: str


CoordinatorLookup = Callable[[int], "NodeAddress | Awaitable[NodeAddress | None] | None"]
TransactionLookup = Callable[
    [str], "NodeAddress | ErrorCode | Awaitable[NodeAddress | ErrorCode | None] | None"
]


def _ms(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def _version(request: object) -> int:
    return int(type(request).__version__)  # type: ignore[attr-defined]


def _api_key(request: object) -> int:
    return int(type(request).__api_key__)  # type: ignore[attr-defined]


def _respond(request: object, values: dict[str, Any]) -> Any:
    return build_response(_api_key(request), _version(request), values)


def _respond_many(request: object, values: dict[str, Any], items: int) -> Any:
    """An answer listing ``items`` partitions: the network layer builds and encodes big
    ones off the event loop."""
    if items > LARGE_RESPONSE_ITEMS:
        return ResponseValues(values, items)
    return _respond(request, values)


def _client_id(ctx: HandlerContext) -> str:
    return ctx.header.client_id or ""


def _client_host(ctx: HandlerContext) -> str:
    host = ctx.client_host
    return host if host.startswith("/") else f"/{host}"


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class GroupHandlers:
    """The group API handlers, bound to one coordinator.

    ``coordinator_node(partition)`` returns the (node_id, host, port) of the leader of that
    ``__consumer_offsets`` partition, or None when there is none (the topic may be being
    created): clients then get COORDINATOR_NOT_AVAILABLE and retry. ``transaction_node(id)``
    does the same for transactional ids (None: not wired -> COORDINATOR_NOT_AVAILABLE).
    ``partition_exists(topic, partition)``, when given, makes OffsetCommit/OffsetDelete
    answer UNKNOWN_TOPIC_OR_PARTITION for partitions that do not exist, as Kafka does.
    Callbacks may be plain functions or coroutines.
    """

    def __init__(
        self,
        coordinator: GroupCoordinator,
        *,
        coordinator_node: CoordinatorLookup,
        transaction_node: TransactionLookup | None = None,
        partition_exists: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.coordinator_node = coordinator_node
        self.transaction_node = transaction_node
        self.partition_exists = partition_exists
        # (group id, partitions or None) -> partitions with a pending transactional commit;
        # set by the broker when it has a transaction coordinator (KIP-447 require_stable).
        self.unstable_partitions: (
            Callable[[str, list[tuple[str, int]] | None], set[tuple[str, int]]] | None
        ) = None

    def handlers(self) -> dict[int, Callable[[Any, Any], Awaitable[Any]]]:
        """API key -> ``async handler(ctx, request)``."""
        return {
            FIND_COORDINATOR: self.handle_find_coordinator,
            JOIN_GROUP: self.handle_join_group,
            HEARTBEAT: self.handle_heartbeat,
            LEAVE_GROUP: self.handle_leave_group,
            SYNC_GROUP: self.handle_sync_group,
            DESCRIBE_GROUPS: self.handle_describe_groups,
            LIST_GROUPS: self.handle_list_groups,
            OFFSET_COMMIT: self.handle_offset_commit,
            OFFSET_FETCH: self.handle_offset_fetch,
            DELETE_GROUPS: self.handle_delete_groups,
            OFFSET_DELETE: self.handle_offset_delete,
        }

    # -- FindCoordinator ---------------------------------------------------------------------
    async def handle_find_coordinator(self, ctx: HandlerContext, request: Any) -> Any:
        version = _version(request)
        key_type = int(getattr(request, "key_type", _GROUP_KEY_TYPE))
        if version >= 4:
            coordinators = [
                {"key": key, **await self._find_one(key_type, key)}
                for key in request.coordinator_keys
            ]
            return _respond(request, {"throttle_time": 0, "coordinators": coordinators})
        return _respond(
            request, {"throttle_time": 0, **await self._find_one(key_type, request.key)}
        )

    async def _find_one(self, key_type: int, key: str) -> dict[str, Any]:
        if key_type == _GROUP_KEY_TYPE:
            node = await _maybe_await(
                self.coordinator_node(self.coordinator.partition_for(key or ""))
            )
        elif key_type == _TRANSACTION_KEY_TYPE:
            node = (
                None
                if self.transaction_node is None
                else await _maybe_await(self.transaction_node(key))
            )
        else:
            node = ErrorCode.invalid_request
        if node is None:
            node = ErrorCode.coordinator_not_available
        if isinstance(node, ErrorCode):
            return {
                "error_code": node,
                "error_message": _MESSAGES.get(node, node.name),
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        node_id, host, port = node
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "node_id": node_id,
            "host": host,
            "port": port,
        }

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ----------------------------------------
    async def handle_join_group(self, ctx: HandlerContext, request: Any) -> Any:
        version = _version(request)
        session_timeout = _ms(request.session_timeout, 0)
        rebalance_timeout = (
            _ms(getattr(request, "rebalance_timeout", None), session_timeout)
            if version >= 1
            else session_timeout
        )
        result = await self.coordinator.join_group(
            group_id=request.group_id,
            member_id=request.member_id or "",
            group_instance_id=getattr(request, "group_instance_id", None),
            client_id=_client_id(ctx),
            client_host=_client_host(ctx),
            session_timeout_ms=session_timeout,
            rebalance_timeout_ms=rebalance_timeout,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
            reason=getattr(request, "reason", None),
        )
        protocol_name = result.protocol_name
        if version < 7 and protocol_name is None:
            protocol_name = ""  # not nullable before v7
        return _respond(
            request,
            {
                "throttle_time": 0,
                "error_code": result.error,
                "generation_id": result.generation_id,
                "protocol_type": result.protocol_type,
                "protocol_name": protocol_name,
                "leader": result.leader_id,
                "skip_assignment": result.skip_assignment,
                "member_id": result.member_id,
                "members": [
                    {"member_id": mid, "group_instance_id": iid, "metadata": metadata}
                    for mid, iid, metadata in result.members
                ],
            },
        )

    async def handle_sync_group(self, ctx: HandlerContext, request: Any) -> Any:
        assignments: dict[str, bytes] = {}
        for item in request.assignments:
            assignments[item.member_id] = item.assignment
        result = await self.coordinator.sync_group(
            group_id=request.group_id,
            generation_id=int(request.generation_id),
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            protocol_type=getattr(request, "protocol_type", None),
            protocol_name=getattr(request, "protocol_name", None),
            assignments=assignments,
        )
        return _respond(
            request,
            {
                "throttle_time": 0,
                "error_code": result.error,
                "protocol_type": result.protocol_type,
                "protocol_name": result.protocol_name,
                "assignment": result.assignment,
            },
        )

    async def handle_heartbeat(self, ctx: HandlerContext, request: Any) -> Any:
        error = self.coordinator.heartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            generation_id=int(request.generation_id),
        )
        return _respond(request, {"throttle_time": 0, "error_code": error})

    async def handle_leave_group(self, ctx: HandlerContext, request: Any) -> Any:
        version = _version(request)
        if version <= 2:
            error, per_member = self.coordinator.leave_group(
                group_id=request.group_id, members=[(request.member_id, None, None)]
            )
            if error is ErrorCode.none and per_member:
                error = per_member[0]
            return _respond(request, {"throttle_time": 0, "error_code": error})
        identities = [
            (m.member_id or "", m.group_instance_id, getattr(m, "reason", None))
            for m in request.members
        ]
        error, per_member = self.coordinator.leave_group(
            group_id=request.group_id, members=identities
        )
        members = [
            {"member_id": mid, "group_instance_id": iid, "error_code": member_error}
            for (mid, iid, _), member_error in zip(identities, per_member, strict=False)
        ]
        return _respond(request, {"throttle_time": 0, "error_code": error, "members": members})

    # -- offsets -----------------------------------------------------------------------------
    async def handle_offset_commit(self, ctx: HandlerContext, request: Any) -> Any:
        version = _version(request)
        offsets: dict[tuple[str, int], OffsetCommitRequestData] = {}
        fixed: dict[tuple[str, int], ErrorCode] = {}
        ticker = Ticker()  # a request may list a million partitions: let others in
        for topic in request.topics:
            name = getattr(topic, "name", None)
            for partition in topic.partitions:
                await ticker.tick()
                if name is None:
                    continue  # v10 topic ids: answered UNKNOWN_TOPIC_ID below
                tp = (name, int(partition.partition_index))
                if self.partition_exists is not None and not self.partition_exists(*tp):
                    fixed[tp] = ErrorCode.unknown_topic_or_partition
                    continue
                offsets[tp] = OffsetCommitRequestData(
                    offset=int(partition.committed_offset),
                    metadata=partition.committed_metadata,
                    leader_epoch=int(getattr(partition, "committed_leader_epoch", -1)),
                )
        retention = None
        if 2 <= version <= 4:
            retention = _ms(getattr(request, "retention_time", None), -1)
            if retention < 0:
                retention = None
        results = await self.coordinator.commit_offsets(
            group_id=request.group_id,
            member_id=request.member_id or "",
            group_instance_id=getattr(request, "group_instance_id", None),
            generation_id=int(request.generation_id_or_member_epoch),
            offsets=offsets,
            retention_ms=retention,
        )
        results.update(fixed)
        topics = []
        for topic in request.topics:
            name = getattr(topic, "name", None)
            partitions = []
            for partition in topic.partitions:
                await ticker.tick()
                if name is None:
                    error = ErrorCode.unknown_topic_id
                else:
                    error = results.get(
                        (name, int(partition.partition_index)), ErrorCode.unknown_server_error
                    )
                partitions.append(
                    {"partition_index": partition.partition_index, "error_code": error}
                )
            entry: dict[str, Any] = {"partitions": partitions}
            if name is None:
                entry["topic_id"] = getattr(topic, "topic_id", None)
            else:
                entry["name"] = name
            topics.append(entry)
        return _respond_many(request, {"throttle_time": 0, "topics": topics}, ticker.count // 2)

    async def handle_offset_fetch(self, ctx: HandlerContext, request: Any) -> Any:
        version = _version(request)
        require_stable = bool(getattr(request, "require_stable", False))
        if version >= 8:
            groups = [
                {
                    "group_id": group.group_id,
                    **self._fetch_group(group.group_id, group.topics, version, require_stable),
                }
                for group in request.groups
            ]
            return _respond(request, {"throttle_time": 0, "groups": groups})
        answer = self._fetch_group(request.group_id, request.topics, version, require_stable)
        return _respond(request, {"throttle_time": 0, **answer})

    def _fetch_group(
        self, group_id: str, topics: Any, version: int, require_stable: bool
    ) -> dict[str, Any]:
        requested: list[tuple[str, int]] | None = None
        unknown_ids: list[Any] = []
        if topics is not None:
            requested = []
            for topic in topics:
                name = getattr(topic, "name", None)
                if name is None:
                    unknown_ids.append(topic)
                    continue
                requested.extend((name, int(p)) for p in topic.partition_indexes)
        error, offsets = self.coordinator.fetch_offsets(
            group_id=group_id, partitions=requested, require_stable=require_stable
        )
        if error is not ErrorCode.none:
            if version < 2:
                # v0-1 have no group-level error: every requested partition carries it.
                by_topic: dict[str, list[dict[str, Any]]] = {}
                for topic_name, partition in requested or ():
                    by_topic.setdefault(topic_name, []).append(
                        _fetched_partition(partition, None, error)
                    )
                return {
                    "topics": [{"name": n, "partitions": p} for n, p in by_topic.items()],
                }
            return {"error_code": error, "topics": []}
        unstable: set[tuple[str, int]] = set()
        if require_stable and self.unstable_partitions is not None:
            unstable = self.unstable_partitions(group_id, requested)
            for tp in unstable:
                offsets.setdefault(tp, None)
        grouped: dict[str, list[dict[str, Any]]] = {}
        for (topic_name, partition), committed in offsets.items():
            if (topic_name, partition) in unstable:
                entry = _fetched_partition(partition, None, ErrorCode.unstable_offset_commit)
            else:
                entry = _fetched_partition(partition, committed, ErrorCode.none)
            grouped.setdefault(topic_name, []).append(entry)
        result_topics: list[dict[str, Any]] = [
            {"name": n, "partitions": p} for n, p in grouped.items()
        ]
        for topic in unknown_ids:
            result_topics.append(
                {
                    "topic_id": getattr(topic, "topic_id", None),
                    "partitions": [
                        _fetched_partition(int(p), None, ErrorCode.unknown_topic_id)
                        for p in topic.partition_indexes
                    ],
                }
            )
        return {"error_code": ErrorCode.none, "topics": result_topics}

    async def handle_offset_delete(self, ctx: HandlerContext, request: Any) -> Any:
        requested: list[tuple[str, int]] = []
        fixed: dict[tuple[str, int], ErrorCode] = {}
        for topic in request.topics:
            for partition in topic.partitions:
                tp = (topic.name, int(partition.partition_index))
                if self.partition_exists is not None and not self.partition_exists(*tp):
                    fixed[tp] = ErrorCode.unknown_topic_or_partition
                else:
                    requested.append(tp)
        error, results = await self.coordinator.delete_offsets(
            group_id=request.group_id, partitions=requested
        )
        if error is not ErrorCode.none:
            return _respond(request, {"throttle_time": 0, "error_code": error, "topics": []})
        results.update(fixed)
        topics = [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": results.get(
                            (topic.name, int(p.partition_index)), ErrorCode.none
                        ),
                    }
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ]
        return _respond(request, {"throttle_time": 0, "error_code": error, "topics": topics})

    # -- group administration ----------------------------------------------------------------
    async def handle_delete_groups(self, ctx: HandlerContext, request: Any) -> Any:
        names = list(request.groups_names)
        results = await self.coordinator.delete_groups(names)
        return _respond(
            request,
            {
                "throttle_time": 0,
                "results": [
                    {"group_id": name, "error_code": results.get(name, ErrorCode.none)}
                    for name in names
                ],
            },
        )

    async def handle_list_groups(self, ctx: HandlerContext, request: Any) -> Any:
        error, groups = self.coordinator.list_groups(
            states_filter=list(getattr(request, "states_filter", ()) or ()),
            types_filter=list(getattr(request, "types_filter", ()) or ()),
        )
        return _respond(
            request,
            {
                "throttle_time": 0,
                "error_code": error,
                "groups": [
                    {
                        "group_id": g.group_id,
                        "protocol_type": g.protocol_type,
                        "group_state": g.state.value,
                        "group_type": g.group_type,
                    }
                    for g in groups
                ],
            },
        )

    async def handle_describe_groups(self, ctx: HandlerContext, request: Any) -> Any:
        version = _version(request)
        include_ops = bool(getattr(request, "include_authorized_operations", False))
        described = []
        for group_id in request.groups:
            error, summary = self.coordinator.describe_group(group_id)
            entry: dict[str, Any] = {
                "group_id": group_id,
                "error_code": error,
                "error_message": None,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": (
                    _GROUP_AUTHORIZED_OPERATIONS if include_ops else _AUTHORIZED_OPERATIONS_OMITTED
                ),
            }
            if error is not ErrorCode.none:
                entry["error_message"] = _MESSAGES.get(error, error.name)
            elif summary is None:
                entry["group_state"] = GroupState.DEAD.value
                if version >= 6:
                    entry["error_code"] = ErrorCode.group_id_not_found
                    entry["error_message"] = f"Group {group_id} not found."
            else:
                entry["group_state"] = summary.state.value
                entry["protocol_type"] = summary.protocol_type
                entry["protocol_data"] = summary.protocol
                entry["members"] = [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in summary.members
                ]
            described.append(entry)
        return _respond(request, {"throttle_time": 0, "groups": described})


def _fetched_partition(partition: int, committed: Any, error: ErrorCode) -> dict[str, Any]:
    if committed is None:
        return {
            "partition_index": partition,
            "committed_offset": -1,
            "committed_leader_epoch": -1,
            "metadata": "",
            "error_code": error,
        }
    return {
        "partition_index": partition,
        "committed_offset": committed.offset,
        "committed_leader_epoch": committed.leader_epoch,
        "metadata": committed.metadata,
        "error_code": error,
    }
