"""DeleteRecords: move partitions' log start offsets up (Kafka's ReplicaManager.deleteRecords).

Per partition, as Kafka's ``Partition.deleteRecordsOnLeader``: only the leader deletes
(NOT_LEADER_OR_FOLLOWER elsewhere), only on a topic whose ``cleanup.policy`` includes
``delete`` (POLICY_VIOLATION), offset -1 meaning the high watermark, and never beyond the
high watermark (OFFSET_OUT_OF_RANGE). The leader's log start moves at once; followers
move theirs when their next fetch answer states it. The answer waits, up to the request's
``timeout_ms``, until the low watermark (the smallest log start offset among the leader
and its followers on live brokers) has reached the requested offset, as Kafka's
DelayedDeleteRecords does; a partition still short of it then answers REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import Ticker, millis, respond_many
from odradek.storage.errors import StorageError

if TYPE_CHECKING:
    from odradek.broker.replica_manager import Partition
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer

HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK


async def handle_delete_records(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    replica_manager = server.replica_manager
    topics = []
    waiting: list[tuple[Partition, int, dict[str, Any]]] = []
    ticker = Ticker()
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            await ticker.tick()
            index = int(p.partition_index)
            entry: dict[str, Any] = {
                "partition_index": index,
                "low_watermark": -1,
                "error_code": ErrorCode.none,
            }
            partitions.append(entry)
            partition = replica_manager.leader_or_error(topic.name, index)
            if isinstance(partition, int):
                entry["error_code"] = ErrorCode(partition)
                continue
            if not partition.log.config.delete:
                entry["error_code"] = ErrorCode.policy_violation
                continue
            offset = int(p.offset)
            if offset == HIGH_WATERMARK:
                offset = partition.high_watermark
            if offset < 0 or offset > partition.high_watermark:
                entry["error_code"] = ErrorCode.offset_out_of_range
                continue
            try:
                partition.log.maybe_increment_log_start_offset(offset)
            except StorageError as exc:
                entry["error_code"] = ErrorCode(exc.error_code)
                continue
            entry["low_watermark"] = replica_manager.low_watermark(partition)
            if entry["low_watermark"] < offset:
                waiting.append((partition, offset, entry))
        topics.append({"name": topic.name, "partitions": partitions})
    if waiting:
        await _await_followers(server, waiting, millis(request.timeout))
    return respond_many(ctx, {"throttle_time": 0, "topics": topics}, ticker.count)


async def _await_followers(
    server: KafkaServer, waiting: list[tuple[Partition, int, dict[str, Any]]], timeout_ms: int
) -> None:
    """Kafka's DelayedDeleteRecords: until every partition's low watermark reaches its
    offset (a follower fetch stating a new log start wakes it), or the timeout."""
    replica_manager = server.replica_manager

    def ready() -> bool:
        return all(
            partition.leader_id != server.broker_id
            or replica_manager.low_watermark(partition) >= offset
            for partition, offset, _entry in waiting
        )

    if not ready() and timeout_ms > 0:
        keys = list({(partition.topic, partition.index) for partition, _o, _e in waiting})
        await server.wait_for_data(keys, timeout_ms, ready, "DeleteRecords")
    for partition, offset, entry in waiting:
        if partition.leader_id != server.broker_id:  # deposed meanwhile
            entry["error_code"] = ErrorCode.not_leader_or_follower
            continue
        entry["low_watermark"] = replica_manager.low_watermark(partition)
        if entry["low_watermark"] < offset:
            entry["error_code"] = ErrorCode.request_timed_out
