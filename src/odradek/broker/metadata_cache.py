"""What the controller's UpdateMetadata requests say about the cluster (Kafka's ZkMetadataCache).

In cluster mode every broker answers Metadata from this cache: the live brokers with
their endpoints and racks, the controller id, and per partition its leader, leader
epoch, ISR, replicas and offline replicas. The controller sends the whole picture when a
broker starts and changes as they happen; a request from a controller with an older
epoch than one already seen is refused (STALE_CONTROLLER_EPOCH), so a deposed controller
cannot roll the cache back.

Readers get immutable snapshots; ``generation`` grows on every applied update, so a
caller may keep anything derived from the cache (encoded topic entries) until it changes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.broker.partition import LEADER_DURING_DELETE

LISTENER = "PLAINTEXT"


class StaleControllerEpoch(Exception):
    """The request comes from a controller older than one this cache has heard from."""


@dataclass(frozen=True)
class LiveBroker:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    # Every listener the broker registered: (listener name, host, port). host and port
    # above are the PLAINTEXT one (what Metadata names).
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Host and port of ``listener`` on this broker; None when it has no such
        listener (Kafka's getAliveBrokerNode for a listener name)."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        if not self.endpoints and listener == LISTENER:
            return self.host, self.port  # v0 requests name one endpoint, no listener
        return None


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    zk_version: int = 0
    controller_epoch: int = 0


@dataclass
class _Snapshot:
    brokers: dict[int, LiveBroker] = field(default_factory=dict)
    partitions: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    controller_id: int = -1


class MetadataCache:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.controller_epoch = -1  # the newest controller epoch seen
        self.generation = 0
        self._snapshot = _Snapshot()
        self._waiters: list[asyncio.Future[None]] = []

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` holds, checking after every update (on the event
        loop that applies them); False if it still does not after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait({waiter}, timeout=remaining)
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        return True

    # --- reading ----------------------------------------------------------------------

    @property
    def controller_id(self) -> int:
        return self._snapshot.controller_id

    def live_brokers(self) -> list[LiveBroker]:
        return sorted(self._snapshot.brokers.values(), key=lambda b: b.broker_id)

    def broker(self, broker_id: int) -> LiveBroker | None:
        return self._snapshot.brokers.get(broker_id)

    def topics(self) -> list[str]:
        return sorted(self._snapshot.partitions)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self._snapshot.topic_ids.get(topic)

    def partitions(self, topic: str) -> dict[int, PartitionInfo] | None:
        found = self._snapshot.partitions.get(topic)
        return dict(found) if found is not None else None

    def partition_map(self, topic: str) -> Mapping[int, PartitionInfo] | None:
        """The topic's partitions as the cache holds them, not copied: never changed once
        published, and a new mapping whenever one of its partitions changes (so a caller
        may keep what it derives from it while it is the same object). Do not modify."""
        return self._snapshot.partitions.get(topic)

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        return self._snapshot.partitions.get(topic, {}).get(partition)

    def contains(self, topic: str, partition: int | None = None) -> bool:
        found = self._snapshot.partitions.get(topic)
        return found is not None and (partition is None or partition in found)

    # --- UpdateMetadata ---------------------------------------------------------------

    def update(self, request: Any) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata request of any version (0-8). Returns the partitions it
        removed (topics being deleted). Raise StaleControllerEpoch for an old controller."""
        epoch = int(request.controller_epoch)
        if epoch < self.controller_epoch:
            raise StaleControllerEpoch(
                f"UpdateMetadata from controller {request.controller_id} with epoch {epoch} "
                f"is older than the latest epoch {self.controller_epoch}"
            )
        self.controller_epoch = epoch
        old = self._snapshot
        brokers = {b.broker_id: b for b in _live_brokers(request)}
        # Copy on write: a topic's mapping is copied the first time this update changes
        # it, so topics left alone keep theirs (readers key encoded answers on it).
        partitions = dict(old.partitions)
        copied: set[str] = set()

        def writable(topic: str) -> dict[int, PartitionInfo]:
            if topic not in copied:
                copied.add(topic)
                partitions[topic] = dict(partitions.get(topic, {}))
            return partitions[topic]

        topic_ids = dict(old.topic_ids)
        deleted: list[tuple[str, int]] = []
        for topic, topic_id, state in _partition_states(request):
            info = PartitionInfo(
                topic,
                int(state.partition_index),
                int(state.leader),
                int(state.leader_epoch),
                tuple(int(r) for r in state.isr),
                tuple(int(r) for r in state.replicas),
                tuple(int(r) for r in getattr(state, "offline_replicas", ())),
                int(state.zk_version),
                int(state.controller_epoch),
            )
            if info.leader == LEADER_DURING_DELETE:
                # The controller is deleting the topic: forget the partition (Kafka's
                # removePartitionInfo), and the topic once its last partition is gone.
                parts = partitions.get(topic)
                if parts is not None and info.partition in parts:
                    parts = writable(topic)
                    del parts[info.partition]
                    deleted.append((topic, info.partition))
                    if not parts:
                        del partitions[topic]
                        copied.discard(topic)
                        topic_ids.pop(topic, None)
                continue
            current = partitions.get(topic)
            if current is None or current.get(info.partition) != info:
                writable(topic)[info.partition] = info
            if topic_id is not None and topic_ids.get(topic) != topic_id:
                topic_ids[topic] = topic_id
        controller_id = int(request.controller_id)
        self._snapshot = _Snapshot(brokers, partitions, topic_ids, controller_id)
        self.generation += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        return deleted


def _live_brokers(request: Any) -> Iterable[LiveBroker]:
    for broker in request.live_brokers:
        rack = getattr(broker, "rack", None)
        endpoints = getattr(broker, "endpoints", None)
        if endpoints is None:  # v0: one host and port
            yield LiveBroker(int(broker.id_), broker.v0_host, int(broker.v0_port), rack)
            continue
        # The client listener: odradek serves PLAINTEXT only (listener names from v3).
        chosen = next(
            (e for e in endpoints if getattr(e, "listener", LISTENER) == LISTENER),
            endpoints[0] if endpoints else None,
        )
        if chosen is not None:
            yield LiveBroker(
                int(broker.id_),
                chosen.host,
                int(chosen.port),
                rack,
                tuple((getattr(e, "listener", LISTENER), e.host, int(e.port)) for e in endpoints),
            )


def _partition_states(request: Any) -> Iterable[tuple[str, uuid.UUID | None, Any]]:
    ungrouped = getattr(request, "ungrouped_partition_states", None)
    if ungrouped is not None:  # v0-4
        for state in ungrouped:
            yield state.topic_name, None, state
        return
    for topic_state in request.topic_states:  # v5+
        topic_id = getattr(topic_state, "topic_id", None)
        if topic_id is not None and topic_id.int == 0:
            topic_id = None  # Uuid.ZERO_UUID: not known
        for state in topic_state.partition_states:
            yield topic_state.topic_name, topic_id, state
