"""Kept Metadata topic entries (cluster mode and the embedded broker): only changed topics
are encoded again, every change shows in the next answer, and the bytes are those of the
kio-built answer (what an authorizer or auto-creation took before they were kept too)."""

from __future__ import annotations

import asyncio
import random
import types
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.handlers import metadata as metadata_handler
from odradek.broker.handlers.cluster_topics import ClusterTopicHandlers
from odradek.broker.metadata_answers import ENCODE_ON_THREAD_PARTITIONS, TopicEntries
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.partition import NO_LEADER
from odradek.cluster.local_store import LocalMetadataStore
from odradek.cluster.metadata import INTERNAL_TOPICS, BrokerInfo
from odradek.protocol import interbroker
from odradek.protocol.build import build_request, build_response
from odradek.protocol.codec import decode_response, encode_response_body
from odradek.protocol.metadata_encoder import topic_layout
from tests.broker.test_interbroker_handlers import build

IDS = {"a": uuid.UUID(int=0xA), "b": uuid.UUID(int=0xB), "__consumer_offsets": uuid.UUID(int=7)}
EVERY_TOPIC = {"topics": None, "allow_auto_topic_creation": False,
               "include_topic_authorized_operations": False}  # fmt: skip


def state(
    topic: str,
    index: int,
    leader: int,
    epoch: int = 0,
    isr: list[int] | None = None,
    replicas: list[int] | None = None,
    offline: list[int] | None = None,
) -> dict[str, Any]:
    replicas = [1, 2] if replicas is None else replicas
    return {
        "topic_name": topic,
        "partition_index": index,
        "controller_epoch": 1,
        "leader": leader,
        "leader_epoch": epoch,
        "isr": replicas if isr is None else isr,
        "zk_version": epoch,
        "replicas": replicas,
        "offline_replicas": offline or [],
    }


def update(cache: MetadataCache, states: list[dict[str, Any]], live: tuple[int, ...] = (1, 2)):
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for s in states:
        by_topic.setdefault(s["topic_name"], []).append(s)
    cache.update(
        build(
            interbroker.request_class(interbroker.UPDATE_METADATA, 7),
            {
                "controller_id": 2,
                "controller_epoch": 1,
                "broker_epoch": -1,
                "topic_states": [
                    {"topic_name": t, "topic_id": IDS.get(t), "partition_states": parts}
                    for t, parts in by_topic.items()
                ],
                "live_brokers": [
                    {"id_": b, "rack": f"r{b}" if b % 2 else None, "endpoints": [
                        {"port": 9000 + b, "host": f"127.0.0.{b}", "listener": "PLAINTEXT",
                         "security_protocol": 0}]}
                    for b in live
                ],
            },
        )
    )  # fmt: skip


def handlers(cache: MetadataCache) -> ClusterTopicHandlers:
    settings = {"auto.create.topics.enable": False}
    return ClusterTopicHandlers(1, "cid", None, cache, settings.__getitem__, lambda _c: None)  # type: ignore[arg-type]


def ctx(version: int) -> Any:
    return types.SimpleNamespace(
        header=types.SimpleNamespace(api_key=3, api_version=version, correlation_id=7),
        listener_name="PLAINTEXT",
        authz=None,
    )


def ask(h: ClusterTopicHandlers, version: int = 9, names: list[str] | None = None) -> bytes:
    values = dict(EVERY_TOPIC)
    if names is not None:
        values["topics"] = [{"name": n} for n in names]
    request = build_request(3, version, values)
    answer = asyncio.run(h.handle_metadata(ctx(version), request))
    return answer.chunks[1]


def decoded(body: bytes, version: int = 9) -> Any:
    head = (7).to_bytes(4, "big") + (b"\x00" if version >= 9 else b"")
    return decode_response(3, version, head + body)[1]


def topics(body: bytes) -> dict[str, Any]:
    return {t.name: t for t in decoded(body).topics}


def test_cache_keeps_the_mapping_of_topics_an_update_leaves_alone() -> None:
    cache = MetadataCache(1)
    update(cache, [state("a", 0, 1), state("a", 1, 2), state("b", 0, 1)])
    a, b = cache.partition_map("a"), cache.partition_map("b")
    update(cache, [state("b", 0, 2, epoch=1)])  # a leader change in b only
    assert cache.partition_map("a") is a
    assert cache.partition_map("b") is not b and b is not None and b[0].leader == 1
    update(cache, [state("a", 0, 1), state("a", 1, 2)])  # the same state again: no change
    assert cache.partition_map("a") is a
    update(cache, [state("a", 1, 2, isr=[2])])  # an ISR change alone
    assert cache.partition_map("a") is not a and a is not None and a[1].isr == (1, 2)


