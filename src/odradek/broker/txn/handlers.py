"""Transaction APIs on the wire: InitProducerId (transactional), AddPartitionsToTxn v0-3,
AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions,
ListTransactions and DescribeProducers.

Version notes: PRODUCER_FENCED (KIP-588) is answered as INVALID_PRODUCER_EPOCH to versions
that predate it (InitProducerId < 4, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn < 2,
TxnOffsetCommit < 3), as Kafka does. AddPartitionsToTxn: when the request as a whole fails,
every partition carries that error; partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION and the rest OPERATION_NOT_ATTEMPTED.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.group.offsets import OffsetCommitRequestData
from odradek.broker.group.partitioning import partition_for
from odradek.broker.handlers.common import respond
from odradek.broker.producer_ids import ProducerIdsUnavailable, init_producer
from odradek.broker.txn.coordinator import TransactionCoordinator
from odradek.broker.txn.markers import append_marker
from odradek.broker.txn.state import STATE_BY_NAME
from odradek.protocol.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    LIST_TRANSACTIONS,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
)

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer

OFFSETS_TOPIC = "__consumer_offsets"

# API key -> first version that knows PRODUCER_FENCED.
_FENCED_SINCE = {
    INIT_PRODUCER_ID: 4,
    ADD_PARTITIONS_TO_TXN: 2,
    ADD_OFFSETS_TO_TXN: 2,
    END_TXN: 2,
    TXN_OFFSET_COMMIT: 3,
}

Handler = Callable[["KafkaServer", "RequestContext", Any], Awaitable[Any]]


def _compat(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error is ErrorCode.producer_fenced and ctx.header.api_version < _FENCED_SINCE.get(
        ctx.header.api_key, 0
    ):
        return ErrorCode.invalid_producer_epoch
    return error


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def _coordinator(server: KafkaServer) -> TransactionCoordinator:
    return server.txn.coordinator


async def handle_init_producer_id(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    txn_id = getattr(request, "transactional_id", None)
    if txn_id is None:
        try:
            producer_id, epoch = await init_producer(
                server.producer_ids,
                int(getattr(request, "producer_id", -1)),
                int(getattr(request, "producer_epoch", -1)),
            )
            result_error, result_pid, result_epoch = ErrorCode.none, producer_id, epoch
        except ProducerIdsUnavailable:
            # Retriable, as Kafka answers while its broker waits for a block of ids.
            result_error, result_pid, result_epoch = ErrorCode.coordinator_load_in_progress, -1, -1
    else:
        await server.txn.ensure_state_topic()
        result = await _coordinator(server).init_producer_id(
            txn_id,
            _ms(request.transaction_timeout),
            int(getattr(request, "producer_id", -1)),
            int(getattr(request, "producer_epoch", -1)),
        )
        result_error, result_pid, result_epoch = (
            result.error,
            result.producer_id,
            result.producer_epoch,
        )
    return respond(
        ctx,
        {
            "throttle_time": 0,
            "error_code": _compat(ctx, result_error),
            "producer_id": result_pid,
            "producer_epoch": result_epoch,
        },
    )


async def handle_add_partitions_to_txn(
    server: KafkaServer, ctx: RequestContext, request: Any
) -> Any:
    txn_id = request.v3_and_below_transactional_id
    wanted = [
        (topic.name, int(p)) for topic in request.v3_and_below_topics for p in topic.partitions
    ]
    unknown = {tp for tp in wanted if not server.txn.partition_exists(tp[0], tp[1])}
    if unknown:
        errors = {
            tp: ErrorCode.unknown_topic_or_partition
            if tp in unknown
            else ErrorCode.operation_not_attempted
            for tp in wanted
        }
    else:
        error = await _coordinator(server).add_partitions(
            txn_id,
            int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch),
            wanted,
        )
        errors = dict.fromkeys(wanted, _compat(ctx, error))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": error}
        )
    return respond(
        ctx,
        {
            "throttle_time": 0,
            "results_by_topic_v3_and_below": [
                {"name": name, "results_by_partition": results}
                for name, results in by_topic.items()
            ],
        },
    )


async def handle_add_offsets_to_txn(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    await server.txn.ensure_offsets_topic()
    partition = partition_for(request.group_id, server.offsets_topic.num_partitions)
    error = await _coordinator(server).add_partitions(
        request.transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        [(OFFSETS_TOPIC, partition)],
    )
    return respond(ctx, {"throttle_time": 0, "error_code": _compat(ctx, error)})


async def handle_end_txn(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    error = await _coordinator(server).end_txn(
        request.transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        bool(request.committed),
    )
    return respond(ctx, {"throttle_time": 0, "error_code": _compat(ctx, error)})


async def handle_txn_offset_commit(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    offsets = {
        (topic.name, int(p.partition_index)): OffsetCommitRequestData(
            offset=int(p.committed_offset),
            metadata=p.committed_metadata,
            leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
        )
        for topic in request.topics
        for p in topic.partitions
    }
    coordinator = _coordinator(server)
    error = ErrorCode.none
    local = server.cluster_parts is None
    if local or coordinator.coordinator_error(request.transactional_id) is None:
        # This broker coordinates the transaction too (always so on a single broker): the
        # producer must own the id, and AddOffsetsToTxn must have come first. In a cluster
        # the group's coordinator is often another broker, which (as Kafka's) relies on the
        # producer's epoch in the offsets partition instead.
        error, meta = coordinator.check_producer(
            request.transactional_id, int(request.producer_id), int(request.producer_epoch)
        )
        offsets_partition = partition_for(request.group_id, server.offsets_topic.num_partitions)
        if meta is not None and (OFFSETS_TOPIC, offsets_partition) not in meta.current.partitions:
            error = ErrorCode.invalid_txn_state
    if error is not ErrorCode.none:
        results = dict.fromkeys(offsets, error)
    else:
        results = await server.txn.offsets.commit(
            group_id=request.group_id,
            producer_id=int(request.producer_id),
            producer_epoch=int(request.producer_epoch),
            generation_id=int(getattr(request, "generation_id", -1)),
            member_id=getattr(request, "member_id", "") or "",
            group_instance_id=getattr(request, "group_instance_id", None),
            offsets=offsets,
        )
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "error_code": _compat(ctx, code)}
        )
    return respond(
        ctx,
        {
            "throttle_time": 0,
            "topics": [{"name": n, "partitions": p} for n, p in by_topic.items()],
        },
    )


async def handle_write_txn_markers(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    # Every marker is appended first, then all wait for their replicas together (a cluster
    # answers once each partition's in-sync replicas have its marker, as Kafka does).
    jobs = [
        (
            marker,
            topic,
            int(index),
            append_marker(
                server.replica_manager,
                topic.name,
                int(index),
                producer_id=int(marker.producer_id),
                producer_epoch=int(marker.producer_epoch),
                coordinator_epoch=int(marker.coordinator_epoch),
                commit=bool(marker.transaction_result),
                on_offsets_marker=server.txn.offsets.complete,
                wait_replicated=server.txn.wait_replicated,
            ),
        )
        for marker in request.markers
        for topic in marker.topics
        for index in topic.partition_indexes
    ]
    codes = await asyncio.gather(*(job for *_rest, job in jobs))
    markers: list[dict[str, Any]] = []
    by_marker: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for (marker, topic, index, _job), code in zip(jobs, codes, strict=True):
        if id(marker) not in by_marker:
            by_marker[id(marker)] = topics = {}
            markers.append({"producer_id": int(marker.producer_id), "topics": topics})
        by_marker[id(marker)].setdefault(topic.name, []).append(
            {"partition_index": index, "error_code": ErrorCode(code)}
        )
    for entry in markers:
        entry["topics"] = [{"name": n, "partitions": p} for n, p in entry["topics"].items()]
    return respond(ctx, {"markers": markers})


async def handle_describe_transactions(
    server: KafkaServer, ctx: RequestContext, request: Any
) -> Any:
    coordinator = _coordinator(server)
    states = []
    for txn_id in request.transactional_ids:
        entry: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "transactional_id": txn_id,
            "transaction_state": "",
            # Kafka leaves the fields of a failed entry at their zero defaults.
            "transaction_timeout": 0,
            "transaction_start_time": 0,
            "producer_id": 0,
            "producer_epoch": 0,
            "topics": [],
        }
        error = coordinator.coordinator_error(txn_id)
        meta = coordinator.transaction(txn_id) if error is None else None
        if error is not None:
            entry["error_code"] = error
        elif meta is None:
            entry["error_code"] = ErrorCode.transactional_id_not_found
        else:
            current = meta.current
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(current.partitions):
                by_topic.setdefault(topic, []).append(partition)
            entry.update(
                transaction_state=current.state.kafka_name,
                transaction_timeout=current.timeout_ms,
                transaction_start_time=current.start_timestamp_ms,
                producer_id=current.producer_id,
                producer_epoch=current.producer_epoch,
                topics=[{"topic": t, "partitions": p} for t, p in by_topic.items()],
            )
        states.append(entry)
    return respond(ctx, {"throttle_time": 0, "transaction_states": states})


async def handle_list_transactions(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    state_filters = list(request.state_filters)
    unknown = [name for name in state_filters if name not in STATE_BY_NAME]
    wanted_states = {STATE_BY_NAME[n] for n in state_filters if n in STATE_BY_NAME}
    wanted_pids = {int(p) for p in request.producer_id_filters}
    duration = int(getattr(request, "duration_filter", -1))
    now = server.txn.coordinator.clock()
    coordinator = _coordinator(server)
    error = ErrorCode.coordinator_load_in_progress if coordinator.is_loading() else None
    found = []
    for meta in coordinator.transactions() if error is None else ():
        current = meta.current
        if state_filters and current.state not in wanted_states:
            continue
        if wanted_pids and current.producer_id not in wanted_pids:
            continue
        # KIP-994: only transactions running longer than the filter (Kafka compares the
        # start timestamp as it is, so ids without an open transaction pass too).
        if duration >= 0 and now - current.start_timestamp_ms <= duration:
            continue
        found.append(
            {
                "transactional_id": meta.transactional_id,
                "producer_id": current.producer_id,
                "transaction_state": current.state.kafka_name,
            }
        )
    return respond(
        ctx,
        {
            "throttle_time": 0,
            "error_code": error or ErrorCode.none,
            "unknown_state_filters": unknown,
            "transaction_states": found,
        },
    )


async def handle_describe_producers(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            hosted = server.replica_manager.partition(topic.name, int(index))
            entry: dict[str, Any] = {
                "partition_index": int(index),
                "error_code": ErrorCode.none,
                "error_message": None,
                "active_producers": [],
            }
            if hosted is None:
                # NOT_LEADER_OR_FOLLOWER for a partition the cluster has elsewhere (Kafka's
                # getPartitionOrError); any replica hosting it answers, as in Kafka.
                entry["error_code"] = server.replica_manager.missing_partition_error(
                    topic.name, int(index)
                )
            else:
                for producer_id, state in hosted.log.producer_state.active_producers().items():
                    entry["active_producers"].append(
                        {
                            "producer_id": producer_id,
                            "producer_epoch": state.producer_epoch,
                            "last_sequence": state.last_seq,
                            "last_timestamp": state.last_timestamp,
                            "coordinator_epoch": state.coordinator_epoch,
                            "current_txn_start_offset": (
                                state.current_txn_first_offset
                                if state.current_txn_first_offset is not None
                                else -1
                            ),
                        }
                    )
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return respond(ctx, {"throttle_time": 0, "topics": topics})


HANDLERS: dict[int, Handler] = {
    INIT_PRODUCER_ID: handle_init_producer_id,
    ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    END_TXN: handle_end_txn,
    TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    WRITE_TXN_MARKERS: handle_write_txn_markers,
    DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    LIST_TRANSACTIONS: handle_list_transactions,
    DESCRIBE_PRODUCERS: handle_describe_producers,
}
