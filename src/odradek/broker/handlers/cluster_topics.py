"""Metadata, DescribeCluster, CreateTopics and DeleteTopics in cluster mode.

Clients learn the cluster from the metadata cache (what the controller's UpdateMetadata
said). Topic changes go to ZooKeeper, where the controller picks them up, as Kafka's
ZkAdminManager does: CreateTopics writes ``/config/topics/<t>`` and
``/brokers/topics/<t>`` with an assignment from :mod:`odradek.cluster.placement`, then
waits (up to the request's timeout, Kafka's DelayedCreatePartitions) until the metadata
cache shows every new partition with a leader; a topic not ready by then answers
REQUEST_TIMED_OUT, and exists all the same. DeleteTopics writes
``/admin/delete_topics/<t>`` and waits the same way for the topic to leave the cache.

ZooKeeper calls block, so they run in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import YIELD_EVERY, error_code, millis, respond
from odradek.broker.metadata_answers import EncodedAnswers, TopicEntries, framed
from odradek.broker.metadata_cache import MetadataCache, PartitionInfo
from odradek.broker.partition import NO_LEADER
from odradek.broker.security.metadata_access import (
    MetadataAccess,
    describe_cluster_operations,
)
from odradek.cluster.metadata import INTERNAL_TOPICS, MetadataError, validate_topic_name
from odradek.cluster.placement import (
    BrokerRack,
    assign_replicas_to_brokers,
    validate_manual_assignment,
)
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import TopicAssignment, parse_kafka_uuid, random_kafka_uuid
from odradek.cluster.zk.errors import NodeExists, ZooKeeperError
from odradek.protocol.metadata_encoder import (
    encode_metadata_body,
    encode_topic,
    topic_layout,
    with_authorized_operations,
)

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext

log = logging.getLogger(__name__)

FIRST_UPDATE_WAIT_S = 10.0  # how long a just-joined broker's Metadata waits for the cache


@dataclass
class ClusterTopicHandlers:
    """The narrow context: this broker's id, the cluster id, the ZooKeeper store, the
    metadata cache, broker config lookups, and a topic-config validator (raising
    MetadataError INVALID_CONFIG)."""

    broker_id: int
    cluster_id: str
    zk: ZkClient
    cache: MetadataCache
    config: Callable[[str], Any]
    validate_configs: Callable[[Mapping[str, str]], object]
    # Whole encoded answers, per (version, topics asked), of the cache's generation, and
    # the encoded topic entries they are made of (kept while each topic stays the same).
    answers: EncodedAnswers = field(default_factory=EncodedAnswers)
    entries: TopicEntries = field(default_factory=TopicEntries)

    def handlers(self) -> dict[int, Callable[[Any, Any], Any]]:
        return {
            3: self.handle_metadata,
            19: self.handle_create_topics,
            20: self.handle_delete_topics,
            37: self.handle_create_partitions,
            60: self.handle_describe_cluster,
        }

    # --- Metadata -----------------------------------------------------------------------

    def _brokers_on(self, listener: str) -> list[tuple[int, str, int, str | None]]:
        """Live brokers as clients of ``listener`` must reach them (Kafka names each
        broker's endpoint of the listener the request came in on; a broker without
        that listener is left out)."""
        out = []
        for broker in self.cache.live_brokers():
            endpoint = broker.endpoint(listener) if broker.endpoints else None
            if endpoint is None and broker.endpoints:
                continue
            host, port = endpoint or (broker.host, broker.port)
            out.append((broker.broker_id, host, port, broker.rack))
        return out

    async def handle_metadata(self, ctx: RequestContext, request: Any) -> Any:
        await self._first_update_metadata()
        requested = getattr(request, "topics", None)
        version = ctx.header.api_version
        every_topic = requested is None or (version == 0 and not requested)
        if every_topic:
            names = self.cache.topics()
        else:
            names = [t.name for t in requested if getattr(t, "name", None)]
        auto_create = bool(
            not every_topic
            and getattr(request, "allow_auto_topic_creation", True)
            and self.config("auto.create.topics.enable")
        )
        access = MetadataAccess.of(ctx, request, version)
        generation = self.cache.generation
        if auto_create and any(not self.cache.contains(n) for n in names):
            # Something may be created: answered afresh (the metadata changes meanwhile).
            body = await self._encoded_answer(version, generation, ctx.listener_name, names,
                                              access, every_topic, auto_create)  # fmt: skip
            return framed(ctx, body)
        # The answer follows from the cache's generation, the listener asked (each listener
        # advertises its own endpoints) and (under an authorizer) the principal and ACLs.
        key = (version, ctx.listener_name, None if every_topic else tuple(names), access.key)
        body = self.answers.get(generation, key)
        if body is None:
            body = await self._encoded_answer(version, generation, ctx.listener_name, names,
                                              access, every_topic)  # fmt: skip
            self.answers.put(generation, key, body)
        return framed(ctx, body)

    async def _encoded_answer(
        self,
        version: int,
        generation: int,
        listener: str,
        names: list[str],
        access: MetadataAccess | None = None,
        every_topic: bool = False,
        auto_create: bool = False,
    ) -> bytes:
        """The answer's body from each topic's kept encoded entry: encoded again only
        when the topic's partitions (a new mapping in the cache for every change), its id
        or the live brokers (a dead leader answers LEADER_NOT_AVAILABLE) changed. Topics
        ``access`` refuses are left out (every topic) or answered refused."""
        access = access or MetadataAccess(None)
        cache = self.cache
        present = cache.topics()
        self.entries.prune(generation, set(present))
        live = frozenset(b.broker_id for b in cache.live_brokers())
        layout = topic_layout(version)
        topics = []
        for count, name in enumerate(names, 1):
            if count % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            if not access.answers(name, every_topic):
                continue
            state = cache.partition_map(name)
            if state is None:
                code = ErrorCode.unknown_topic_or_partition
                if auto_create:
                    if not access.may_auto_create(name):
                        continue
                    code = await self._auto_create(name)
                topics.append(encode_topic(version, code, name, None, False, (),
                                           access.topic_operations(name)))  # fmt: skip
                continue
            topic_id = cache.topic_id(name)
            extra = (topic_id, live)
            entry = self.entries.kept(name, layout, state, extra)
            if entry is None:
                encode = functools.partial(_encode_topic, version, name, topic_id, state, live)
                entry = await self.entries.encode(name, layout, state, extra, encode, len(state))
            if access.topic_operations_asked:
                entry = with_authorized_operations(version, entry, access.topic_operations(name))
            topics.append(entry)
        topics.extend(access.refused_entries(version))
        return encode_metadata_body(
            version,
            brokers=self._brokers_on(listener),
            cluster_id=self.cluster_id,
            controller_id=cache.controller_id,
            topics=topics,
            cluster_authorized_operations=access.cluster_operations(),
        )

    async def _auto_create(self, name: str) -> int:
        """Kafka creates the topic in ZooKeeper and answers LEADER_NOT_AVAILABLE until
        the controller has elected leaders; the client asks again (the error code)."""
        try:
            validate_topic_name(name)
            await self._create(
                name,
                self.config("num.partitions"),
                self.config("default.replication.factor"),
                {},
                None,
            )
        except MetadataError as exc:
            return int(error_code(exc.error_name))
        return int(ErrorCode.leader_not_available)

    async def _first_update_metadata(self) -> None:
        """A broker that has just joined knows no brokers and no controller until the
        controller's first UpdateMetadata (milliseconds later). Kafka opens its ports
        only after start-up; odradek binds them earlier (a registration names the bound
        port), so its first Metadata answers wait for that update instead of telling a
        client there are no brokers (librdkafka would not ask again for minutes)."""
        if self.cache.generation == 0:
            await self.cache.wait_until(lambda: self.cache.generation > 0, FIRST_UPDATE_WAIT_S)

    async def handle_describe_cluster(self, ctx: RequestContext, request: Any) -> Any:
        await self._first_update_metadata()
        return respond(
            ctx,
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "error_message": None,
                "endpoint_type": 1,
                "cluster_id": self.cluster_id,
                "controller_id": self.cache.controller_id,
                "brokers": [
                    {"broker_id": node, "host": host, "port": port, "rack": rack}
                    for node, host, port, rack in self._brokers_on(ctx.listener_name)
                ],
                "cluster_authorized_operations": describe_cluster_operations(ctx, request),
            },
        )

    # --- CreateTopics -------------------------------------------------------------------

    async def handle_create_topics(self, ctx: RequestContext, request: Any) -> Any:
        validate_only = bool(getattr(request, "validate_only", False))
        timeout_ms = millis(getattr(request, "timeout", 0))
        results: list[dict[str, Any]] = []
        created: dict[str, int] = {}  # name -> partitions to wait for
        seen: set[str] = set()
        for topic in request.topics:
            entry: dict[str, Any] = {
                "name": topic.name,
                "error_code": ErrorCode.none,
                "num_partitions": -1,
                "replication_factor": -1,
            }
            results.append(entry)
            if topic.name in seen:
                entry.update(
                    error_code=ErrorCode.invalid_request,
                    error_message=f"Create topics request from client contains a duplicate "
                    f"topic {topic.name}",
                )
                continue
            seen.add(topic.name)
            try:
                topic_id, assignment = await self._create_one(topic, validate_only)
            except MetadataError as exc:
                entry.update(error_code=error_code(exc.error_name), error_message=str(exc))
                continue
            entry["num_partitions"] = len(assignment)
            entry["replication_factor"] = len(assignment[0])
            if topic_id is not None:
                entry["topic_id"] = parse_kafka_uuid(topic_id)
                created[topic.name] = len(assignment)
        if created and timeout_ms > 0:
            ready = await self.cache.wait_until(
                lambda: all(self._has_leaders(name, n) for name, n in created.items()),
                timeout_ms / 1000,
            )
            if not ready:
                for entry in results:
                    name = entry["name"]
                    if name in created and not self._has_leaders(name, created[name]):
                        entry.update(
                            error_code=ErrorCode.request_timed_out,
                            error_message=f"Topic {name} was created in ZooKeeper but its "
                            f"partitions have no leader after {timeout_ms} ms; it will be ready "
                            "once the controller has elected them",
                        )
        return respond(ctx, {"throttle_time": 0, "topics": results})

    def _has_leaders(self, name: str, count: int) -> bool:
        partitions = self.cache.partitions(name) or {}
        return len(partitions) >= count and all(p.leader != NO_LEADER for p in partitions.values())

    async def _create_one(
        self, topic: Any, validate_only: bool
    ) -> tuple[str | None, dict[int, list[int]]]:
        name = topic.name
        validate_topic_name(name)
        num_partitions = int(topic.num_partitions)
        replication_factor = int(topic.replication_factor)
        manual: dict[int, list[int]] | None = None
        assignments = list(getattr(topic, "assignments", ()) or ())
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise MetadataError(
                    "INVALID_REQUEST",
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            manual = {int(a.partition_index): [int(b) for b in a.broker_ids] for a in assignments}
        if num_partitions == -1:
            num_partitions = self.config("num.partitions")
        if replication_factor == -1:
            replication_factor = self.config("default.replication.factor")
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        self.validate_configs(configs)
        return await self._create(
            name, num_partitions, replication_factor, configs, manual, validate_only=validate_only
        )

    async def create_internal(
        self, name: str, num_partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None:
        """Create an internal topic (Kafka's AutoTopicCreationManager for
        ``__consumer_offsets``); MetadataError as for CreateTopics."""
        await self._create(name, num_partitions, replication_factor, dict(configs), None)

    async def _create(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        manual: dict[int, list[int]] | None,
        *,
        validate_only: bool = False,
    ) -> tuple[str | None, dict[int, list[int]]]:
        def work() -> tuple[str | None, dict[int, list[int]]]:
            # Live brokers from their registrations, as AdminZkClient.getBrokerMetadatas:
            # ZooKeeper is the registry, the cache may lag behind it.
            brokers = [
                BrokerRack(b, registration.rack)
                for b in self.zk.get_broker_ids()
                if (registration := self.zk.get_broker(b)) is not None
            ]
            if manual is not None:
                validate_manual_assignment(manual, {b.broker_id for b in brokers})
                assignment = manual
            else:
                assignment = assign_replicas_to_brokers(brokers, num_partitions, replication_factor)
            if self.zk.get_topic_assignment(name) is not None:
                raise MetadataError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
            if validate_only:
                return None, assignment
            topic_id = random_kafka_uuid()
            self.zk.create_topic(
                name,
                TopicAssignment({p: tuple(r) for p, r in assignment.items()}, topic_id=topic_id),
                configs,
            )
            log.info("created topic %s in ZooKeeper: %s", name, assignment)
            return topic_id, assignment

        try:
            return await asyncio.to_thread(work)
        except NodeExists:
            raise MetadataError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.") from None
        except ZooKeeperError as exc:
            raise MetadataError("REQUEST_TIMED_OUT", f"ZooKeeper: {exc}") from None

    # --- CreatePartitions --------------------------------------------------------------

    async def handle_create_partitions(self, ctx: RequestContext, request: Any) -> Any:
        """Kafka's AdminZkClient.addPartitions: the new partitions' replicas placed as for
        a new topic, continuing from the first partition's leader, written to
        ``/brokers/topics/<t>`` by compare-and-set; then the same wait for leaders."""
        validate_only = bool(getattr(request, "validate_only", False))
        timeout_ms = millis(getattr(request, "timeout", 0))
        results: list[dict[str, Any]] = []
        grown: dict[str, int] = {}
        for topic in request.topics:
            entry: dict[str, Any] = {"name": topic.name, "error_code": ErrorCode.none}
            results.append(entry)
            manual = [[int(b) for b in a.broker_ids] for a in topic.assignments or ()]
            try:
                total = await asyncio.to_thread(
                    self._add_partitions, topic.name, int(topic.count), manual, validate_only
                )
            except MetadataError as exc:
                entry.update(error_code=error_code(exc.error_name), error_message=str(exc))
                continue
            except ZooKeeperError as exc:
                entry.update(error_code=ErrorCode.request_timed_out, error_message=str(exc))
                continue
            if not validate_only:
                grown[topic.name] = total
        if grown and timeout_ms > 0:
            ready = await self.cache.wait_until(
                lambda: all(self._has_leaders(n, c) for n, c in grown.items()), timeout_ms / 1000
            )
            if not ready:
                for entry in results:
                    name = entry["name"]
                    if name in grown and not self._has_leaders(name, grown[name]):
                        entry["error_code"] = ErrorCode.request_timed_out
        return respond(ctx, {"throttle_time": 0, "results": results})

    def _add_partitions(
        self, name: str, count: int, manual: list[list[int]], validate_only: bool
    ) -> int:
        found = self.zk.get_topic_assignment(name)
        if found is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"The topic '{name}' does not exist.")
        existing, version = found
        old = len(existing.partitions)
        if count < old:
            raise MetadataError(
                "INVALID_PARTITIONS",
                f"Topic currently has {old} partitions, which is higher than the requested "
                f"{count}.",
            )
        if count == old:
            raise MetadataError("INVALID_PARTITIONS", f"Topic already has {old} partitions.")
        replication_factor = len(existing.partitions[0])
        registered = self.zk.get_broker_ids()
        if manual:
            if len(manual) != count - old:
                raise MetadataError(
                    "INVALID_REPLICA_ASSIGNMENT",
                    f"Increasing the number of partitions by {count - old} but {len(manual)} "
                    "assignments provided.",
                )
            added = {old + i: replicas for i, replicas in enumerate(manual)}
            if any(len(r) != replication_factor for r in added.values()):
                raise MetadataError(
                    "INVALID_REPLICA_ASSIGNMENT",
                    f"Inconsistent replication factor between partitions, partition 0 has "
                    f"{replication_factor} while the new partitions do not.",
                )
            validate_manual_assignment({i: r for i, r in enumerate(manual)}, set(registered))
        else:
            brokers = [
                BrokerRack(b, registration.rack)
                for b in registered
                if (registration := self.zk.get_broker(b)) is not None
            ]
            first_leader = existing.partitions[0][0]
            ids = [b.broker_id for b in brokers]
            added = assign_replicas_to_brokers(
                brokers,
                count - old,
                replication_factor,
                # AdminZkClient: the first broker whose id is at least partition 0's leader.
                fixed_start_index=next((i for i, b in enumerate(ids) if b >= first_leader), 0),
                start_partition_id=old,
            )
        if validate_only:
            return count
        partitions = dict(existing.partitions)
        partitions.update({p: tuple(r) for p, r in added.items()})
        # Compare-and-set: a concurrent change (another CreatePartitions, a reassignment)
        # makes this fail rather than be overwritten.
        self.zk.set_topic_assignment(
            name, dataclasses.replace(existing, partitions=partitions), version
        )
        log.info("topic %s: partitions %d..%d added: %s", name, old, count - 1, added)
        return count

    # --- DeleteTopics -------------------------------------------------------------------

    async def handle_delete_topics(self, ctx: RequestContext, request: Any) -> Any:
        names = list(getattr(request, "topic_names", ()) or ())
        names += [t.name for t in getattr(request, "topics", ()) or () if t.name]
        timeout_ms = millis(getattr(request, "timeout", 0))
        responses: list[dict[str, Any]] = []
        marked: list[str] = []
        for name in names:
            entry: dict[str, Any] = {"name": name, "error_code": ErrorCode.none}
            responses.append(entry)
            if not self.cache.contains(name):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                continue
            if name in INTERNAL_TOPICS:
                entry.update(
                    error_code=ErrorCode.invalid_topic_exception,
                    error_message=f"internal topic {name} cannot be deleted",
                )
                continue
            if not self.config("delete.topic.enable"):
                entry["error_code"] = ErrorCode.topic_deletion_disabled
                continue
            topic_id = self.cache.topic_id(name)
            if topic_id is not None:
                entry["topic_id"] = topic_id
            try:
                await asyncio.to_thread(self.zk.request_topic_deletion, name)
            except ZooKeeperError as exc:
                entry.update(error_code=ErrorCode.request_timed_out, error_message=str(exc))
                continue
            marked.append(name)
        if marked and timeout_ms > 0:
            # Kafka's DelayedDeleteTopics: done when the cache no longer has the topic.
            ready = await self.cache.wait_until(
                lambda: not any(self.cache.contains(n) for n in marked), timeout_ms / 1000
            )
            if not ready:
                for entry in responses:
                    if entry["name"] in marked and self.cache.contains(entry["name"]):
                        entry["error_code"] = ErrorCode.request_timed_out
        return respond(ctx, {"throttle_time": 0, "responses": responses})


def _encode_topic(
    version: int,
    name: str,
    topic_id: Any,
    partitions: Mapping[int, PartitionInfo],
    live: frozenset[int],
) -> bytes:
    """One topic's Metadata entry, as :meth:`ClusterTopicHandlers._topic_entry` describes
    it: a leader that is not a live broker answers LEADER_NOT_AVAILABLE and no leader."""
    rows = []
    for index, info in sorted(partitions.items()):
        if info.leader != NO_LEADER and info.leader in live:
            error, leader = ErrorCode.none, info.leader
        else:
            error, leader = ErrorCode.leader_not_available, NO_LEADER
        rows.append((error, index, leader, info.leader_epoch, info.replicas, info.isr,
                     info.offline_replicas))  # fmt: skip
    return encode_topic(version, 0, name, topic_id, name in INTERNAL_TOPICS, rows)