def test_only_changed_topics_are_encoded_again_and_every_change_shows() -> None:
    cache = MetadataCache(1)
    update(cache, [state("a", i, 1 + i % 2) for i in range(50)] + [state("b", 0, 1)])
    h = handlers(cache)
    first = ask(h)
    assert h.entries.encoded == 2
    assert ask(h) is first  # the whole answer kept
    # A leader change in b: a's entry is reused, b encoded again, the change shows.
    update(cache, [state("b", 0, 2, epoch=1)])
    after_leader = topics(ask(h))
    assert h.entries.encoded == 3
    moved = after_leader["b"].partitions[0]
    assert (moved.leader_id, moved.leader_epoch) == (2, 1)
    # A partition added to a.
    update(cache, [state("a", 50, 2)])
    assert len(topics(ask(h))["a"].partitions) == 51
    assert h.entries.encoded == 4
    # Broker 2 dies: its partitions answer LEADER_NOT_AVAILABLE without a leader.
    update(cache, [], live=(1,))
    dead = topics(ask(h))["a"].partitions
    assert dead[1].error_code == ErrorCode.leader_not_available and dead[1].leader_id == -1
    assert dead[0].error_code == ErrorCode.none and dead[0].leader_id == 1
    # The controller deletes b (leader -2): gone from the next answer, its entry forgotten.
    update(cache, [state("b", 0, -2)], live=(1,))
    answer = topics(ask(h))
    assert list(answer) == ["a"]
    assert topics(ask(h, names=["b"]))["b"].error_code == ErrorCode.unknown_topic_or_partition
    assert all(name != "b" for name, _ in h.entries._entries)
    # b comes back (a new topic of the same name): a fresh entry, not the deleted one's.
    update(cache, [state("b", 0, 1, epoch=5), state("b", 1, 1, epoch=5)], live=(1,))
    assert [p.leader_epoch for p in topics(ask(h))["b"].partitions] == [5, 5]


@pytest.mark.parametrize("version", range(1, 14))
def test_fast_answer_is_the_kio_answer(version: int) -> None:
    """The kept-entry answer against the same answer built as kio dataclasses (what an
    authorizer or auto-creation took before), for every version, with dead leaders, offline
    replicas, an internal topic, a topic id and a topic that does not exist."""
    cache = MetadataCache(1)
    update(cache, [state("a", i, 1 + i % 3, epoch=i, offline=[3] if i % 3 == 2 else None)
                   for i in range(9)] + [state("__consumer_offsets", 0, 2)])  # fmt: skip
    h = handlers(cache)
    names = ["__consumer_offsets", "a", "missing"]
    fast = ask(h, version, names)
    values = {
        "throttle_time": 0,
        "brokers": [
            {"node_id": n, "host": host, "port": p, "rack": r}
            for n, host, p, r in h._brokers_on("PLAINTEXT")
        ],
        "cluster_id": "cid",
        "controller_id": 2,
        "topics": [kio_cluster_topic(cache, n) for n in names],
        "cluster_authorized_operations": -(2**31),
    }
    assert fast == encode_response_body(build_response(3, version, values))


def kio_cluster_topic(cache: MetadataCache, name: str) -> dict[str, Any]:
    """One topic as kio values, as the handler built it before topic entries were kept:
    a leader that is not a live broker answers LEADER_NOT_AVAILABLE and no leader."""
    partitions = cache.partitions(name)
    if partitions is None:
        return {"name": name, "error_code": ErrorCode.unknown_topic_or_partition, "partitions": []}
    live = {b.broker_id for b in cache.live_brokers()}
    entries = []
    for index, info in sorted(partitions.items()):
        alive = info.leader != NO_LEADER and info.leader in live
        entries.append({
            "error_code": ErrorCode.none if alive else ErrorCode.leader_not_available,
            "partition_index": index, "leader_id": info.leader if alive else NO_LEADER,
            "leader_epoch": info.leader_epoch, "replica_nodes": list(info.replicas),
            "isr_nodes": list(info.isr), "offline_replicas": list(info.offline_replicas),
        })  # fmt: skip
    return {"error_code": ErrorCode.none, "name": name, "topic_id": cache.topic_id(name),
            "is_internal": name in INTERNAL_TOPICS, "partitions": entries,
            "topic_authorized_operations": -(2**31)}  # fmt: skip


def test_topic_entries_follow_identity_and_extra() -> None:
    entries = TopicEntries()
    one, two = object(), object()

    def get(state: object, extra: int, value: bytes, version: int = 9, size: int = 1) -> bytes:
        # As the handlers do: the kept entry, else encode it (and keep it).
        layout = topic_layout(version)
        found = entries.kept("t", layout, state, extra)
        if found is not None:
            return found
        return asyncio.run(entries.encode("t", layout, state, extra, lambda: value, size))

    assert get(one, 1, b"x") == b"x"
    assert get(one, 1, b"y") == b"x"  # same state: kept
    assert get(one, 1, b"v10", version=10) == b"v10"  # another layout
    assert get(two, 1, b"z") == b"z"  # a new state object
    assert get(two, 2, b"w", size=ENCODE_ON_THREAD_PARTITIONS + 1) == b"w"  # extra changed
    assert get(two, 2, b"again") == b"w"  # encoded on a thread, kept all the same
    entries.prune(1, {"other"})
    assert len(entries) == 0


