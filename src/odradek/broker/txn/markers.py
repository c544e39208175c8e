"""Writing the COMMIT / ABORT markers that end a transaction in each of its partitions.

The coordinator only sees the :class:`MarkerWriter` interface. On a single broker every
partition is local, so :class:`LocalMarkerWriter` appends the control batches straight to
the partition logs through the replica manager (Kafka's "coordinator" append origin, the
only one allowed to write control records). A cluster replaces it with one that sends
WriteTxnMarkers to each partition's leader; the receiving broker appends the same way
(:func:`append_marker`, used by the WriteTxnMarkers handler too).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from kio.schema.errors import ErrorCode

from odradek.broker.replica_manager import ReplicaManager
from odradek.records.control import ControlType, build_end_txn_marker
from odradek.storage.producer_state import ORIGIN_COORDINATOR

log = logging.getLogger(__name__)

UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSETS_TOPIC = "__consumer_offsets"

TopicPartition = tuple[str, int]
# Told when a marker lands in a __consumer_offsets partition (pending transactional offset
# commits of that producer become visible or are dropped): (partition, producer id, commit).
OffsetsMarkerHook = Callable[[int, int, bool], None]
# (topic, partition, offset) -> error code once the partition's high watermark reaches the
# offset (0), or why it did not (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, ...).
ReplicationWait = Callable[[str, int, int], Awaitable[int]]


class MarkerWriter(Protocol):
    async def write_markers(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """Write one marker per partition; the Kafka error code of each (0 = written)."""
        ...


async def append_marker(
    replica_manager: ReplicaManager,
    topic: str,
    partition: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    on_offsets_marker: OffsetsMarkerHook | None = None,
    wait_replicated: ReplicationWait | None = None,
) -> int:
    """Append one marker to a local partition; its Kafka error code. With
    ``wait_replicated`` (a cluster), only once every in-sync replica has it (acks=all, as
    Kafka appends markers): a marker lost with its leader would leave the transaction
    open in that partition for good."""
    hosted = replica_manager.partition(topic, partition)
    try:
        batch = build_end_txn_marker(
            ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            partition_leader_epoch=hosted.leader_epoch if hosted is not None else -1,
        )
    except ValueError:
        # WriteTxnMarkers from the wire naming no producer (id < 0) or an epoch out of
        # range: nothing to mark (found by bench/fuzz_broker.py).
        return int(ErrorCode.invalid_request)
    result = replica_manager.append(
        topic, partition, batch, required_acks=-1, origin=ORIGIN_COORDINATOR
    )
    if result.error_code == 0 and wait_replicated is not None:
        code = await wait_replicated(topic, partition, result.last_offset + 1)
        if code != 0:
            return code
    if result.error_code == 0 and topic == OFFSETS_TOPIC and on_offsets_marker is not None:
        on_offsets_marker(partition, producer_id, commit)
    return result.error_code


class LocalMarkerWriter:
    """Markers for a broker that hosts every partition itself."""

    def __init__(
        self, replica_manager: ReplicaManager, on_offsets_marker: OffsetsMarkerHook | None = None
    ) -> None:
        self._replica_manager = replica_manager
        self.on_offsets_marker = on_offsets_marker

    async def write_markers(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, int]:
        results: dict[TopicPartition, int] = {}
        for topic, partition in sorted(partitions):
            error = await append_marker(
                self._replica_manager,
                topic,
                partition,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                commit=commit,
                on_offsets_marker=self.on_offsets_marker,
            )  # the embedded broker's high watermark follows every append at once
            if error == UNKNOWN_TOPIC_OR_PARTITION:
                # The topic was deleted meanwhile: there is nothing left to mark (Kafka
                # drops such partitions from the pending markers too).
                error = 0
            if error != 0:
                log.warning(
                    "marker for producer %d on %s-%d failed with error %d",
                    producer_id,
                    topic,
                    partition,
                    error,
                )
            results[(topic, partition)] = error
        return results
