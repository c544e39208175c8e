"""ConsumerCoordinator: one member's conversation with its group coordinator.

This is the wire side of Kafka's ``AbstractCoordinator``/``ConsumerCoordinator``: JoinGroup
and SyncGroup (with the leader's assignment computed by a callback), Heartbeat, LeaveGroup,
OffsetCommit and OffsetFetch, plus the member's identity (member id, generation, chosen
protocol, ``group.instance.id``). It keeps no partitions and runs no callbacks: the group
consumer (:mod:`odradek.client.group_consumer`) decides when to join and what to revoke.

As in the Java client the coordinator gets a connection of its own (node id
``2**31 - 1 - coordinator``), so a JoinGroup the broker holds for the whole rebalance never
queues behind, or ahead of, the member's fetches.

JoinGroup answers handled as Kafka does: MEMBER_ID_REQUIRED (KIP-394) -> join again with
the id given; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION -> forget the identity and join again;
REBALANCE_IN_PROGRESS -> join again; FENCED_INSTANCE_ID and anything else -> raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection
from odradek.client.core import KafkaClient
from odradek.client.entities import build_request
from odradek.client.errors import ClientError, KafkaError
from odradek.client.group_admin import GroupAdmin, OffsetAndMetadata

log = logging.getLogger(__name__)

__all__ = [
    "COORDINATOR_ERRORS",
    "GENERATION_ERRORS",
    "CommitFailedError",
    "ConsumerCoordinator",
    "JoinedMember",
]

TopicPartition = tuple[str, int]

OFFSET_COMMIT = 8
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1

# Highest versions whose fields this module fills in (kio drops fields a version lacks).
_MAX_VERSIONS = {OFFSET_COMMIT: 8, JOIN_GROUP: 7, HEARTBEAT: 4, LEAVE_GROUP: 4, SYNC_GROUP: 5}
_COORDINATOR_ID_BASE = 2**31 - 1
_ATTEMPTS = 5
_MAX_JOIN_ROUNDS = 20

COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
    }
)
# The coordinator no longer knows this member (or this generation of it): join from scratch.
GENERATION_ERRORS = frozenset(
    {ErrorCode.illegal_generation, ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id}
)


class CommitFailedError(KafkaError):
    """Kafka's CommitFailedException: the group rebalanced and gave the partitions to another
    member (the generation or member id is no longer current), so this commit cannot count."""


@dataclass(frozen=True)
class JoinedMember:
    """One entry of a JoinGroup answer, as the leader sees it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


# The leader's job: (protocol name, members) -> member id -> encoded assignment.
AssignCallback = Callable[[str, list[JoinedMember]], Awaitable[dict[str, bytes]]]


