"""The per-API rules and the enforcer around a stand-in handler (no network, no broker):
which elements are refused with which error, and that the handler's answer is merged."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.requests import DeferredResponse, ResponseValues
from odradek.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from odradek.broker.security.api_rules import RULES
from odradek.broker.security.authorizer import AclAuthorizer, AuthorizerSettings
from odradek.broker.security.enforcement import Enforcer
from odradek.cluster.acl_store import LocalAclStore
from odradek.protocol.build import build_request, build_response

ALICE = "User:alice"


def allow(kind: ResourceType, name: str, op: Operation, pattern: PatternType = PatternType.LITERAL):
    return AclBinding(
        ResourcePattern(kind, name, pattern),
        AccessControlEntry(ALICE, "*", op, Permission.ALLOW),
    )


@pytest.fixture
def enforcer(tmp_path: Path) -> Enforcer:
    authorizer = AclAuthorizer(LocalAclStore(tmp_path), AuthorizerSettings(frozenset()))
    authorizer.start()
    authorizer.create(
        [
            allow(ResourceType.TOPIC, "ok", Operation.WRITE),
            allow(ResourceType.TOPIC, "ok", Operation.READ),
            allow(ResourceType.TOPIC, "new-", Operation.CREATE, PatternType.PREFIXED),
            allow(ResourceType.GROUP, "g", Operation.READ),
            allow(ResourceType.GROUP, "g2", Operation.DESCRIBE),
            allow(ResourceType.TRANSACTIONAL_ID, "tx", Operation.WRITE),
        ]
    )
    return Enforcer(authorizer, RULES)


class Handler:
    """Answers like a handler would, and records the request it was given."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: Any = None

    async def __call__(self, ctx: Any, request: Any) -> Any:
        self.seen = request
        return self.answer(request) if callable(self.answer) else self.answer


def ctx(api_key: int, version: int) -> Any:
    return types.SimpleNamespace(
        header=types.SimpleNamespace(api_key=api_key, api_version=version),
        principal=ALICE,
        client_host="127.0.0.1",
        authz=None,
    )


def run(enforcer: Enforcer, api_key: int, version: int, request: Any, handler: Handler) -> Any:
    return asyncio.run(enforcer.handle(ctx(api_key, version), request, handler))


def produce_request(*topics: str, transactional_id: str | None = None) -> Any:
    return build_request(
        0,
        9,
        {
            "transactional_id": transactional_id,
            "acks": -1,
            "timeout": 1000,
            "topic_data": [
                {"name": t, "partition_data": [{"index": 0, "records": None}]} for t in topics
            ],
        },
    )


def produce_answer(request: Any) -> Any:
    responses = [
        {
            "name": t.name,
            "partition_responses": [
                {
                    "index": 0,
                    "error_code": ErrorCode.none,
                    "base_offset": 5,
                    "log_append_time": -1,
                    "log_start_offset": 0,
                    "record_errors": [],
                    "error_message": None,
                }
            ],
        }
        for t in request.topic_data
    ]
    return ResponseValues({"responses": responses, "throttle_time": 0})


def codes(response: Any) -> dict[str, int]:
    return {r.name: int(r.partition_responses[0].error_code) for r in response.responses}


def test_produce_refuses_topics_without_write_and_serves_the_others(enforcer: Enforcer) -> None:
    handler = Handler(produce_answer)
    response = run(enforcer, 0, 9, produce_request("ok", "no"), handler)
    assert [t.name for t in handler.seen.topic_data] == ["ok"]
    assert codes(response) == {"ok": 0, "no": ErrorCode.topic_authorization_failed}


def test_a_deferred_answer_is_merged_when_it_comes(enforcer: Enforcer) -> None:
    async def later(request: Any) -> Any:
        return build_response(0, 9, produce_answer(request).values)

    handler = Handler(lambda request: DeferredResponse(later(request)))

    async def go() -> Any:
        result = await enforcer.handle(ctx(0, 9), produce_request("no", "ok"), handler)
        assert isinstance(result, DeferredResponse)
        return await result.result

    assert codes(asyncio.run(go())) == {"ok": 0, "no": ErrorCode.topic_authorization_failed}


