"""Markers to partitions led anywhere in a cluster (Kafka's TransactionMarkerChannelManager).

A transaction's partitions are grouped by their leader in the metadata cache. Those led
here are appended directly (:func:`append_marker`); the others go to their leader as one
WriteTxnMarkers request per destination broker, all destinations at once. A partition
comes back with the error its leader gave it, or NOT_LEADER_OR_FOLLOWER when it has no
live leader or its leader cannot be reached; the coordinator retries those (and only
those) after a back-off, by which time the controller's UpdateMetadata has refreshed the
cache, until every marker is written. A partition whose topic the cluster no longer knows
was deleted: there is nothing left to mark, as Kafka drops it from the pending markers.

One queue and one connection per destination broker, one request at a time on it: the
markers of transactions that end while a request is in flight wait and go out together
in the next request (Kafka's per-broker batching); a connection that fails is dropped
and opened again by the next request, to the leader's inter-broker listener and secured
as it demands. The request version is fixed (v1, what this broker advertises), with no
ApiVersions round trip, as the controller's channel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as markers_v1

from odradek import timeouts
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
from odradek.cluster.peer import Connector, PeerLink, open_plaintext

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION = 27, 1
NOT_LEADER = int(ErrorCode.not_leader_or_follower)


@dataclass
class _Pending:
    """One transaction's markers for one destination, waiting for their answer."""

    marker: Any  # WritableTxnMarker naming this destination's partitions
    partitions: list[TopicPartition]
    answer: asyncio.Future[dict[TopicPartition, int]]


class _Destination:
    """The queue and connection of one broker: what piles up while a request is in flight
    goes out together in the next one (markers of many transactions in one request)."""

    def __init__(
        self,
        name: str,
        address: Callable[[], tuple[str, int] | None],
        timeout_s: float,
        connector: Connector = open_plaintext,
    ) -> None:
        self.name = name
        self._address = address
        self.timeout_s = timeout_s
        self._connector = connector
        self._queue: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._link: PeerLink | None = None
        self._correlation_id = 0

    async def submit(
        self, marker: Any, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        pending = _Pending(marker, partitions, asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
            self._task.set_name(self.name)
        return await pending.answer

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._queue = self._queue, []
            if not batch:
                continue
            try:
                answers = await self._send(batch)
            except asyncio.CancelledError:
                for pending in batch:
                    pending.answer.cancel()
                raise
            except Exception:
                # Never leave a transaction waiting on an answer: it retries instead.
                log.exception("%s: sending markers failed", self.name)
                self.close()
                answers = [dict.fromkeys(p.partitions, NOT_LEADER) for p in batch]
            for pending, answer in zip(batch, answers, strict=True):
                if not pending.answer.done():
                    pending.answer.set_result(answer)

    async def _send(self, batch: list[_Pending]) -> list[dict[TopicPartition, int]]:
        """The answer of every queued transaction; a partition whose leader could not be
        asked gets NOT_LEADER_OR_FOLLOWER, so the coordinator retries it."""
        failed = [dict.fromkeys(p.partitions, NOT_LEADER) for p in batch]
        address = self._address()
        if address is None:
            return failed
        request = markers_v1.WriteTxnMarkersRequest(markers=tuple(p.marker for p in batch))
        try:
            if self._link is not None and self._link.stale:
                self.close()  # its SASL session ends soon: a fresh one
            if self._link is None:
                self._link = await self._connector(*address, self.timeout_s, self.name)
            self._correlation_id += 1
            response = await timeouts.wait_for(
                exchange(
                    self._link.reader,
                    self._link.writer,
                    WRITE_TXN_MARKERS,
                    WRITE_TXN_MARKERS_VERSION,
                    request,
                    self._correlation_id,
                    self.name,
                ),
                self.timeout_s,
            )
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            log.info("%s: sending markers failed: %r", self.name, exc)
            self.close()
            return failed
        # Kafka answers the markers in the order they were asked.
        for pending, expected, answered in zip(batch, failed, response.markers, strict=False):
            if int(answered.producer_id) != int(pending.marker.producer_id):
                continue
            for topic in answered.topics:
                for partition in topic.partitions:
                    key = (str(topic.name), int(partition.partition_index))
                    if key in expected:
                        expected[key] = int(partition.error_code)
        return failed

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
        self._link = None

    async def stop(self) -> None:
        if self._task is not None:
            await timeouts.cancel_until_done(self._task)
        for pending in self._queue:  # never sent: their transactions stop waiting
            pending.answer.cancel()
        self._queue.clear()
        self.close()


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
        connector: Connector = open_plaintext,
    ) -> None:
        self._connector = connector
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
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        entry = markers_v1.WritableTxnMarker(
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
        )
        destination = self._destinations.get(leader)
        if destination is None:
            destination = _Destination(
                f"txn-markers-{self.broker_id}-to-{leader}",
                lambda: self._address_of(leader),
                self._timeout_s,
                self._connector,
            )
            self._destinations[leader] = destination
        return await destination.submit(entry, tps)

    async def close(self) -> None:
        for destination in self._destinations.values():
            await destination.stop()
        self._destinations.clear()
