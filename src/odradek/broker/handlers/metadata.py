"""ApiVersions, Metadata and DescribeCluster: how clients learn what this cluster is."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import YIELD_EVERY, error_code, respond
from odradek.broker.metadata_answers import framed
from odradek.broker.security.metadata_access import (
    MetadataAccess,
    describe_cluster_operations,
)
from odradek.cluster.metadata import MetadataError, TopicMetadata
from odradek.protocol.codec import encode_response_body
from odradek.protocol.metadata_encoder import (
    encode_metadata_body,
    encode_topic,
    topic_layout,
    with_authorized_operations,
)

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer


async def handle_api_versions(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    # The answer only depends on the version asked: its body is encoded once per version
    # and framed with each request's correlation id. (Encoding the ~90 API keys took
    # ~170 us in process, nine tenths of the request; clients send one per connection.)
    version = ctx.header.api_version
    body = server.api_versions_cache.get(version)
    if body is None:
        response = respond(
            ctx,
            {
                "error_code": ErrorCode.none,
                "api_keys": [
                    {"api_key": key, "min_version": low, "max_version": high}
                    for key, (low, high) in sorted(server.advertised_versions().items())
                ],
                "throttle_time": 0,
            },
        )
        body = encode_response_body(response)
        server.api_versions_cache[version] = body
    return framed(ctx, body)


def _endpoints(server: KafkaServer, ctx: RequestContext) -> list[tuple[int, str, int, Any]]:
    """Every broker as (id, host, port, rack); this broker as the listener the request
    came in on advertises it, as Kafka answers with the endpoints of that listener."""
    own = server.advertised_endpoint(ctx.listener_name)
    brokers = []
    for b in server.metadata.brokers():
        host, port = own if b.node_id == server.broker_id and own is not None else (b.host, b.port)
        brokers.append((b.node_id, host, port, b.rack))
    return brokers


async def handle_metadata(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    requested = getattr(request, "topics", None)
    version = ctx.header.api_version
    # v0: an empty list means every topic; v1+: null means every topic.
    every_topic = requested is None or (version == 0 and not requested)
    names = [] if every_topic else [t.name for t in requested if getattr(t, "name", None)]
    allow_auto_create = getattr(request, "allow_auto_topic_creation", True)
    auto_create = bool(
        allow_auto_create and server.config.get("auto.create.topics.enable") and not every_topic
    )
    store = server.metadata
    access = MetadataAccess.of(ctx, request, version)
    generation = store.generation
    endpoints = _endpoints(server, ctx)
    if auto_create and any(store.topic(n) is None for n in names):
        # Something may be created: answered afresh (the metadata changes meanwhile).
        body = await _encoded_answer(server, version, generation, endpoints, names, access,
                                     every_topic=False, auto_create=True)  # fmt: skip
        return framed(ctx, body)
    # The answer follows from the metadata, the endpoints of the listener asked and (under
    # an authorizer) the principal and the ACLs: the encoded one is kept until they change.
    key = (version, tuple(endpoints), None if every_topic else tuple(names), access.key)
    body = server.metadata_answers.get(generation, key)
    if body is None:
        body = await _encoded_answer(
            server, version, generation, endpoints,
            sorted(store.topics()) if every_topic else names, access, every_topic,
        )  # fmt: skip
        server.metadata_answers.put(generation, key, body)
    return framed(ctx, body)


async def _encoded_answer(
    server: KafkaServer,
    version: int,
    generation: int,
    endpoints: list[tuple[int, str, int, Any]],
    names: list[str],
    access: MetadataAccess | None = None,
    every_topic: bool = False,
    auto_create: bool = False,
) -> bytes:
    """The answer's body, from each topic's kept encoded entry (encoded again only for a
    topic that changed since: the store publishes a new TopicMetadata for every change),
    with the topics ``access`` refuses left out (every topic) or answered refused."""
    access = access or MetadataAccess(None)
    store = server.metadata
    entries = server.metadata_topic_entries
    present = store.topics()  # replaced, never changed, by every topic change
    entries.prune(generation, present)
    layout = topic_layout(version)
    kept = entries.kept
    topics = []
    # The loop costs about a microsecond per kept topic: it yields to the event loop
    # every YIELD_EVERY topics (a Ticker's coroutine per topic would cost a third more).
    for count, name in enumerate(names, 1):
        if count % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        if not access.answers(name, every_topic):
            continue
        topic = present.get(name)
        if topic is None and auto_create:
            if not access.may_auto_create(name):
                continue
            try:
                server.topics.create_topic(name)
            except MetadataError as exc:
                topics.append(encode_topic(version, error_code(exc.error_name), name, None,
                                           False, (), access.topic_operations(name)))  # fmt: skip
                continue
            topic = store.topic(name)
        if topic is None:
            topics.append(encode_topic(version, ErrorCode.unknown_topic_or_partition, name,
                                       None, False, (), access.topic_operations(name)))  # fmt: skip
            continue
        entry = kept(name, layout, topic, None)
        if entry is None:
            encode = partial(_encode, version, topic)
            entry = await entries.encode(name, layout, topic, None, encode, len(topic.partitions))
        if access.topic_operations_asked:
            entry = with_authorized_operations(version, entry, access.topic_operations(name))
        topics.append(entry)
    topics.extend(access.refused_entries(version))
    return encode_metadata_body(
        version,
        brokers=endpoints,
        cluster_id=store.cluster_id,
        controller_id=store.controller_id(),
        topics=topics,
        cluster_authorized_operations=access.cluster_operations(),
    )


def _encode(version: int, topic: TopicMetadata) -> bytes:
    rows = [
        (0, index, a.leader, a.leader_epoch, a.replicas, a.isr or a.replicas, ())
        for index, a in sorted(topic.partitions.items())
    ]
    return encode_topic(version, 0, topic.name, topic.topic_id, topic.is_internal, rows)


async def handle_describe_cluster(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    return respond(
        ctx,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "endpoint_type": 1,
            "cluster_id": server.metadata.cluster_id,
            "controller_id": server.metadata.controller_id(),
            "brokers": [
                {"broker_id": node_id, "host": host, "port": port, "rack": rack}
                for node_id, host, port, rack in _endpoints(server, ctx)
            ],
            "cluster_authorized_operations": describe_cluster_operations(ctx, request),
        },
    )
