"""DescribeLogDirs (API 35): the broker's log directory, its state, partitions and space.

As Kafka's ``ReplicaManager.describeLogDirs``: one result per log directory with its
absolute path. An offline directory answers KAFKA_STORAGE_ERROR and lists nothing (its
sizes cannot be trusted); an online one lists the requested partitions it holds (all
when ``topics`` is null) with their size on disk, an offset lag of 0 (there are no
future logs, so no replica is moving between directories) and ``is_future_key`` false.
v4 adds the total and usable bytes of the volume (-1 when unknown).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import respond

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer


def _wanted(request: Any) -> dict[str, set[int] | None] | None:
    """Requested partitions by topic (None: every topic)."""
    topics = getattr(request, "topics", None)
    if topics is None:
        return None
    return {str(t.topic): {int(p) for p in t.partitions} for t in topics}


async def handle_describe_log_dirs(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    manager = server.log_manager
    failure = manager.dir_failure
    entry: dict[str, Any] = {"log_dir": str(failure.directory), "topics": []}
    if failure.offline:
        entry["error_code"] = ErrorCode.kafka_storage_error
    else:
        wanted = _wanted(request)
        topics: dict[str, list[dict[str, Any]]] = {}
        for partition in sorted(
            server.replica_manager.partitions(), key=lambda p: (p.topic, p.index)
        ):
            if wanted is not None:
                indexes = wanted.get(partition.topic)
                if indexes is None or partition.index not in indexes:
                    continue
            topics.setdefault(partition.topic, []).append(
                {
                    "partition_index": partition.index,
                    "partition_size": partition.log.size_in_bytes,
                    "offset_lag": 0,
                    "is_future_key": False,
                }
            )
        total, usable = manager.disk_usage()
        entry.update(
            error_code=ErrorCode.none,
            topics=[{"name": name, "partitions": parts} for name, parts in topics.items()],
            total_bytes=total,
            usable_bytes=usable,
        )
    return respond(ctx, {"throttle_time": 0, "error_code": ErrorCode.none, "results": [entry]})
