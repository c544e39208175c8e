"""Produce. (InitProducerId is served by the transaction coordinator: broker/txn/handlers.py.)

acks=all (-1): once appended, the answer waits in the purgatory until the high watermark
passes the batch (every ISR member has it), as Kafka's DelayedProduce: it answers
REQUEST_TIMED_OUT when the request's timeout passes first, and
NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below ``min.insync.replicas``
meanwhile. The records stay in the log either way (the producer retries; idempotence
turns the retry into a duplicate that is answered, not written again).
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.client_quotas import PRODUCER_BYTE_RATE
from odradek.broker.handlers.common import Ticker, element_builder, millis, respond_many
from odradek.broker.replica_manager import AppendResult
from odradek.broker.requests import ChunkedResponse
from odradek.cluster.metadata import MetadataError, validate_topic_name
from odradek.protocol.produce_response import encode_produce_response

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer


# Answers listing up to this many partitions are encoded directly on the loop; larger
# ones go the generic way (built and encoded on the network threads).
_DIRECT_ENCODE_ITEMS = 1000
_NO_ERROR = ErrorCode.none


@functools.lru_cache(maxsize=4096)  # checked on every request; names repeat
def _legal_topic_name(name: str | None) -> bool:
    try:
        validate_topic_name(name or "")
    except MetadataError:
        return False
    return True


async def handle_produce(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    acks = int(request.acks)
    responses = []
    ticker = Ticker()
    # acks=all appends waiting for replication: (topic, partition, entry, required offset)
    pending: list[tuple[str, int, dict[str, Any], int]] = []
    # Large appends running on the append thread: (entry, topic, bytes, future result).
    offloaded: list[tuple[dict[str, Any], str, int, asyncio.Future[AppendResult]]] = []
    for topic_data in request.topic_data:
        name = topic_data.name
        partitions = []
        for partition_data in topic_data.partition_data:
            await ticker.tick()
            index = int(partition_data.index)
            entry: dict[str, Any] = {
                "index": index,
                "base_offset": -1,
                "log_append_time": None,
                "log_start_offset": -1,
            }
            if acks not in (-1, 0, 1):
                entry["error_code"] = ErrorCode.invalid_required_acks
            elif not _legal_topic_name(name):
                entry["error_code"] = ErrorCode.invalid_topic_exception
            elif partition_data.records is None or len(partition_data.records) == 0:
                entry["error_code"] = ErrorCode.invalid_record
                entry["error_message"] = "produce request carried no records"
            else:
                result = server.replica_manager.append_or_offload(
                    name, index, partition_data.records, required_acks=acks
                )
                size = len(partition_data.records)
                if isinstance(result, AppendResult):
                    _fill(server, entry, name, size, result, acks, pending)
                else:  # on the append thread: every partition is submitted before waiting
                    offloaded.append((entry, name, size, result))
            partitions.append(entry)
        responses.append({"name": name, "partition_responses": partitions})
    for entry, name, size, future in offloaded:
        # The connection handles nothing else meanwhile, so its answers stay in order and
        # its next request cannot overtake this one's appends (as Kafka's muted channel).
        _fill(server, entry, name, size, await future, acks, pending)
    if pending:
        await _await_replication(server, pending, millis(request.timeout))
    throttle_ms = _record_quota(server, ctx, request)
    if acks == 0:
        return None  # Kafka sends no response at all for acks=0
    if ticker.count <= _DIRECT_ENCODE_ITEMS and not throttle_ms:
        # The common small answer, written directly (no kio entities): most of the
        # per-request cost of a one-record produce otherwise.
        header = ctx.header
        encoded = encode_produce_response(
            header.correlation_id,
            header.api_version,
            [(topic["name"], topic["partition_responses"]) for topic in responses],
        )
        if encoded is not None:
            return ChunkedResponse([encoded])
    make_partition = element_builder(ctx, "responses", "partition_responses")
    # Building a kio entity per partition takes about a second for 400,000 of them: yield
    # while building too, as while appending (else the loop, and every client, waits).
    building = Ticker()
    for topic_response in responses:
        built = []
        for entry in topic_response["partition_responses"]:
            await building.tick()
            built.append(make_partition(entry))
        topic_response["partition_responses"] = built
    return respond_many(ctx, {"responses": responses, "throttle_time": throttle_ms}, ticker.count)


def _fill(
    server: KafkaServer,
    entry: dict[str, Any],
    name: str,
    size: int,
    result: AppendResult,
    acks: int,
    pending: list[tuple[str, int, dict[str, Any], int]],
) -> None:
    """Put one partition's append result into its answer entry."""
    code = result.error_code
    entry["error_code"] = _NO_ERROR if code == 0 else ErrorCode(code)
    entry["base_offset"] = result.base_offset
    entry["log_start_offset"] = result.log_start_offset
    if result.log_append_time_ms >= 0:
        entry["log_append_time"] = result.log_append_time_ms
    if result.error_message:
        entry["error_message"] = result.error_message
    if acks == -1 and result.error_code == 0:
        pending.append((name, entry["index"], entry, result.last_offset + 1))
    stats = server.stats  # None unless metrics are on
    if stats is not None:
        if result.error_code == 0:
            # One count per batch set: offsets say how many records it held.
            stats.produced(name, result.last_offset - result.base_offset + 1, size)
        else:
            stats.produce_failed(name)


def _record_quota(server: KafkaServer, ctx: RequestContext, request: Any) -> int:
    """Count the request's bytes against the client's producer_byte_rate; when over it,
    the throttle time to answer with, and the connection is muted that long (KIP-219)."""
    size = 0
    # With no producer_byte_rate set anywhere record() counts nothing: skip the sum.
    if server.client_quotas.enabled(PRODUCER_BYTE_RATE):
        size = sum(
            len(p.records) for t in request.topic_data for p in t.partition_data if p.records
        )
    return record_produce_quota(server, ctx, size)


def record_produce_quota(server: KafkaServer, ctx: RequestContext, size: int) -> int:
    """_record_quota for a request carrying ``size`` bytes of records."""
    quotas = server.client_quotas
    throttle_ms = 0
    if quotas.enabled(PRODUCER_BYTE_RATE):
        throttle_ms = quotas.record(
            PRODUCER_BYTE_RATE, ctx.principal, ctx.header.client_id or "", size
        )
        if throttle_ms and ctx.mute is not None:
            ctx.mute(throttle_ms)
    # request_percentage (KIP-124): the larger of the two throttles is answered, as Kafka.
    return max(throttle_ms, server.request_quota.throttle_now(ctx))



async def _await_replication(
    server: KafkaServer, pending: list[tuple[str, int, dict[str, Any], int]], timeout_ms: int
) -> None:
    """Kafka's DelayedProduce: wait until every partition's HW reaches its batch end."""
    replica_manager = server.replica_manager

    def statuses() -> list[int | None]:
        return [
            replica_manager.produce_status(topic, index, required)
            for topic, index, _entry, required in pending
        ]

    def ready() -> bool:
        return all(status is not None for status in statuses())

    if not ready() and timeout_ms > 0:
        keys = list({(topic, index) for topic, index, _entry, _required in pending})
        await server.wait_for_data(keys, timeout_ms, ready, "Produce")
    for (_topic, _index, entry, _required), status in zip(pending, statuses(), strict=True):
        if status is None:
            entry["error_code"] = ErrorCode.request_timed_out
        elif status:
            entry["error_code"] = ErrorCode(status)
