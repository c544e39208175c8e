"""GroupMember: one member of a classic consumer group, for ``odradek consume --group``.

This is the smallest correct member of Kafka's classic group protocol, not a full group
consumer (no incremental rebalancing, no static membership, one assignor):

* :meth:`GroupMember.join` — JoinGroup with protocol type ``consumer`` and the ``range``
  assignor (answering MEMBER_ID_REQUIRED with the id the coordinator gave, as KIP-394
  asks), then SyncGroup. The leader computes the range assignment from every member's
  subscription and the topics' partition counts, exactly as Kafka's RangeAssignor: per
  topic, members sorted by id, the first ``partitions % members`` get one extra partition.
* :meth:`GroupMember.heartbeat` — Heartbeat; False when the member must join again
  (REBALANCE_IN_PROGRESS, or the coordinator forgot this member or generation).
* :meth:`GroupMember.commit` — OffsetCommit as this member of this generation.
* :meth:`GroupMember.leave` — LeaveGroup, so the group rebalances at once instead of after
  the session timeout.

Because the member really joins, ``odradek groups describe`` and kafka-consumer-groups show
it with its client id, host and assigned partitions, and its commits are the group's.

Wire formats written here (Kafka's ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment``, version 0, non-flexible)::

    subscription: int16 version, int32 count + topics (int16 length + UTF-8), bytes user_data
    assignment:   int16 version, int32 count + (topic, int32 count + int32 partitions...),
                  bytes user_data          (bytes = int32 length + data, -1 for null)
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.entities import build_request
from odradek.client.errors import KafkaError
from odradek.client.group_admin import (
    GroupAdmin,
    OffsetAndMetadata,
    decode_consumer_assignment,
)

__all__ = [
    "REJOIN_ERRORS",
    "GroupMember",
    "decode_subscription",
    "encode_assignment",
    "range_assign",
]

TopicPartition = tuple[str, int]

OFFSET_COMMIT = 8
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
PROTOCOL_TYPE = "consumer"
ASSIGNOR = "range"

_MAX_VERSIONS = {OFFSET_COMMIT: 8, JOIN_GROUP: 7, HEARTBEAT: 4, LEAVE_GROUP: 4, SYNC_GROUP: 5}
# Answers after which the member must join again; the last two also forget its identity.
REJOIN_ERRORS = frozenset(
    {ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation, ErrorCode.unknown_member_id}
)
_MAX_JOIN_ROUNDS = 10


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def encode_subscription(topics: Sequence[str]) -> bytes:
    return (
        struct.pack(">hi", 0, len(topics))
        + b"".join(_string(t) for t in topics)
        + struct.pack(">i", -1)
    )


def decode_subscription(data: bytes) -> list[str]:
    """The topics of a ``ConsumerProtocolSubscription`` (any version: later ones only
    append fields); ValueError if the bytes are not one."""
    try:
        version, count = struct.unpack_from(">hi", data, 0)
        if version < 0 or not 0 <= count <= len(data):
            raise ValueError(f"bad subscription header (version {version}, {count} topics)")
        pos, topics = 6, []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", data, pos)
            if length < 0 or pos + 2 + length > len(data):
                raise ValueError("subscription topic name runs past the end")
            topics.append(bytes(data[pos + 2 : pos + 2 + length]).decode())
            pos += 2 + length
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed consumer subscription: {exc}") from None
    return topics


def encode_assignment(partitions: Sequence[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    body = b"".join(
        _string(topic) + struct.pack(f">i{len(ps)}i", len(ps), *sorted(ps))
        for topic, ps in sorted(by_topic.items())
    )
    return struct.pack(">hi", 0, len(by_topic)) + body + struct.pack(">i", -1)


def range_assign(
    subscriptions: Mapping[str, Sequence[str]], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: member id -> its partitions."""
    result: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        count = partition_counts.get(topic, 0)
        each, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            length = each + (1 if index < extra else 0)
            result[member].extend((topic, p) for p in range(start, start + length))
            start += length
    return result