def test_transactional_produce_needs_write_on_the_transactional_id(enforcer: Enforcer) -> None:
    handler = Handler(produce_answer)
    response = run(enforcer, 0, 9, produce_request("ok", transactional_id="other"), handler)
    assert handler.seen is None
    assert codes(response) == {"ok": ErrorCode.transactional_id_authorization_failed}
    allowed = run(enforcer, 0, 9, produce_request("ok", transactional_id="tx"), handler)
    assert isinstance(allowed, ResponseValues)  # untouched: nothing was refused
    assert [t.name for t in handler.seen.topic_data] == ["ok"]


def test_group_apis_need_read_on_the_group(enforcer: Enforcer) -> None:
    def join(group: str) -> Any:
        return build_request(
            11,
            5,
            {
                "group_id": group,
                "session_timeout": 10000,
                "rebalance_timeout": 10000,
                "member_id": "",
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )

    handler = Handler("served")
    assert run(enforcer, 11, 5, join("g"), handler) == "served"
    refused = run(enforcer, 11, 5, join("other"), handler)
    assert refused.error_code == ErrorCode.group_authorization_failed


def test_offset_commit_needs_group_and_topic_read(enforcer: Enforcer) -> None:
    request = build_request(
        8,
        8,
        {
            "group_id": "g",
            "generation_id_or_member_epoch": 1,
            "member_id": "m",
            "group_instance_id": None,
            "topics": [
                {
                    "name": n,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": None,
                        }
                    ],
                }
                for n in ("ok", "no")
            ],
        },
    )

    def answer(req: Any) -> Any:
        return build_response(
            8,
            8,
            {
                "throttle_time": 0,
                "topics": [
                    {"name": t.name, "partitions": [{"partition_index": 0, "error_code": 0}]}
                    for t in req.topics
                ],
            },
        )

    response = run(enforcer, 8, 8, request, Handler(answer))
    errors = {t.name: int(t.partitions[0].error_code) for t in response.topics}
    assert errors == {"ok": 0, "no": ErrorCode.topic_authorization_failed}


def test_add_partitions_to_txn_does_not_attempt_the_rest(enforcer: Enforcer) -> None:
    request = build_request(
        24,
        3,
        {
            "v3_and_below_transactional_id": "tx",
            "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": n, "partitions": [0]} for n in ("ok", "no")],
        },
    )
    handler = Handler("unused")
    response = run(enforcer, 24, 3, request, handler)
    assert handler.seen is None
    errors = {
        t.name: int(t.results_by_partition[0].partition_error_code)
        for t in response.results_by_topic_v3_and_below
    }
    assert errors == {
        "ok": ErrorCode.operation_not_attempted,
        "no": ErrorCode.topic_authorization_failed,
    }


