"""OffsetForLeaderEpoch (KIP-101/KIP-279/KIP-320): where a leader epoch ends in the log.

A follower becoming one asks its leader for the end offset of its own latest epoch and
truncates what lies beyond (see replica_fetcher.py); consumers ask it to detect a log
truncated under them. Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere), and a
``current_leader_epoch`` other than the leader's is fenced as in Fetch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import Ticker, element_builder, respond_many

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


def end_offset_for(
    server: KafkaServer, topic: str, index: int, current: int, requested: int
) -> tuple[ErrorCode, int, int]:
    """(error, leader epoch, end offset) for one partition."""
    replica_manager = server.replica_manager
    partition = replica_manager.leader_or_error(topic, index)
    if isinstance(partition, int):
        return ErrorCode(partition), -1, -1
    if current >= 0 and current < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch, -1, -1
    if current > partition.leader_epoch:
        return ErrorCode.unknown_leader_epoch, -1, -1
    log_ = partition.log
    epoch, end = log_.leader_epoch_cache.end_offset_for(requested, log_.log_end_offset)
    return ErrorCode.none, epoch, end


async def handle_offset_for_leader_epoch(
    server: KafkaServer, ctx: RequestContext, request: Any
) -> Any:
    make_partition = element_builder(ctx, "topics", "partitions")
    ticker = Ticker()
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            await ticker.tick()
            code, epoch, end = end_offset_for(
                server,
                topic.topic,
                int(p.partition),
                int(getattr(p, "current_leader_epoch", -1)),
                int(p.leader_epoch),
            )
            partitions.append(
                make_partition(
                    {
                        "error_code": code,
                        "partition": p.partition,
                        "leader_epoch": epoch if code == ErrorCode.none else UNDEFINED_EPOCH,
                        "end_offset": end if code == ErrorCode.none else UNDEFINED_EPOCH_OFFSET,
                    }
                )
            )
        topics.append({"topic": topic.topic, "partitions": partitions})
    return respond_many(ctx, {"throttle_time": 0, "topics": topics}, ticker.count)
