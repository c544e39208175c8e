"""CreateTopics, DeleteTopics and CreatePartitions (DeleteRecords: delete_records.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import Ticker, element_builder, error_code, respond_many
from odradek.cluster.metadata import MetadataError

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer


def _failure(exc: MetadataError) -> dict[str, Any]:
    return {"error_code": error_code(exc.error_name), "error_message": str(exc)}


def _check_assignments(server: KafkaServer, assignments: Any) -> None:
    """Manual replica assignments may only name brokers that exist."""
    known = {b.node_id for b in server.metadata.brokers()}
    for assignment in assignments or ():
        ids = [int(b) for b in getattr(assignment, "broker_ids", ())]
        if not ids or len(set(ids)) != len(ids) or not set(ids) <= known:
            raise MetadataError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"replica assignment {ids} names unknown or duplicate brokers",
            )


async def handle_create_topics(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    validate_only = bool(getattr(request, "validate_only", False))
    results = []
    seen: set[str] = set()
    ticker = Ticker()
    for topic in request.topics:
        await ticker.tick()
        entry: dict[str, Any] = {
            "name": topic.name,
            "error_code": ErrorCode.none,
            "num_partitions": -1,
            "replication_factor": -1,
        }
        if topic.name in seen:
            entry.update(
                error_code=ErrorCode.invalid_request,
                error_message=f"topic {topic.name!r} appears twice in the request",
            )
            results.append(entry)
            continue
        seen.add(topic.name)
        num_partitions = int(topic.num_partitions)
        replication_factor = int(topic.replication_factor)
        assignments = list(getattr(topic, "assignments", ()) or ())
        try:
            if assignments:
                if num_partitions != -1 or replication_factor != -1:
                    raise MetadataError(
                        "INVALID_REQUEST",
                        "give either replica assignments or partitions and replication factor",
                    )
                _check_assignments(server, assignments)
                num_partitions = len(assignments)
                replication_factor = len(assignments[0].broker_ids)
            configs = {c.name: c.value for c in topic.configs if c.value is not None}
            await server.topics.create_topic_async(
                topic.name,
                num_partitions,
                replication_factor,
                configs,
                validate_only=validate_only,
            )
            created = server.metadata.topic(topic.name)
            if created is not None and not validate_only:
                entry["topic_id"] = created.topic_id
                entry["num_partitions"] = len(created.partitions)
                entry["replication_factor"] = len(created.partitions[0].replicas)
            else:
                entry["num_partitions"] = (
                    num_partitions if num_partitions != -1 else server.config.get("num.partitions")
                )
                entry["replication_factor"] = (
                    replication_factor
                    if replication_factor != -1
                    else server.config.get("default.replication.factor")
                )
        except MetadataError as exc:
            entry.update(_failure(exc))
        results.append(entry)
    return respond_many(ctx, {"throttle_time": 0, "topics": results}, ticker.count)


async def handle_delete_topics(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    names = list(getattr(request, "topic_names", ()) or ())
    names += [t.name for t in getattr(request, "topics", ()) or () if t.name]
    responses = []
    ticker = Ticker()
    make_response = element_builder(ctx, "responses")
    for name in names:
        await ticker.tick()
        entry: dict[str, Any] = {"name": name, "error_code": ErrorCode.none}
        try:
            if name in ("__consumer_offsets", "__transaction_state"):
                raise MetadataError(
                    "INVALID_TOPIC_EXCEPTION", f"internal topic {name} cannot be deleted"
                )
            topic = server.metadata.topic(name)
            await server.topics.delete_topic_async(name)
            if topic is not None:
                entry["topic_id"] = topic.topic_id
        except MetadataError as exc:
            entry.update(_failure(exc))
        responses.append(make_response(entry))
    return respond_many(ctx, {"throttle_time": 0, "responses": responses}, ticker.count)


async def handle_create_partitions(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    validate_only = bool(getattr(request, "validate_only", False))
    results = []
    ticker = Ticker()
    for topic in request.topics:
        await ticker.tick()
        entry: dict[str, Any] = {"name": topic.name, "error_code": ErrorCode.none}
        try:
            if topic.assignments:
                _check_assignments(server, topic.assignments)
            await server.topics.add_partitions_async(
                topic.name, int(topic.count), validate_only=validate_only
            )
        except MetadataError as exc:
            entry.update(_failure(exc))
        results.append(entry)
    return respond_many(ctx, {"throttle_time": 0, "results": results}, ticker.count)