class ConsumerCoordinator:
    """The group protocol for one member of ``group_id``. Borrows ``client``."""

    def __init__(
        self,
        client: KafkaClient,
        group_id: str,
        *,
        group_instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        request_timeout_ms: int,
        retry_backoff_ms: int,
    ) -> None:
        self.client = client
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self._admin = GroupAdmin(
            client, request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms
        )
        self._connection: BrokerConnection | None = None
        self._connecting = asyncio.Lock()

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader_id

    def reset_generation(self) -> None:
        """Forget the generation and member id (Kafka's resetGenerationOnResponseError)."""
        self.generation = NO_GENERATION
        self.member_id = ""
        self.protocol_name = None
        self.leader_id = None

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close("consumer closed")

    # -- plumbing ------------------------------------------------------------------------------

    async def _coordinator_connection(self) -> BrokerConnection:
        async with self._connecting:
            if self._connection is not None and self._connection.connected:
                return self._connection
            node = await self._admin.find_coordinator(self.group_id, refresh=True)
            broker = self.client.cluster.brokers.get(node)
            if broker is None:
                raise ClientError(f"coordinator {node} of group {self.group_id!r} is unknown")
            connection = BrokerConnection(
                broker.host,
                broker.port,
                node_id=_COORDINATOR_ID_BASE - node,
                client_id=self.client.client_id,
                request_timeout_ms=self.request_timeout_ms,
                security=self.client.security,
            )
            await connection.connect(self.client.connect_timeout_ms)
            self._connection = connection
            return connection

    async def _coordinator_dead(self, why: object) -> None:
        log.info("group %s: coordinator unavailable (%s), looking it up again", self.group_id, why)
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close("coordinator unavailable")

    async def _request(
        self,
        api_key: int,
        build: Callable[[int], object],
        *,
        timeout_ms: int | None = None,
        error_of: Callable[[Any], int] | None = None,
    ) -> Any:
        """One request to the coordinator, retried while it moves or cannot be reached."""
        last: Exception | None = None
        for attempt in range(_ATTEMPTS):
            if attempt:
                await asyncio.sleep(self.retry_backoff_ms / 1000 * attempt)
            try:
                connection = await self._coordinator_connection()
                version = min(connection.version_for(api_key), _MAX_VERSIONS[api_key])
                response = await connection.send(build(version), timeout_ms=timeout_ms)
            except asyncio.CancelledError:
                if api_key in (JOIN_GROUP, SYNC_GROUP):
                    # The broker holds a JoinGroup until the rebalance completes and answers
                    # a connection's requests in order: whatever we send next (LeaveGroup on
                    # close) would wait behind it. A fresh connection does not.
                    await self._coordinator_dead("a join was abandoned")
                raise
            except ClientError as exc:
                await self._coordinator_dead(exc)
                last = exc
                continue
            except KafkaError as exc:
                if exc.code not in COORDINATOR_ERRORS:
                    raise
                await self._coordinator_dead(exc)
                last = exc
                continue
            code = error_of(response) if error_of else int(getattr(response, "error_code", 0))
            if code in COORDINATOR_ERRORS:
                await self._coordinator_dead(KafkaError(code))
                last = KafkaError(code, f"group {self.group_id!r}")
                continue
            return response
        assert last is not None
        raise last

    # -- membership ----------------------------------------------------------------------------

    async def join(
        self, protocols: Sequence[tuple[str, bytes]], assign: AssignCallback
    ) -> tuple[str, bytes]:
        """JoinGroup then SyncGroup until a generation is complete; return the protocol
        (assignor) the group chose and this member's encoded assignment."""
        for _ in range(_MAX_JOIN_ROUNDS):
            joined = await self._request(
                JOIN_GROUP,
                lambda v: build_request(
                    JOIN_GROUP,
                    v,
                    group_id=self.group_id,
                    session_timeout=self.session_timeout_ms,
                    rebalance_timeout=self.rebalance_timeout_ms,
                    member_id=self.member_id,
                    group_instance_id=self.group_instance_id,
                    protocol_type=PROTOCOL_TYPE,
                    protocols=[{"name": n, "metadata": m} for n, m in protocols],
                    reason=None,
                ),
                # The coordinator answers once every member rejoined (or the rebalance
                # timeout passed), so the request may take that long; Kafka waits as long.
                timeout_ms=self.rebalance_timeout_ms + 5000,
            )
            code = int(joined.error_code)
            if code == ErrorCode.member_id_required:
                self.member_id = str(joined.member_id)
                continue
            if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                self.reset_generation()
                continue
            if code == ErrorCode.rebalance_in_progress:
                continue
            if code:
                raise KafkaError(code, f"JoinGroup of group {self.group_id!r}")
            self.member_id = str(joined.member_id)
            self.generation = int(joined.generation_id)
            self.protocol_name = str(joined.protocol_name)
            self.leader_id = str(joined.leader)
            assignments: list[dict[str, object]] = []
            if self.is_leader:
                members = [
                    JoinedMember(
                        str(m.member_id),
                        getattr(m, "group_instance_id", None),
                        bytes(m.metadata),
                    )
                    for m in joined.members
                ]
                assigned = await assign(self.protocol_name, members)
                assignments = [{"member_id": m, "assignment": a} for m, a in assigned.items()]
            synced = await self._request(
                SYNC_GROUP,
                lambda v, assignments=assignments: build_request(
                    SYNC_GROUP,
                    v,
                    group_id=self.group_id,
                    generation_id=self.generation,
                    member_id=self.member_id,
                    group_instance_id=self.group_instance_id,
                    protocol_type=PROTOCOL_TYPE,
                    protocol_name=self.protocol_name,
                    assignments=assignments,
                ),
                timeout_ms=self.rebalance_timeout_ms + 5000,
            )
            code = int(synced.error_code)
            if code == ErrorCode.rebalance_in_progress:
                continue
            if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                self.reset_generation()
                continue
            if code:
                raise KafkaError(code, f"SyncGroup of group {self.group_id!r}")
            return self.protocol_name, bytes(synced.assignment)
        raise KafkaError(
            ErrorCode.rebalance_in_progress, f"group {self.group_id!r} kept rebalancing"
        )

    async def heartbeat(self) -> int:
        """One Heartbeat of the current generation; its error code (0 when all is well)."""
        response = await self._request(
            HEARTBEAT,
            lambda v: build_request(
                HEARTBEAT,
                v,
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            ),
        )
        return int(response.error_code)

    async def leave(self, reason: str) -> None:
        """LeaveGroup, for a dynamic member only: a static member (``group.instance.id``)
        keeps its place until its session times out, as in Kafka, so a restart within the
        session gets its partitions back without a rebalance."""
        member_id = self.member_id
        self.reset_generation()
        if not member_id or self.group_instance_id is not None:
            return
        log.info("group %s: member %s leaves (%s)", self.group_id, member_id, reason)
        await self._request(
            LEAVE_GROUP,
            lambda v: build_request(
                LEAVE_GROUP,
                v,
                group_id=self.group_id,
                member_id=member_id,
                members=[{"member_id": member_id, "group_instance_id": None, "reason": reason}],
            ),
        )

    # -- offsets -------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """OffsetCommit as this member of this generation (or as a group-less committer
        before any join). Raises :class:`CommitFailedError` when the group moved on."""
        if not offsets:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in offsets:
            by_topic.setdefault(topic, []).append(partition)
        topics = [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": offsets[(topic, p)].offset,
                        "committed_leader_epoch": offsets[(topic, p)].leader_epoch,
                        "committed_metadata": offsets[(topic, p)].metadata,
                    }
                    for p in sorted(parts)
                ],
            }
            for topic, parts in sorted(by_topic.items())
        ]

        def error_of(response: Any) -> int:
            for topic in response.topics:
                for part in topic.partitions:
                    if int(part.error_code) in COORDINATOR_ERRORS:
                        return int(part.error_code)
            return 0

        response = await self._request(
            OFFSET_COMMIT,
            lambda v: build_request(
                OFFSET_COMMIT,
                v,
                group_id=self.group_id,
                generation_id_or_member_epoch=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                retention_time=-1,
                topics=topics,
            ),
            error_of=error_of,
        )
        for topic in response.topics:
            for part in topic.partitions:
                code = int(part.error_code)
                if not code:
                    continue
                where = f"OffsetCommit of {topic.name}-{part.partition_index}"
                if code in GENERATION_ERRORS:
                    self.reset_generation()
                    raise CommitFailedError(
                        code,
                        f"{where}: the group {self.group_id!r} rebalanced and this member's "
                        "generation is gone; the partitions may belong to another member now",
                    )
                raise KafkaError(code, f"{where} of group {self.group_id!r}")

    async def fetch_committed(
        self, partitions: Sequence[TopicPartition], *, require_stable: bool = False
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets of ``partitions`` (those without one are left out).

        ``require_stable`` (what a read_committed consumer asks, as Java's does): an offset
        still pending in a transaction is waited for (UNSTABLE_OFFSET_COMMIT is retried,
        for up to ``request_timeout_ms``), so a consumer taking over never starts from the
        offset before a commit that is completing."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_ms / 1000
        while True:
            try:
                return await self._admin.fetch_offsets(
                    self.group_id, list(partitions), require_stable=require_stable
                )
            except KafkaError as exc:
                codes = {exc.code, *(e.code for e in exc.errors.values())}
                if ErrorCode.unstable_offset_commit not in codes or loop.time() >= deadline:
                    raise
            await asyncio.sleep(self.retry_backoff_ms / 1000)
