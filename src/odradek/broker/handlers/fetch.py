"""Fetch and ListOffsets: how consumers and followers read.

A fetch naming a ``replica_id`` (>= 0) comes from a follower: it reads up to the log end
rather than the high watermark, and its fetch offset tells the leader the follower's log
end offset (the replica manager moves the high watermark and the ISR on it).

A fetch that finds fewer than ``min_bytes`` waits in the fetch purgatory until enough
data arrives (an append to one of its partitions wakes it) or ``max_wait`` passes. The
answer carries record data as file regions of the segment files; the network layer sends
those with ``sendfile`` straight from the page cache.

A consumer's Fetch v11+ carries its rack (KIP-392): such a consumer may read from a
follower (up to the follower's high watermark), and a leader with
``replica.selector.class`` may answer it with a ``preferred_read_replica`` at once
(no records) so it fetches from a replica in its own rack.

Fetch sessions (KIP-227, :mod:`odradek.broker.fetch_session`) decide which partitions a
request reads (an incremental request reads every partition of its session) and which
the answer lists (an incremental answer leaves out partitions with nothing new).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.client_quotas import CONSUMER_BYTE_RATE
from odradek.broker.fetch_session import FetchContext, PartitionRequest
from odradek.broker.handlers.common import (
    LARGE_RESPONSE_ITEMS,
    Ticker,
    element_builder,
    respond_many,
)
from odradek.broker.replica_manager import READ_COMMITTED, ReadResult
from odradek.broker.security.acl import Operation

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

FIRST_TOPIC_ID_VERSION = 13  # Fetch v13 names topics by id, and sessions remember which
_TOPIC_DENIED = ErrorCode.topic_authorization_failed


class _FetchPlan:
    """The partitions of one fetch request, read and re-read until the answer is ready."""

    def __init__(
        self,
        server: KafkaServer,
        request: Any,
        context: FetchContext,
        api_version: int = 0,
        authz: Any = None,
    ) -> None:
        self.server = server
        self._authz = authz  # with an authorizer: consumers need Read on each topic
        self.isolation_level = int(getattr(request, "isolation_level", 0))
        self.max_bytes = int(getattr(request, "max_bytes", 0x7FFFFFFF))
        self.min_bytes = int(request.min_bytes)
        self.replica_id = int(getattr(request, "replica_id", -1))
        # KIP-392 client metadata: consumers from v11 on ("" when no rack is set).
        self.client_rack: str | None = None
        if api_version >= 11 and self.replica_id < 0:
            self.client_rack = str(getattr(request, "rack_id", "") or "")
        self._context = context
        self.items: list[tuple[str, int, int, int]] = []
        # Follower fetches refused before reading (fenced epoch, not the leader).
        self.errors: dict[tuple[str, int], int] = {}

    async def collect(self) -> None:
        """List the partitions to read (the request's, or its session's), yielding to the
        loop now and then (a request may list a million)."""
        ticker = Ticker()
        readable: dict[str, bool] = {}
        for (topic, partition), wanted in self._context.items:
            await ticker.tick()
            self.items.append((topic, partition, wanted.fetch_offset, wanted.max_bytes))
            if self._authz is not None and self.replica_id < 0:
                # Followers were authorised as a whole (ClusterAction) before the handler.
                if topic not in readable:
                    readable[topic] = self._authz.topic(Operation.READ, topic)
                if not readable[topic]:
                    self.errors[(topic, partition)] = _TOPIC_DENIED
                    continue
            if self.replica_id >= 0:
                code = self.server.replica_manager.record_follower_fetch(
                    topic,
                    partition,
                    self.replica_id,
                    wanted.fetch_offset,
                    wanted.leader_epoch,
                    wanted.log_start_offset,
                )
                if code:
                    self.errors[(topic, partition)] = code

    def keys(self) -> list[tuple[str, int]]:
        return [(topic, partition) for topic, partition, _, _ in self.items]

    async def read_all(self) -> list[tuple[str, int, ReadResult]]:
        results = []
        remaining = self.max_bytes
        first = True
        ticker = Ticker()
        for topic, partition, offset, partition_max in self.items:
            await ticker.tick()
            limit = max(0, min(partition_max, remaining))
            refused = self.errors.get((topic, partition))
            if refused is not None:
                results.append((topic, partition, ReadResult(error_code=refused)))
                continue
            # Kafka returns at least one whole batch (even one larger than the limits) for
            # the first partition with data, so a consumer can always make progress.
            result = self.server.replica_manager.read(
                topic,
                partition,
                offset,
                limit,
                isolation_level=self.isolation_level,
                min_one_batch=first,
                replica_id=self.replica_id,
                client_rack=self.client_rack,
            )
            if result.size:
                first = False
                remaining -= result.size
            results.append((topic, partition, result))
        return results

    def enough(self, results: list[tuple[str, int, ReadResult]]) -> bool:
        """Whether a read answers the fetch now: ``min_bytes`` read, or a partition's
        error or preferred read replica to tell (as ``bytes_ready`` counts them)."""
        total = 0
        for _, _, result in results:
            if result.error_code or result.preferred_read_replica >= 0:
                return True
            total += result.size
        return total >= self.min_bytes

    def bytes_ready(self) -> int:
        total = 0
        for topic, partition, offset, _ in self.items:
            if (topic, partition) in self.errors:
                return self.min_bytes
            if self.client_rack and self.server.replica_manager.preferred_read_replica(
                topic, partition, offset, self.client_rack
            ):
                return self.min_bytes  # pointing at another replica is an answer: now
            available = self.server.replica_manager.bytes_available(
                topic,
                partition,
                offset,
                self.isolation_level,
                limit=self.min_bytes,
                replica_id=self.replica_id,
            )
            if available is None:
                return self.min_bytes  # an error is an answer: respond now
            total += available
            if total >= self.min_bytes:
                break
        return total


async def _fetch_data(request: Any) -> tuple[list[Any], list[tuple[str, int]]]:
    """The request's partitions (as the session cache keeps them) and forgotten ones."""
    fetch_data = []
    ticker = Ticker()
    for topic in request.topics:
        topic_id = getattr(topic, "topic_id", None)
        for p in topic.partitions:
            await ticker.tick()
            fetch_data.append(
                (
                    (topic.topic, int(p.partition)),
                    PartitionRequest(
                        int(p.fetch_offset),
                        int(p.partition_max_bytes),
                        int(getattr(p, "current_leader_epoch", -1)),
                        int(getattr(p, "log_start_offset", -1)),
                        topic_id,
                    ),
                )
            )
    forget = [
        (topic.topic, int(partition))
        for topic in getattr(request, "forgotten_topics_data", None) or ()
        for partition in topic.partitions
    ]
    return fetch_data, forget


