"""Metadata under an authorizer, answered from kept encoded topic entries, against the
path it replaced: the answer built as dicts by the handler, then filtered per principal
by the enforcer (its Metadata rule and handler are kept below, as they were, to compare
with). Principals with literal, prefixed and wildcard Allow and Deny ACLs, a super user;
named unauthorized and missing topics with and without the right to create them; every
version, with and without the authorized-operations fields (KIP-430), which the old path
never filled: there the expectation is a table of what each principal may do."""

from __future__ import annotations

import asyncio
import shutil
import types
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.handlers import metadata as metadata_handler
from odradek.broker.handlers.cluster_topics import ClusterTopicHandlers
from odradek.broker.metadata_answers import EncodedAnswers, TopicEntries
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.requests import ResponseValues
from odradek.broker.security.acl import (
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from odradek.broker.security.api_rules import RULES
from odradek.broker.security.authorizer import AclAuthorizer, AuthorizerSettings
from odradek.broker.security.enforcement import Check, Decision, Enforcer, Split
from odradek.broker.security.metadata_access import (
    ALL_CLUSTER_OPERATIONS,
    ALL_TOPIC_OPERATIONS,
)
from odradek.cluster.acl_store import LocalAclStore
from odradek.cluster.local_store import LocalMetadataStore
from odradek.cluster.metadata import BrokerInfo, MetadataError, validate_topic_name
from odradek.protocol.build import build_request, build_response
from odradek.protocol.codec import decode_response, encode_response_body
from tests.broker.test_metadata_topic_entries import kio_embedded_topic, state, update

ALICE, BOB, ADMIN, EVE = "User:alice", "User:bob", "User:admin", "User:eve"
HOST = "127.0.0.1"
DENIED = ErrorCode.topic_authorization_failed
NOT_REQUESTED = -(2**31)
TOPICS = ["lit", "pre-a", "pre-b", "pre-denied", "public", "secret", "other",
          "__consumer_offsets"]  # fmt: skip
NAMED = ["lit", "other", "pre-a", "pre-denied", "missing-x", "new-t1", "nocreate-t", "secret",
         "public", "lit"]  # fmt: skip
Op = Operation

# What each principal may do on each topic (KIP-430 bit fields), written out by hand from
# the ACLs below; a topic not listed: nothing. The super user may do everything.
OPERATIONS: dict[tuple[str, str], set[Operation]] = {
    (ALICE, "lit"): {Op.DESCRIBE, Op.WRITE},
    (ALICE, "pre-a"): {Op.READ, Op.DESCRIBE},
    (ALICE, "pre-b"): {Op.READ, Op.DESCRIBE},
    (ALICE, "pre-denied"): {Op.READ},  # Describe denied by a literal DENY
    (ALICE, "public"): {Op.DESCRIBE},
    (ALICE, "new-t1"): {Op.CREATE, Op.DESCRIBE},
    (ALICE, "new-x"): {Op.CREATE, Op.DESCRIBE},
    (ALICE, "nocreate-t"): {Op.DESCRIBE},
    (EVE, "public"): {Op.DESCRIBE},  # User:*
    **{(BOB, t): {Op.DESCRIBE} for t in [*TOPICS, *NAMED] if t != "secret"},
}
# Alter implies Describe, on the cluster as on topics; eve has no Describe there: 0.
CLUSTER_OPERATIONS = {
    ALICE: (1 << Op.ALTER) | (1 << Op.DESCRIBE),
    BOB: (1 << Op.DESCRIBE) | (1 << Op.CREATE),
    EVE: 0,
    ADMIN: ALL_CLUSTER_OPERATIONS,
}


def bits(principal: str, topic: str) -> int:
    if principal == ADMIN:
        return ALL_TOPIC_OPERATIONS
    return sum(1 << op for op in OPERATIONS.get((principal, topic), ()))


def binding(principal: str, kind: ResourceType, name: str, op: Operation,
            pattern: PatternType = PatternType.LITERAL,
            permission: Permission = Permission.ALLOW) -> AclBinding:  # fmt: skip
    return AclBinding(
        ResourcePattern(kind, name, pattern), AccessControlEntry(principal, "*", op, permission)
    )


TOPIC, CLUSTER, PREFIXED = ResourceType.TOPIC, ResourceType.CLUSTER, PatternType.PREFIXED
ACLS = [
    binding(ALICE, TOPIC, "lit", Op.DESCRIBE),
    binding(ALICE, TOPIC, "lit", Op.WRITE),
    binding(ALICE, TOPIC, "pre-", Op.READ, PREFIXED),
    binding(ALICE, TOPIC, "pre-denied", Op.DESCRIBE, permission=Permission.DENY),
    binding(ALICE, TOPIC, "new-", Op.CREATE, PREFIXED),
    binding(ALICE, TOPIC, "new-", Op.DESCRIBE, PREFIXED),
    binding(ALICE, TOPIC, "nocreate-", Op.DESCRIBE, PREFIXED),
    binding(ALICE, TOPIC, "secret", Op.READ),
    binding("User:*", TOPIC, "public", Op.DESCRIBE),
    binding("User:*", TOPIC, "secret", Op.ALL, permission=Permission.DENY),
    binding(BOB, TOPIC, WILDCARD, Op.DESCRIBE),
    binding(BOB, CLUSTER, "kafka-cluster", Op.CREATE),
    binding(BOB, CLUSTER, "kafka-cluster", Op.DESCRIBE),
    binding(ALICE, CLUSTER, "kafka-cluster", Op.ALTER),
]


# --- the path this replaced, kept here to compare with ---------------------------------


def old_rule(check: Check, request: Any, _version: int, *, topic_exists: Any,
             auto_create_topics: bool) -> Decision | None:  # fmt: skip
    """api_rules.metadata as it was: hide (every topic) or refuse (named) topics (the
    enforcer's Check then carried ``topic_exists`` and ``auto_create_topics``)."""
    if request.topics is None:
        return Decision(keep=("topics", lambda t: check.topic(Op.DESCRIBE, str(t.name))))
    auto_create = auto_create_topics and bool(
        getattr(request, "allow_auto_topic_creation", True)
    )
    may_create_any = auto_create and check.cluster(Op.CREATE)
    codes: list[int | None] = []
    for element in request.topics:
        name = str(element.name)
        if not check.topic(Op.DESCRIBE, name) or (
            auto_create and not may_create_any and not topic_exists(name)
            and not check.topic(Op.CREATE, name)
        ):  # fmt: skip
            codes.append(int(DENIED))
        else:
            codes.append(None)
    return Decision(split=Split("topics", "topics", codes))


async def old_handler(server: Any, ctx: Any, request: Any) -> Any:
    """The handler's dict-built answer, as it ran whenever an authorizer was configured."""
    requested = getattr(request, "topics", None)
    every_topic = requested is None or (ctx.header.api_version == 0 and not requested)
    names = [] if every_topic else [t.name for t in requested if getattr(t, "name", None)]
    store = server.metadata
    topics = []
    for name in sorted(store.topics()) if every_topic else names:
        if store.topic(name) is None:
            try:
                server.topics.create_topic(name)
            except MetadataError as exc:
                topics.append({"name": name, "error_code": ErrorCode[exc.error_name.lower()]})
                continue
        topics.append(kio_embedded_topic(server, name))
    brokers = metadata_handler._endpoints(server, ctx)
    return ResponseValues({
        "throttle_time": 0,
        "brokers": [{"node_id": n, "host": h, "port": p, "rack": r} for n, h, p, r in brokers],
        "cluster_id": store.cluster_id,
        "controller_id": store.controller_id(),
        "topics": topics,
        "cluster_authorized_operations": NOT_REQUESTED,
    })  # fmt: skip


# --- set-up ----------------------------------------------------------------------------


class Topics:
    """The topic manager's auto-creation, on the store alone (no logs)."""

    def __init__(self, store: LocalMetadataStore) -> None:
        self.store = store

    def create_topic(self, name: str) -> None:
        validate_topic_name(name)
        self.store.create_topic(name, 3, 1, {})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("metadata-access")
    store = LocalMetadataStore(root / "metadata", BrokerInfo(1, HOST, 9092))
    for i, name in enumerate(TOPICS):
        store.create_topic(name, 1 + i % 3, 1, {})
    authorizer = AclAuthorizer(LocalAclStore(root / "acls"), AuthorizerSettings(frozenset({ADMIN})))
    authorizer.start()
    authorizer.create(ACLS)
    return types.SimpleNamespace(root=root, authorizer=authorizer, copies=0)


def server(world: Any, auto_create: bool = True) -> Any:
    """A broker's Metadata state on its own copy of the one store (same topic ids)."""
    world.copies += 1
    path = world.root / f"copy-{world.copies}"
    shutil.copytree(world.root / "metadata", path)
    store = LocalMetadataStore(path, BrokerInfo(1, HOST, 9092))
    return types.SimpleNamespace(
        metadata=store, metadata_topic_entries=TopicEntries(), metadata_answers=EncodedAnswers(),
        broker_id=1, advertised_endpoint=lambda _listener: None, topics=Topics(store),
        config=types.SimpleNamespace(get={"auto.create.topics.enable": auto_create}.get),
    )  # fmt: skip


def ctx(version: int, principal: str) -> Any:
    return types.SimpleNamespace(
        header=types.SimpleNamespace(api_key=3, api_version=version, correlation_id=7),
        listener_name="PLAINTEXT", principal=principal, client_host=HOST, authz=None,
    )  # fmt: skip


def request(version: int, names: list[str] | None, *, auto: bool = True, ops: bool = False,
            cluster_ops: bool = False) -> Any:  # fmt: skip
    topics = None if names is None else [{"name": n} for n in names]
    if version == 0 and topics is None:
        topics = []  # v0 asks for every topic with an empty list
    return build_request(3, version, {
        "topics": topics, "allow_auto_topic_creation": auto,
        "include_topic_authorized_operations": ops,
        "include_cluster_authorized_operations": cluster_ops,
    })  # fmt: skip


def decoded(version: int, answer: Any) -> Any:
    """Any form of answer (encoded chunks, values, an entity) decoded from its bytes."""
    if isinstance(answer, ResponseValues):
        answer = build_response(3, version, answer.values)
    body = answer.chunks[1] if hasattr(answer, "chunks") else encode_response_body(answer)
    head = (7).to_bytes(4, "big") + (b"\x00" if version >= 9 else b"")
    return decode_response(3, version, head + body)[1]


def ask(world: Any, srv: Any, version: int, principal: str, req: Any, *, old: bool = False,
        authorizer: AclAuthorizer | None = None) -> Any:  # fmt: skip
    """One Metadata request through the enforcer, as the broker dispatches it."""
    auto = bool(srv.config.get("auto.create.topics.enable"))
    exists = lambda name: srv.metadata.topic(name) is not None  # noqa: E731
    rule = partial(old_rule, topic_exists=exists, auto_create_topics=auto)
    rules = {**RULES, 3: rule} if old else RULES
    enforcer = Enforcer(authorizer or world.authorizer, rules)
    handler = partial(old_handler if old else metadata_handler.handle_metadata, srv)
    return decoded(version, asyncio.run(enforcer.handle(ctx(version, principal), req, handler)))


def with_operations(answer: Any, principal: str, topic_ops: bool, cluster_ops: bool) -> Any:
    """The old answer with the authorized-operations fields the request asked for."""
    topics = tuple(
        t if not topic_ops or t.error_code == DENIED
        else replace(t, topic_authorized_operations=bits(principal, t.name))
        for t in answer.topics
    )  # fmt: skip
    if cluster_ops:
        return replace(answer, topics=topics,
                       cluster_authorized_operations=CLUSTER_OPERATIONS[principal])  # fmt: skip
    return replace(answer, topics=topics)


def names_and_codes(answer: Any) -> list[tuple[str, int]]:
    return [(t.name, int(t.error_code)) for t in answer.topics]


# --- the comparisons --------------------------------------------------------------------


@pytest.mark.parametrize("principal", [ALICE, BOB, ADMIN, EVE])
@pytest.mark.parametrize("version", range(14))
def test_every_topic_and_named_topics_match_the_old_path(
    world: Any, principal: str, version: int
) -> None:
    """Nothing to create (auto-creation off in the request or broker): old and new agree,
    and with the authorized operations asked, they are the table's."""
    srv = server(world)
    flags = [(False, False)]
    if version >= 8:
        flags.append((True, 8 <= version <= 10))
    # v0's every topic is left out: the old path showed every topic there (see below).
    asked = [["lit", "other", "pre-denied", "secret", "public", "lit"]]
    for names in asked if version == 0 else [None, *asked]:
        for topic_ops, cluster_ops in flags:
            req = request(version, names, auto=False, ops=topic_ops, cluster_ops=cluster_ops)
            new = ask(world, srv, version, principal, req)
            old = ask(world, srv, version, principal, req, old=True)
            assert new == with_operations(old, principal, topic_ops, cluster_ops)
            again = ask(world, srv, version, principal, req)  # the kept answer
            assert again == new


@pytest.mark.parametrize("principal", [ALICE, BOB])
@pytest.mark.parametrize("version", [1, 4, 8, 9, 10, 12, 13])
def test_missing_topics_created_only_with_create_rights_as_before(
    world: Any, principal: str, version: int
) -> None:
    """Auto-creation on: alice may create ``new-*`` only, bob anything (Create on the
    cluster); a missing topic she may describe but not create is refused."""
    for topic_ops in (False, True) if version >= 8 else (False,):
        req = request(version, NAMED, ops=topic_ops, cluster_ops=topic_ops and version <= 10)
        new_srv, old_srv = server(world), server(world)
        new = ask(world, new_srv, version, principal, req)
        old = ask(world, old_srv, version, principal, req, old=True)
        created = set(new_srv.metadata.topics()) - set(TOPICS)
        assert created == set(old_srv.metadata.topics()) - set(TOPICS)
        # Each broker gave a created topic its own id: compare the rest.
        if version >= 10:
            ids = {t.name: t.topic_id for t in new.topics if t.name in created}
            old = replace(old, topics=tuple(
                replace(t, topic_id=ids[t.name]) if t.name in created else t
                for t in old.topics
            ))  # fmt: skip
        assert new == with_operations(old, principal, topic_ops, topic_ops and version <= 10)
        if principal == ALICE:
            assert created == {"new-t1"}
            assert dict(names_and_codes(new))["nocreate-t"] == DENIED
        else:
            assert created == {"missing-x", "new-t1", "nocreate-t"}


def test_expected_answers_by_hand(world: Any) -> None:
    """The comparisons' anchor: what alice is answered, written out."""
    srv = server(world)
    everything = ask(world, srv, 9, ALICE, request(9, None))
    assert [t.name for t in everything.topics] == ["lit", "pre-a", "pre-b", "public"]
    # The same request by others on the same broker: their own answers, not alice's kept one.
    assert [t.name for t in ask(world, srv, 9, EVE, request(9, None)).topics] == ["public"]
    assert len(ask(world, srv, 9, ADMIN, request(9, None)).topics) == len(TOPICS)
    named = ask(world, srv, 10, ALICE, request(10, NAMED))
    # Answered topics first, then the refused ones, each in the request's order.
    answered = ["lit", "pre-a", "new-t1", "public", "lit"]
    refused = ["other", "pre-denied", "missing-x", "nocreate-t", "secret"]
    assert names_and_codes(named) == [(n, 0) for n in answered] + [(n, DENIED) for n in refused]
    assert srv.metadata.topic("new-t1") is not None  # created: alice may create new-*
    for t in named.topics:
        if t.error_code == DENIED:  # nothing disclosed
            assert t.partitions == () and not t.is_internal and t.topic_id is None  # zero
    ops = ask(world, srv, 10, ALICE, request(10, ["lit", "secret"], ops=True, cluster_ops=True))
    assert [t.topic_authorized_operations for t in ops.topics] == [
        (1 << Op.WRITE) | (1 << Op.DESCRIBE), NOT_REQUESTED]
    assert ops.cluster_authorized_operations == (1 << Op.ALTER) | (1 << Op.DESCRIBE)
    eve = ask(world, srv, 10, EVE, request(10, ["lit"], ops=True, cluster_ops=True))
    assert eve.cluster_authorized_operations == 0 and eve.topics[0].error_code == DENIED


@pytest.mark.parametrize("auto_in_request, auto_in_broker", [(False, True), (True, False)])
def test_a_missing_topic_is_never_created_without_auto_creation(
    world: Any, auto_in_request: bool, auto_in_broker: bool
) -> None:
    """The old path created any missing topic the principal could describe, whatever
    allow_auto_topic_creation or auto.create.topics.enable said; Kafka answers
    UNKNOWN_TOPIC_OR_PARTITION."""
    srv = server(world, auto_create=auto_in_broker)
    answer = ask(world, srv, 9, ALICE, request(9, ["new-t1", "nocreate-t"], auto=auto_in_request))
    assert names_and_codes(answer) == [("new-t1", ErrorCode.unknown_topic_or_partition),
                                       ("nocreate-t", ErrorCode.unknown_topic_or_partition)]
    assert set(srv.metadata.topics()) == set(TOPICS)


def test_v0_every_topic_hides_what_the_principal_may_not_describe(world: Any) -> None:
    """v0 asks for every topic with an empty list (the old rule let it through whole)."""
    answer = ask(world, server(world), 0, ALICE, request(0, None))
    assert [t.name for t in answer.topics] == ["lit", "pre-a", "pre-b", "public"]


def test_an_acl_change_is_seen_by_the_next_answer(tmp_path: Path, world: Any) -> None:
    authorizer = AclAuthorizer(LocalAclStore(tmp_path), AuthorizerSettings(frozenset()))
    authorizer.start()
    srv = server(world)
    req = request(9, None)
    assert ask(world, srv, 9, EVE, req, authorizer=authorizer).topics == ()
    grant = binding(EVE, TOPIC, "pre-", Op.DESCRIBE, PREFIXED)
    authorizer.create([grant])
    shown = ask(world, srv, 9, EVE, req, authorizer=authorizer)
    assert [t.name for t in shown.topics] == ["pre-a", "pre-b", "pre-denied"]
    authorizer.delete([AclBindingFilter(TOPIC, "pre-", PREFIXED, EVE)])
    assert ask(world, srv, 9, EVE, req, authorizer=authorizer).topics == ()


def test_allow_everyone_if_no_acl_found(tmp_path: Path, world: Any) -> None:
    settings = AuthorizerSettings(frozenset(), allow_everyone_if_no_acl_found=True)
    authorizer = AclAuthorizer(LocalAclStore(tmp_path), settings)
    authorizer.start()
    authorizer.create([binding(ALICE, TOPIC, "secret", Op.READ)])  # only alice on secret
    answer = ask(world, server(world), 9, EVE, request(9, None), authorizer=authorizer)
    assert [t.name for t in answer.topics] == sorted(set(TOPICS) - {"secret"})


def test_without_an_authorizer_every_operation_is_reported(world: Any) -> None:
    srv = server(world)
    req = request(10, ["lit", "nope"], auto=False, ops=True, cluster_ops=True)
    answer = decoded(10, asyncio.run(metadata_handler.handle_metadata(srv, ctx(10, ALICE), req)))
    assert [t.topic_authorized_operations for t in answer.topics] == [ALL_TOPIC_OPERATIONS] * 2
    assert answer.cluster_authorized_operations == ALL_CLUSTER_OPERATIONS
    assert ALL_TOPIC_OPERATIONS == 0b1101_1111_1000 and ALL_CLUSTER_OPERATIONS == 0b1_1111_1010_0000


def test_metadata_has_no_enforcer_rule() -> None:
    assert 3 not in RULES  # the handler decides per topic (a rule would filter twice)


# --- cluster mode -------------------------------------------------------------------------


def test_cluster_handler_filters_refuses_and_reports_operations(world: Any) -> None:
    cache = MetadataCache(1)
    update(cache, [state(t, 0, 1) for t in ("lit", "pre-a", "secret", "other")])
    settings = {"auto.create.topics.enable": False}
    h = ClusterTopicHandlers(1, "cid", None, cache, settings.__getitem__, lambda _c: None)  # type: ignore[arg-type]

    def go(principal: str, req: Any, version: int = 10) -> Any:
        enforcer = Enforcer(world.authorizer, RULES)
        return decoded(version, asyncio.run(enforcer.handle(ctx(version, principal), req,
                                                            h.handle_metadata)))  # fmt: skip

    assert [t.name for t in go(ALICE, request(10, None)).topics] == ["lit", "pre-a"]
    named = go(ALICE, request(10, ["secret", "lit", "nope", "new-x"], ops=True, cluster_ops=True))
    assert names_and_codes(named) == [
        ("lit", 0), ("new-x", ErrorCode.unknown_topic_or_partition),
        ("secret", DENIED), ("nope", DENIED)]  # fmt: skip
    assert [t.topic_authorized_operations for t in named.topics] == [
        bits(ALICE, "lit"), bits(ALICE, "new-x"), NOT_REQUESTED, NOT_REQUESTED]
    assert named.cluster_authorized_operations == CLUSTER_OPERATIONS[ALICE]
    assert [t.name for t in go(ADMIN, request(10, None)).topics] == [
        "lit", "other", "pre-a", "secret"]
    assert go(BOB, request(10, None, cluster_ops=True)).cluster_authorized_operations == (
        CLUSTER_OPERATIONS[BOB])
