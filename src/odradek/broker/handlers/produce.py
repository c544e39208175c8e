"""Produce. (InitProducerId is served by the transaction coordinator: broker/txn/handlers.py.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import Ticker, element_builder, respond_many
from odradek.cluster.metadata import MetadataError, validate_topic_name

if TYPE_CHECKING:
    from odradek.broker.network import RequestContext
    from odradek.broker.server import KafkaServer


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
    make_partition = element_builder(ctx, "responses", "partition_responses")
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
                result = server.replica_manager.append(
                    name, index, partition_data.records, required_acks=acks
                )
                entry["error_code"] = ErrorCode(result.error_code)
                entry["base_offset"] = result.base_offset
                entry["log_start_offset"] = result.log_start_offset
                if result.log_append_time_ms >= 0:
                    entry["log_append_time"] = result.log_append_time_ms
                if result.error_message:
                    entry["error_message"] = result.error_message
            partitions.append(make_partition(entry))
        responses.append({"name": name, "partition_responses": partitions})
    if acks == 0:
        return None  # Kafka sends no response at all for acks=0
    return respond_many(ctx, {"responses": responses, "throttle_time": 0}, ticker.count)