async def handle_fetch(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    fetch_data, forget = await _fetch_data(request)
    version = ctx.header.api_version
    # Before v7 there are no sessions: every request is sessionless (epoch -1).
    session_id = int(getattr(request, "session_id", 0)) if version >= 7 else 0
    session_epoch = int(getattr(request, "session_epoch", -1)) if version >= 7 else -1
    context = server.fetch_manager.new_context(
        session_id,
        session_epoch,
        fetch_data,
        forget,
        privileged=int(getattr(request, "replica_id", -1)) >= 0,
        uses_topic_ids=version >= FIRST_TOPIC_ID_VERSION,
    )
    if context.error:
        return server.encode_fetch(ctx, context.error, 0, [])

    plan = _FetchPlan(server, request, context, version, ctx.authz)
    await plan.collect()
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    may_wait = max_wait_ms > 0 and plan.min_bytes > 0
    read = None
    if may_wait and plan.replica_id < 0:
        # A consumer's fetch is read first, as Kafka's fetchMessages does, and answered
        # with that read when it is enough: checking min_bytes first read the same batches
        # twice. (A follower's is checked first: reading it records replication-quota
        # bytes, which a read dropped for a wait would count twice.)
        read = await plan.read_all()
        may_wait = not plan.enough(read)
    if may_wait and plan.bytes_ready() < plan.min_bytes:
        await server.wait_for_data(
            plan.keys(), max_wait_ms, lambda: plan.bytes_ready() >= plan.min_bytes
        )
        read = None
    if read is None:
        read = await plan.read_all()
    error, response_session_id, results = context.finish(read)
    stats = server.stats
    if stats is not None:
        _count_bytes_out(stats, plan.replica_id, results)
    throttle_ms = _record_quota(server, ctx, plan.replica_id, results)
    if throttle_ms:
        # As Kafka: an over-quota consumer (byte rate or request time) gets an empty answer
        # with the throttle time, and what it was not sent is not counted against it.
        return server.encode_fetch(ctx, ErrorCode.none, response_session_id, [], throttle_ms)
    if len(results) > LARGE_RESPONSE_ITEMS:
        return await server.encode_fetch_off_loop(ctx, error, response_session_id, results)
    return server.encode_fetch(ctx, error, response_session_id, results)


def _record_quota(
    server: KafkaServer, ctx: RequestContext, replica_id: int, results: list[Any]
) -> int:
    """consumer_byte_rate and request_percentage: followers are exempt (replication has
    its own throttles); the larger throttle is answered, as Kafka."""
    quotas = server.client_quotas
    if replica_id >= 0:
        return 0
    request_ms = server.request_quota.throttle_now(ctx)  # request_percentage (KIP-124)
    if not quotas.enabled(CONSUMER_BYTE_RATE):
        return request_ms
    size = sum(region.length for _, _, result in results for region in result.regions)
    client_id = ctx.header.client_id or ""
    throttle_ms = quotas.record(CONSUMER_BYTE_RATE, ctx.principal, client_id, size)
    if throttle_ms or request_ms:
        quotas.record(CONSUMER_BYTE_RATE, ctx.principal, client_id, -size)
        if throttle_ms and ctx.mute is not None:
            ctx.mute(throttle_ms)
    return max(throttle_ms, request_ms)


def _count_bytes_out(
    stats: Any, replica_id: int, results: list[tuple[str, int, ReadResult]]
) -> None:
    """BytesOutPerSec per topic for consumers, ReplicationBytesOutPerSec for followers."""
    if replica_id >= 0:
        stats.replicated_out(sum(result.size for _topic, _partition, result in results))
        return
    for topic, _partition, result in results:
        if result.error_code == 0:
            stats.fetched(topic, result.size)


async def handle_list_offsets(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    isolation_level = int(getattr(request, "isolation_level", 0))
    topics = []
    ticker = Ticker()
    make_partition = element_builder(ctx, "topics", "partitions")
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            await ticker.tick()
            entry: dict[str, Any] = {
                "partition_index": p.partition_index,
                "error_code": ErrorCode.none,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            partition = server.replica_manager.leader_or_error(topic.name, int(p.partition_index))
            if isinstance(partition, int):
                entry["error_code"] = ErrorCode(partition)
                partitions.append(make_partition(entry))
                continue
            entry["leader_epoch"] = partition.leader_epoch
            timestamp = int(p.timestamp)
            log_ = partition.log
            if timestamp == LATEST_TIMESTAMP:
                entry["offset"] = (
                    partition.last_stable_offset
                    if isolation_level == READ_COMMITTED
                    else partition.high_watermark
                )
            elif timestamp == EARLIEST_TIMESTAMP:
                entry["offset"] = log_.log_start_offset
            else:
                found = log_.offset_for_timestamp(timestamp)
                if found is not None:
                    offset, found_timestamp = found
                    # Never point a consumer past what it may read.
                    if offset < partition.high_watermark or timestamp == MAX_TIMESTAMP:
                        entry["offset"], entry["timestamp"] = offset, found_timestamp
            partitions.append(make_partition(entry))
        topics.append({"name": topic.name, "partitions": partitions})
    return respond_many(ctx, {"throttle_time": 0, "topics": topics}, ticker.count)