# --- the embedded broker's handler ------------------------------------------------------


def embedded(tmp_path: Path) -> Any:
    store = LocalMetadataStore(tmp_path, BrokerInfo(1, "127.0.0.1", 9092))
    return types.SimpleNamespace(
        metadata=store,
        metadata_topic_entries=TopicEntries(),
        broker_id=1,
        advertised_endpoint=lambda _listener: None,
    )


def kio_embedded_topic(server: Any, name: str) -> dict[str, Any]:
    """The embedded broker's topic as kio values (as its handler built it before)."""
    topic = server.metadata.topic(name)
    if topic is None:
        return {"name": name, "error_code": ErrorCode.unknown_topic_or_partition, "partitions": []}
    partitions = [
        {"error_code": ErrorCode.none, "partition_index": i, "leader_id": a.leader,
         "leader_epoch": a.leader_epoch, "replica_nodes": a.replicas,
         "isr_nodes": a.isr or a.replicas, "offline_replicas": []}
        for i, a in sorted(topic.partitions.items())
    ]  # fmt: skip
    return {"error_code": ErrorCode.none, "name": name, "topic_id": topic.topic_id,
            "is_internal": topic.is_internal, "partitions": partitions,
            "topic_authorized_operations": -(2**31)}  # fmt: skip


def embedded_answer(server: Any, version: int, names: list[str]) -> bytes:
    endpoints = metadata_handler._endpoints(server, ctx(version))
    return asyncio.run(
        metadata_handler._encoded_answer(
            server, version, server.metadata.generation, endpoints, names
        )
    )


@pytest.mark.parametrize("version", range(1, 14))
def test_embedded_fast_answer_is_the_kio_answer(tmp_path: Path, version: int) -> None:
    server = embedded(tmp_path)
    server.metadata.create_topic("__consumer_offsets", 3, 1, {})
    server.metadata.create_topic("t", 20, 1, {})
    names = ["__consumer_offsets", "nope", "t"]
    brokers = metadata_handler._endpoints(server, ctx(version))
    values = {
        "throttle_time": 0,
        "brokers": [{"node_id": n, "host": h, "port": p, "rack": r} for n, h, p, r in brokers],
        "cluster_id": server.metadata.cluster_id,
        "controller_id": server.metadata.controller_id(),
        "topics": [kio_embedded_topic(server, n) for n in names],
        "cluster_authorized_operations": -(2**31),
    }
    expected = encode_response_body(build_response(3, version, values))
    assert embedded_answer(server, version, names) == expected


def test_embedded_changes_show_and_only_they_are_encoded(tmp_path: Path) -> None:
    server = embedded(tmp_path)
    store = server.metadata
    store.create_topic("a", 100, 1, {})
    store.create_topic("b", 2, 1, {})
    entries = server.metadata_topic_entries
    assert set(topics(embedded_answer(server, 9, ["a", "b"]))) == {"a", "b"}
    assert entries.encoded == 2
    store.add_partitions("b", 5)  # b grows: only b is encoded again
    answer = topics(embedded_answer(server, 9, ["a", "b"]))
    assert len(answer["b"].partitions) == 5 and len(answer["a"].partitions) == 100
    assert entries.encoded == 3
    store.delete_topic("b")
    answer = topics(embedded_answer(server, 9, ["a", "b"]))
    assert answer["b"].error_code == ErrorCode.unknown_topic_or_partition
    assert answer["b"].partitions == ()
    assert entries.encoded == 3 and len(entries) == 1  # a kept, b forgotten
    store.create_topic("b", 1, 1, {})  # a new b: its own id, not the old entry
    again = decoded(embedded_answer(server, 10, ["b"]), 10).topics[0]
    assert again.topic_id == store.topic("b").topic_id and len(again.partitions) == 1


def test_embedded_answers_match_the_store_through_random_changes(tmp_path: Path) -> None:
    """Creates, partitions added and deletes in a random order (seeded), each answer
    (every topic and a named subset, two versions) against the store itself."""
    rng = random.Random(16)
    server = embedded(tmp_path)
    store = server.metadata
    for _ in range(120):
        names = list(store.topics())
        action = rng.random()
        if action < 0.4 or not names:
            name = f"t{rng.randrange(40)}"
            if name not in names:
                store.create_topic(name, rng.randrange(1, 30), 1, {})
        elif action < 0.8:
            name = rng.choice(names)
            store.add_partitions(name, len(store.topic(name).partitions) + rng.randrange(1, 5))
        else:
            store.delete_topic(rng.choice(names))
        for version in (9, 5):
            asked = [*sorted(store.topics()), "absent"]
            answer = decoded(embedded_answer(server, version, asked), version)
            got = {t.name: len(t.partitions) for t in answer.topics}
            want = {n: len(t.partitions) for n, t in store.topics().items()}
            assert got == {**want, "absent": 0}
            assert [t.name for t in answer.topics] == asked