class GroupMember(GroupAdmin):
    """A member of ``group_id`` subscribed to ``topics``. Use ``async with``."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group_id: str,
        topics: Sequence[str],
        *,
        client_id: str = "odradek-consumer",
        session_timeout_ms: int = 45000,
        rebalance_timeout_ms: int = 60000,
        heartbeat_interval_ms: int = 3000,
    ) -> None:
        # A JoinGroup is answered only when every member has rejoined (up to the rebalance
        # timeout), so requests may take that long; Kafka's consumer waits as long.
        super().__init__(
            bootstrap, client_id=client_id, request_timeout_ms=rebalance_timeout_ms + 5000
        )
        self.group_id = group_id
        self.topics = list(topics)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.member_id = ""
        self.generation = -1
        self.assignment: list[TopicPartition] = []

    async def _call(self, api_key: int, build: Callable[[int], object]) -> Any:
        """One request to the coordinator, at the highest version both sides support."""

        async def call(node: int) -> Any:
            connection = await self._client.connection(node)
            version = min(connection.version_for(api_key), _MAX_VERSIONS[api_key])
            return await self._client.send(connection.node_id, build(version))

        def error_of(response: Any) -> int:
            return int(getattr(response, "error_code", 0))

        return await self._with_coordinator(self.group_id, call, error_of)

    # -- membership ----------------------------------------------------------------------------

    async def join(self) -> list[TopicPartition]:
        """Join (or rejoin) the group; return this member's partitions."""
        for _ in range(_MAX_JOIN_ROUNDS):
            joined = await self._call(JOIN_GROUP, self._join_request)
            code = int(joined.error_code)
            if code == ErrorCode.member_id_required:
                self.member_id = str(joined.member_id)
                continue
            if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                self.member_id = ""
                continue
            if code == ErrorCode.rebalance_in_progress:
                continue
            if code:
                raise KafkaError(code, f"JoinGroup of group {self.group_id!r}")
            self.member_id = str(joined.member_id)
            self.generation = int(joined.generation_id)
            assignments = await self._assign(joined) if joined.leader == self.member_id else {}
            synced = await self._call(SYNC_GROUP, lambda v, a=assignments: self._sync_request(v, a))
            code = int(synced.error_code)
            if code in REJOIN_ERRORS:
                if code != ErrorCode.rebalance_in_progress:
                    self.member_id = ""
                continue
            if code:
                raise KafkaError(code, f"SyncGroup of group {self.group_id!r}")
            self.assignment = sorted(
                decode_consumer_assignment(bytes(synced.assignment)).partitions
            )
            return self.assignment
        raise KafkaError(
            ErrorCode.rebalance_in_progress, f"group {self.group_id!r} kept rebalancing"
        )

    def _join_request(self, version: int) -> object:
        return build_request(
            JOIN_GROUP,
            version,
            group_id=self.group_id,
            session_timeout=self.session_timeout_ms,
            rebalance_timeout=self.rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type=PROTOCOL_TYPE,
            protocols=[{"name": ASSIGNOR, "metadata": encode_subscription(self.topics)}],
            reason=None,
        )

    async def _assign(self, joined: Any) -> dict[str, bytes]:
        """As the leader: the range assignment of every member, encoded."""
        subscriptions: dict[str, list[str]] = {}
        for member in joined.members:
            try:
                subscriptions[str(member.member_id)] = decode_subscription(bytes(member.metadata))
            except ValueError:
                subscriptions[str(member.member_id)] = []
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        cluster = await self._client.metadata(topics)
        counts = {t: len(cluster.topics[t].partitions) for t in topics if t in cluster.topics}
        return {m: encode_assignment(ps) for m, ps in range_assign(subscriptions, counts).items()}

    def _sync_request(self, version: int, assignments: Mapping[str, bytes]) -> object:
        return build_request(
            SYNC_GROUP,
            version,
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=ASSIGNOR,
            assignments=[{"member_id": m, "assignment": a} for m, a in assignments.items()],
        )

    async def heartbeat(self) -> bool:
        """Tell the coordinator this member is alive; False if it must join again."""
        response = await self._call(
            HEARTBEAT,
            lambda v: build_request(
                HEARTBEAT,
                v,
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=None,
            ),
        )
        code = int(response.error_code)
        if code in REJOIN_ERRORS:
            if code != ErrorCode.rebalance_in_progress:
                self.member_id = ""
            return False
        if code:
            raise KafkaError(code, f"Heartbeat of group {self.group_id!r}")
        return True

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (the next offset to read, as Kafka's consumers commit) as this
        member. A rebalance that took the partitions away makes the commit fail: the error is
        raised and the new owner starts from the last successful commit, as in Kafka."""
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
                        "committed_offset": offsets[(topic, p)],
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                    for p in sorted(parts)
                ],
            }
            for topic, parts in sorted(by_topic.items())
        ]
        response = await self._call(
            OFFSET_COMMIT,
            lambda v: build_request(
                OFFSET_COMMIT,
                v,
                group_id=self.group_id,
                generation_id_or_member_epoch=self.generation,
                member_id=self.member_id,
                group_instance_id=None,
                retention_time=-1,
                topics=topics,
            ),
        )
        for topic in response.topics:
            for part in topic.partitions:
                if int(part.error_code):
                    raise KafkaError(
                        part.error_code,
                        f"OffsetCommit for {topic.name}-{part.partition_index} "
                        f"of group {self.group_id!r}",
                    )

    async def committed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets of this member's partitions."""
        return await self.fetch_offsets(self.group_id, self.assignment)

    async def leave(self) -> None:
        """Leave the group (best effort: a broker gone by now expires the member anyway)."""
        if not self.member_id:
            return
        member_id, self.member_id = self.member_id, ""
        await self._call(
            LEAVE_GROUP,
            lambda v: build_request(
                LEAVE_GROUP,
                v,
                group_id=self.group_id,
                member_id=member_id,
                members=[{"member_id": member_id, "group_instance_id": None, "reason": None}],
            ),
        )