def test_idempotent_init_producer_id_needs_write_somewhere(
    enforcer: Enforcer, tmp_path: Path
) -> None:
    request = build_request(
        22,
        4,
        {
            "transactional_id": None,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert run(enforcer, 22, 4, request, Handler("served")) == "served"  # Write on "ok"
    nobody = AclAuthorizer(LocalAclStore(tmp_path / "empty"), AuthorizerSettings(frozenset()))
    nobody.start()
    strict = Enforcer(nobody, RULES)
    refused = run(strict, 22, 4, request, Handler("served"))
    assert refused.error_code == ErrorCode.cluster_authorization_failed


def test_inter_broker_apis_need_cluster_action(enforcer: Enforcer) -> None:
    request = build_request(
        27,
        1,
        {
            "markers": [
                {
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "transaction_result": True,
                    "topics": [{"name": "ok", "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
    )
    response = run(enforcer, 27, 1, request, Handler("served"))
    assert response.markers[0].topics[0].partitions[0].error_code == (
        ErrorCode.cluster_authorization_failed
    )


def test_offset_fetch_v8_filters_groups_and_their_topics(enforcer: Enforcer) -> None:
    request = build_request(
        9,
        8,
        {
            "groups": [
                {
                    "group_id": "g",
                    "topics": [{"name": n, "partition_indexes": [0]} for n in ("ok", "no")],
                },
                {"group_id": "g2", "topics": None},
                {"group_id": "other", "topics": None},
            ],
            "require_stable": False,
        },
    )

    def answer(req: Any) -> Any:
        partition = {
            "partition_index": 0,
            "committed_offset": 7,
            "committed_leader_epoch": -1,
            "metadata": "",
            "error_code": 0,
        }
        groups = [
            {
                "group_id": g.group_id,
                "topics": [{"name": n, "partitions": [partition]} for n in ("ok", "no")],
                "error_code": 0,
            }
            for g in req.groups
        ]
        return build_response(9, 8, {"throttle_time": 0, "groups": groups})

    handler = Handler(answer)
    response = run(enforcer, 9, 8, request, handler)
    assert [g.group_id for g in handler.seen.groups] == ["g", "g2"]
    named, everything, refused = response.groups
    assert {t.name: int(t.partitions[0].error_code) for t in named.topics} == {
        "ok": 0,
        "no": ErrorCode.topic_authorization_failed,
    }
    assert named.topics[1].partitions[0].committed_offset == -1
    assert [t.name for t in everything.topics] == ["ok"]
    assert (refused.group_id, refused.error_code) == ("other", ErrorCode.group_authorization_failed)


def test_client_quota_apis_need_describe_or_alter_configs_on_the_cluster(
    enforcer: Enforcer,
) -> None:
    describe = build_request(48, 1, {"components": [], "strict": False})
    refused = run(enforcer, 48, 1, describe, Handler("served"))
    assert refused.error_code == ErrorCode.cluster_authorization_failed
    entity = [{"entity_type": "client-id", "entity_name": "c"}]
    alter = build_request(
        49,
        1,
        {
            "entries": [
                {
                    "entity": entity,
                    "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}],
                }
            ],
            "validate_only": False,
        },
    )
    response = run(enforcer, 49, 1, alter, Handler("served"))
    (entry,) = response.entries
    assert entry.error_code == ErrorCode.cluster_authorization_failed
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("client-id", "c")]


def test_offset_for_leader_epoch_needs_cluster_action_or_topic_describe(
    enforcer: Enforcer,
) -> None:
    # KIP-320: a follower without ClusterAction is treated as a consumer, per topic.
    request = build_request(
        23,
        4,
        {
            "replica_id": 2,
            "topics": [
                {
                    "topic": t,
                    "partitions": [{"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}],
                }
                for t in ("ok", "no")
            ],
        },
    )

    def answer(req: Any) -> Any:
        topics = [
            {
                "topic": t.topic,
                "partitions": [
                    {"error_code": 0, "partition": 0, "leader_epoch": 0, "end_offset": 7}
                ],
            }
            for t in req.topics
        ]
        return ResponseValues({"throttle_time": 0, "topics": topics})

    handler = Handler(answer)
    response = run(enforcer, 23, 4, request, handler)
    assert [t.topic for t in handler.seen.topics] == ["ok"]
    got = {t.topic: int(t.partitions[0].error_code) for t in response.topics}
    assert got == {"ok": 0, "no": ErrorCode.topic_authorization_failed}


def test_a_follower_fetch_without_cluster_action_is_refused_per_partition(
    enforcer: Enforcer,
) -> None:
    # Kafka's handleFetchRequest: a follower lacking ClusterAction gets
    # TOPIC_AUTHORIZATION_FAILED on every partition; the request's own error stays NONE.
    request = build_request(
        1,
        12,
        {
            "replica_id": 2,
            "max_wait": 500,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "topics": [
                {"topic": t, "partitions": [{"partition": 0, "fetch_offset": 0}]}
                for t in ("ok", "other")
            ],
        },
    )
    handler = Handler("never")
    response = run(enforcer, 1, 12, request, handler)
    assert handler.seen is None
    assert response.error_code == ErrorCode.none
    got = {t.topic: [int(p.error_code) for p in t.partitions] for t in response.responses}
    assert got == {
        "ok": [ErrorCode.topic_authorization_failed],
        "other": [ErrorCode.topic_authorization_failed],
    }
