"""Markers to partitions led anywhere in a cluster (Kafka's TransactionMarkerChannelManager).

A transaction's partitions are grouped by their leader in the metadata cache. Those led
here are appended directly (:func:`append_marker`); the others go to their leader as one
WriteTxnMarkers request per destination broker, all destinations at once. A partition
comes back with the error its leader gave it, or NOT_LEADER_OR_FOLLOWER when it has no
live leader or its leader cannot be reached; the coordinator retries those (and only
those) after a back-off, by which time the controller's UpdateMetadata has refreshed the
cache, until every marker is written. A partition whose topic the cluster no longer knows
was deleted: there is nothing left to mark, as Kafka drops it from the pending markers.

One connection per destination broker, one request at a time on it (the markers of
concurrent transactions queue behind each other, in order); a connection that fails is
dropped and opened again by the next attempt. The request version is fixed (v1, what
this broker advertises), with no ApiVersions round trip, as the controller's channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as markers_v1

from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.partition import NO_LEADER
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.txn.markers import (
    OffsetsMarkerHook,
    ReplicationWait,
    TopicPartition,
    append_marker,
)
from odradek.cluster.controller.channel import exchange

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION = 27, 1


class _Destination:
    """The connection to one broker, used by one request at a time."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def send(self, address: tuple[str, int], request: Any) -> Any:
        async with self.lock:
            try:
                if self._writer is None:
                    self._reader, self._writer = await asyncio.wait_for(
                        asyncio.open_connection(*address), self.timeout_s
                    )
                assert self._reader is not None
                self._correlation_id += 1
                return await asyncio.wait_for(
                    exchange(
                        self._reader,
                        self._writer,
                        WRITE_TXN_MARKERS,
                        WRITE_TXN_MARKERS_VERSION,
                        request,
                        self._correlation_id,
                        self.name,
                    ),
                    self.timeout_s,
                )
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


class ClusterMarkerWriter:
    def __init__(
        self,
        broker_id: int,
        replica_manager: ReplicaManager,
        cache: MetadataCache,
        address_of: Callable[[int], tuple[str, int] | None],
        *,
        on_offsets_marker: OffsetsMarkerHook | None = None,
        wait_replicated: ReplicationWait | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.broker_id = broker_id
        self._replica_manager = replica_manager
        self._cache = cache
        self._address_of = address_of
        self.on_offsets_marker = on_offsets_marker
        self.wait_replicated = wait_replicated
        self._timeout_s = timeout_s
        self._destinations: dict[int, _Destination] = {}

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
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, partition in sorted(partitions):
            if not self._cache.contains(topic):
                results[(topic, partition)] = 0  # deleted: nothing left to mark
                continue
            info = self._cache.partition(topic, partition)
            if info is None or info.leader == NO_LEADER:
                results[(topic, partition)] = int(ErrorCode.not_leader_or_follower)
                continue
            by_leader.setdefault(info.leader, []).append((topic, partition))
        local = by_leader.pop(self.broker_id, [])
        marker = markers_v1.WritableTxnMarker(
            producer_id=producer_id,  # type: ignore[arg-type]
            producer_epoch=producer_epoch,  # type: ignore[arg-type]
            transaction_result=commit,
            topics=(),
            coordinator_epoch=coordinator_epoch,  # type: ignore[arg-type]
        )
        # Local appends and one request per other leader, all at once.
        local_codes, *sent = await asyncio.gather(
            asyncio.gather(
                *(
                    append_marker(
                        self._replica_manager,
                        topic,
                        partition,
                        producer_id=producer_id,
                        producer_epoch=producer_epoch,
                        coordinator_epoch=coordinator_epoch,
                        commit=commit,
                        on_offsets_marker=self.on_offsets_marker,
                        wait_replicated=self.wait_replicated,
                    )
                    for topic, partition in local
                )
            ),
            *(self._send(leader, marker, tps) for leader, tps in by_leader.items()),
        )
        results.update(zip(local, local_codes, strict=True))
        for answered in sent:
            results.update(answered)
        for (topic, partition), error in results.items():
            if error != 0:
                log.info(
                    "marker for producer %d on %s-%d failed with error %d; will retry",
                    producer_id,
                    topic,
                    partition,
                    error,
                )
        return results

    async def _send(
        self, leader: int, marker: Any, tps: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        failed = dict.fromkeys(tps, int(ErrorCode.not_leader_or_follower))
        address = self._address_of(leader)
        if address is None:
            return failed
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        request = markers_v1.WriteTxnMarkersRequest(
            markers=(
                markers_v1.WritableTxnMarker(
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    transaction_result=marker.transaction_result,
                    coordinator_epoch=marker.coordinator_epoch,
                    topics=tuple(
                        markers_v1.WritableTxnMarkerTopic(
                            name=topic,  # type: ignore[arg-type]
                            partition_indexes=tuple(partitions),  # type: ignore[arg-type]
                        )
                        for topic, partitions in by_topic.items()
                    ),
                ),
            )
        )
        destination = self._destinations.get(leader)
        if destination is None:
            destination = _Destination(f"txn-markers-{self.broker_id}-to-{leader}", self._timeout_s)
            self._destinations[leader] = destination
        try:
            response = await destination.send(address, request)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            log.info("sending markers to broker %d failed: %r", leader, exc)
            return failed
        results: dict[TopicPartition, int] = {}
        for answered in response.markers:
            for topic in answered.topics:
                for partition in topic.partitions:
                    key = (str(topic.name), int(partition.partition_index))
                    if key in failed:
                        results[key] = int(partition.error_code)
        for key, error in failed.items():
            results.setdefault(key, error)  # not in the answer: try again
        return results

    async def close(self) -> None:
        for destination in self._destinations.values():
            with contextlib.suppress(Exception):
                destination.close()
        self._destinations.clear()
