"""Internal topics in cluster mode: creating them on first use and naming their coordinators.

A coordinator (groups over ``__consumer_offsets``, later transactions over
``__transaction_state``) lives on the broker that leads the internal-topic partition its
key maps to. This module answers, from the metadata cache, which broker that is, and
creates the topic through ZooKeeper the first time someone asks, as Kafka's
``KafkaApis.getCoordinator`` with ``AutoTopicCreationManager`` do:

* the topic missing from the cache: creation starts in the background (unless fewer
  brokers are alive than the topic's replication factor: Kafka then refuses and logs why)
  and the answer is "no coordinator yet" (COORDINATOR_NOT_AVAILABLE); the client asks
  again until the controller has elected leaders;
* the partition without a live leader, or a leader without the listener the request came
  on: no coordinator either;
* otherwise the leader's id with its host and port for that listener.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.partition import NO_LEADER
from odradek.cluster.metadata import MetadataError

log = logging.getLogger(__name__)

# (name, partitions, replication factor, topic configs) -> created in ZooKeeper
CreateTopic = Callable[[str, int, int, Mapping[str, str]], Awaitable[object]]


@dataclass(frozen=True)
class InternalTopicSpec:
    """How to create an internal topic (Kafka's ``offsets.topic.*`` keys for the offsets
    topic)."""

    name: str
    num_partitions: int
    replication_factor: int
    replication_factor_key: str
    configs: Mapping[str, str]


class InternalTopicCoordinators:
    def __init__(self, cache: MetadataCache, create_topic: CreateTopic) -> None:
        self.cache = cache
        self._create_topic = create_topic
        self._creating: dict[str, asyncio.Task[None]] = {}

    def partition_count(self, topic: str) -> int | None:
        """The topic's partition count as the cluster knows it; None before it exists."""
        partitions = self.cache.partitions(topic)
        return len(partitions) if partitions else None

    def coordinator(
        self, spec: InternalTopicSpec, partition: int, listener: str
    ) -> tuple[int, str, int] | None:
        """(node id, host, port) of the leader of ``spec.name``-``partition`` for
        ``listener``; None when there is none (yet)."""
        if not self.cache.contains(spec.name):
            self._start_creating(spec)
            return None
        info = self.cache.partition(spec.name, partition)
        if info is None or info.leader == NO_LEADER:
            return None
        broker = self.cache.broker(info.leader)
        if broker is None:
            return None
        endpoint = broker.endpoint(listener)
        if endpoint is None:
            return None
        return broker.broker_id, endpoint[0], endpoint[1]

    def _start_creating(self, spec: InternalTopicSpec) -> None:
        if spec.name in self._creating:
            return  # one creation in flight (Kafka's inflightTopics)
        alive = len(self.cache.live_brokers())
        if alive < spec.replication_factor:
            log.error(
                "Number of alive brokers '%d' does not meet the required replication factor "
                "'%d' for the %s topic (configured via '%s'). This error can be ignored if the "
                "cluster is starting up and not all brokers are up yet.",
                alive,
                spec.replication_factor,
                spec.name,
                spec.replication_factor_key,
            )
            return
        task = asyncio.ensure_future(self._create(spec))
        task.set_name(f"create-{spec.name}")
        self._creating[spec.name] = task
        task.add_done_callback(lambda _t: self._creating.pop(spec.name, None))

    async def _create(self, spec: InternalTopicSpec) -> None:
        try:
            await self._create_topic(
                spec.name, spec.num_partitions, spec.replication_factor, spec.configs
            )
            log.info(
                "created %s with %d partitions, replication factor %d",
                spec.name,
                spec.num_partitions,
                spec.replication_factor,
            )
        except MetadataError as exc:
            if exc.error_name != "TOPIC_ALREADY_EXISTS":  # another broker was first
                log.warning("creating %s failed: %s", spec.name, exc)
        except Exception:
            log.exception("creating %s failed", spec.name)

    async def close(self) -> None:
        tasks = list(self._creating.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
