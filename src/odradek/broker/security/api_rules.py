"""What each Kafka API requires, and the error for a refusal: KafkaApis' checks.

One function per API (or family), in the table ``RULES`` by API key. Each returns a
:class:`~odradek.broker.security.enforcement.Decision` or None when everything is allowed.
Fetch from consumers and Metadata are checked by their handlers (see ``enforcement`` and
``metadata_access``): Metadata has no rule here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.security.acl import Operation, ResourceType
from odradek.broker.security.enforcement import Check, Decision, Rule, Split
from odradek.protocol import versions as api

__all__ = ["RULES"]

TOPIC_DENIED = int(ErrorCode.topic_authorization_failed)
GROUP_DENIED = int(ErrorCode.group_authorization_failed)
CLUSTER_DENIED = int(ErrorCode.cluster_authorization_failed)
TXN_DENIED = int(ErrorCode.transactional_id_authorization_failed)
NOT_ATTEMPTED = int(ErrorCode.operation_not_attempted)

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (
    Operation.READ,
    Operation.WRITE,
    Operation.CREATE,
    Operation.DELETE,
    Operation.ALTER,
    Operation.DESCRIBE,
)

# DescribeConfigs / AlterConfigs resource types (Kafka's ConfigResource.Type).
_CONFIG_TOPIC = 2
_CONFIG_BROKER_TYPES = (4, 8)  # BROKER, BROKER_LOGGER

_COORDINATOR_GROUP = 0
_COORDINATOR_TRANSACTION = 1


def _name(element: Any) -> str:
    if isinstance(element, str):
        return element
    name = getattr(element, "name", None)
    return str(name if name is not None else getattr(element, "topic", ""))


def _topics(
    check: Check, request: Any, request_field: str, response_field: str, op: Operation
) -> Split:
    elements = getattr(request, request_field) or ()
    codes = [None if check.topic(op, _name(e)) else TOPIC_DENIED for e in elements]
    return Split(request_field, response_field, codes)


def _cluster(op: Operation) -> Rule:
    def rule(check: Check, _request: Any, _version: int) -> Decision | None:
        return None if check.cluster(op) else Decision(refuse=CLUSTER_DENIED)

    return rule


def _group_refusal(check: Check, op: Operation, group: str) -> Decision | None:
    return None if check.group(op, group) else Decision(refuse=GROUP_DENIED)


def _txn_refusal(check: Check, transactional_id: str | None) -> Decision | None:
    if transactional_id is None or check.transactional_id(WRITE, transactional_id):
        return None
    return Decision(refuse=TXN_DENIED)


def _with_topics(
    first: Decision | None,
    check: Check,
    request: Any,
    request_field: str,
    response_field: str,
    op: Operation,
) -> Decision:
    return first or Decision(split=_topics(check, request, request_field, response_field, op))


# --- data plane ---------------------------------------------------------------------------


def produce(check: Check, request: Any, _version: int) -> Decision | None:
    refused = _txn_refusal(check, getattr(request, "transactional_id", None))
    return _with_topics(refused, check, request, "topic_data", "responses", WRITE)


def fetch(check: Check, request: Any, _version: int) -> Decision | None:
    # Followers need ClusterAction; Kafka answers each partition TOPIC_AUTHORIZATION_FAILED.
    if int(getattr(request, "replica_id", -1)) >= 0 and not check.cluster(
        Operation.CLUSTER_ACTION
    ):
        return Decision(refuse=TOPIC_DENIED, refuse_partitions_only=True)
    return None  # consumers: the handler asks ctx.authz per topic


def list_offsets(check: Check, request: Any, _version: int) -> Decision | None:
    return Decision(split=_topics(check, request, "topics", "topics", DESCRIBE))


def offset_for_leader_epoch(check: Check, request: Any, _version: int) -> Decision | None:
    # As Kafka since KIP-320 (consumers use it to detect truncation): ClusterAction allows
    # every topic, whoever asks; otherwise each topic needs Describe, replica or not.
    if check.cluster(Operation.CLUSTER_ACTION):
        return None
    return Decision(split=_topics(check, request, "topics", "topics", DESCRIBE))


# --- topics administration ---------------------------------------------------------------


def create_topics(check: Check, request: Any, _version: int) -> Decision | None:
    if check.cluster(CREATE):
        return None
    return Decision(split=_topics(check, request, "topics", "topics", CREATE))


def delete_topics(check: Check, request: Any, _version: int) -> Decision | None:
    return Decision(split=_topics(check, request, "topic_names", "responses", DELETE))


def delete_records(check: Check, request: Any, _version: int) -> Decision | None:
    return Decision(split=_topics(check, request, "topics", "topics", DELETE))


def create_partitions(check: Check, request: Any, _version: int) -> Decision | None:
    return Decision(split=_topics(check, request, "topics", "results", ALTER))


def _configs(op: Operation, response_field: str) -> Rule:
    def rule(check: Check, request: Any, _version: int) -> Decision | None:
        codes: list[int | None] = []
        for resource in request.resources:
            kind = int(resource.resource_type)
            if kind == _CONFIG_TOPIC:
                ok = check.topic(op, str(resource.resource_name))
                codes.append(None if ok else TOPIC_DENIED)
            elif kind in _CONFIG_BROKER_TYPES:
                codes.append(None if check.cluster(op) else CLUSTER_DENIED)
            else:
                codes.append(None)
        return Decision(split=Split("resources", response_field, codes))

    return rule


# --- groups ------------------------------------------------------------------------------


def _group_read(check: Check, request: Any, _version: int) -> Decision | None:
    return _group_refusal(check, READ, str(request.group_id))


def offset_commit(check: Check, request: Any, _version: int) -> Decision | None:
    refused = _group_refusal(check, READ, str(request.group_id))
    return _with_topics(refused, check, request, "topics", "topics", READ)


def offset_fetch(check: Check, request: Any, _version: int) -> Decision | None:
    groups = getattr(request, "groups", None)
    if groups:  # v8+: one answer per group
        codes = [None if check.group(DESCRIBE, str(g.group_id)) else GROUP_DENIED for g in groups]
        return Decision(
            split=Split("groups", "groups", codes),
            transform=lambda response: _offset_fetch_topics(check, groups, response),
        )
    refused = _group_refusal(check, DESCRIBE, str(request.group_id))
    if refused is not None:
        return refused
    if request.topics is None:  # all the group's topics: hide those it may not describe
        return Decision(keep=("topics", lambda t: check.topic(DESCRIBE, str(t.name))))
    return Decision(split=_topics(check, request, "topics", "topics", DESCRIBE))


def _offset_fetch_topics(check: Check, groups: Any, response: Any) -> Any:
    """OffsetFetch v8: in each group, topics the principal may not describe are left out
    (the group's whole offsets were asked for) or answered TOPIC_AUTHORIZATION_FAILED."""
    named = {str(g.group_id) for g in groups if g.topics is not None}
    out = []
    for group in response.groups:
        topics = []
        for topic in group.topics:
            if check.topic(DESCRIBE, str(topic.name)):
                topics.append(topic)
            elif str(group.group_id) in named:
                partitions = tuple(
                    replace(p, committed_offset=-1, metadata="", error_code=ErrorCode(TOPIC_DENIED))
                    for p in topic.partitions
                )
                topics.append(replace(topic, partitions=partitions))
        out.append(replace(group, topics=tuple(topics)))
    return replace(response, groups=tuple(out))


def offset_delete(check: Check, request: Any, _version: int) -> Decision | None:
    refused = _group_refusal(check, DELETE, str(request.group_id))
    return _with_topics(refused, check, request, "topics", "topics", READ)


def find_coordinator(check: Check, request: Any, _version: int) -> Decision | None:
    key_type = int(getattr(request, "key_type", _COORDINATOR_GROUP))

    def denied(key: str) -> int | None:
        if key_type == _COORDINATOR_TRANSACTION:
            return None if check.transactional_id(DESCRIBE, key) else TXN_DENIED
        return None if check.group(DESCRIBE, key) else GROUP_DENIED

    keys = getattr(request, "coordinator_keys", None)
    if keys:  # v4+: batched
        return Decision(split=Split("coordinator_keys", "coordinators", [denied(k) for k in keys]))
    code = denied(str(request.key))
    return None if code is None else Decision(refuse=code)


def describe_groups(check: Check, request: Any, _version: int) -> Decision | None:
    codes = [None if check.group(DESCRIBE, g) else GROUP_DENIED for g in request.groups]
    return Decision(split=Split("groups", "groups", codes))


def list_groups(check: Check, _request: Any, _version: int) -> Decision | None:
    if check.cluster(DESCRIBE):
        return None
    return Decision(keep=("groups", lambda g: check.group(DESCRIBE, str(g.group_id))))


def delete_groups(check: Check, request: Any, _version: int) -> Decision | None:
    codes = [None if check.group(DELETE, g) else GROUP_DENIED for g in request.groups_names]
    return Decision(split=Split("groups_names", "results", codes))


# --- transactions ------------------------------------------------------------------------


def init_producer_id(check: Check, request: Any, _version: int) -> Decision | None:
    transactional_id = getattr(request, "transactional_id", None)
    if transactional_id is not None:
        return _txn_refusal(check, transactional_id)
    # Idempotence: IdempotentWrite on the cluster, or (Kafka 3) Write on any topic.
    if check.cluster(Operation.IDEMPOTENT_WRITE) or check.any_of_type(WRITE, ResourceType.TOPIC):
        return None
    return Decision(refuse=CLUSTER_DENIED)


def add_partitions_to_txn(check: Check, request: Any, _version: int) -> Decision | None:
    refused = _txn_refusal(check, str(request.v3_and_below_transactional_id))
    if refused is not None:
        return refused
    split = _topics(
        check, request, "v3_and_below_topics", "results_by_topic_v3_and_below", WRITE
    )
    split.rest = NOT_ATTEMPTED
    return Decision(split=split)


def add_offsets_to_txn(check: Check, request: Any, _version: int) -> Decision | None:
    return _txn_refusal(check, str(request.transactional_id)) or _group_refusal(
        check, READ, str(request.group_id)
    )


def end_txn(check: Check, request: Any, _version: int) -> Decision | None:
    return _txn_refusal(check, str(request.transactional_id))


def txn_offset_commit(check: Check, request: Any, _version: int) -> Decision | None:
    refused = _txn_refusal(check, str(request.transactional_id)) or _group_refusal(
        check, READ, str(request.group_id)
    )
    return _with_topics(refused, check, request, "topics", "topics", READ)


def describe_transactions(check: Check, request: Any, _version: int) -> Decision | None:
    ids = request.transactional_ids
    codes = [None if check.transactional_id(DESCRIBE, t) else TXN_DENIED for t in ids]
    return Decision(split=Split("transactional_ids", "transaction_states", codes))


def list_transactions(check: Check, _request: Any, _version: int) -> Decision | None:
    return Decision(
        keep=(
            "transaction_states",
            lambda t: check.transactional_id(DESCRIBE, str(t.transactional_id)),
        )
    )


def describe_producers(check: Check, request: Any, _version: int) -> Decision | None:
    return Decision(split=_topics(check, request, "topics", "topics", READ))


def describe_acls(check: Check, _request: Any, _version: int) -> Decision | None:
    if check.cluster(DESCRIBE):
        return None
    # With a message: librdkafka reports a DescribeAcls error only when it has one.
    values = {
        "throttle_time": 0,
        "error_code": CLUSTER_DENIED,
        "error_message": "Cluster authorization failed.",
        "resources": [],
    }
    return Decision(answer=values)


def alter_user_scram_credentials(check: Check, request: Any, _version: int) -> Decision | None:
    if check.cluster(ALTER):
        return None
    users = dict.fromkeys(str(u.name) for u in (*request.deletions, *request.upsertions))
    results = [{"user": u, "error_code": CLUSTER_DENIED, "error_message": None} for u in users]
    return Decision(answer={"throttle_time": 0, "results": results})


def alter_client_quotas(check: Check, request: Any, _version: int) -> Decision | None:
    if check.cluster(Operation.ALTER_CONFIGS):
        return None
    # Each entry answered with its own entity, as Kafka (clients match answers to entities).
    entries = [
        {
            "error_code": CLUSTER_DENIED,
            "error_message": "Cluster authorization failed.",
            "entity": [
                {"entity_type": str(e.entity_type), "entity_name": e.entity_name}
                for e in entry.entity
            ],
        }
        for entry in request.entries
    ]
    return Decision(answer={"throttle_time": 0, "entries": entries})


_CLUSTER_ACTION = _cluster(Operation.CLUSTER_ACTION)

RULES: dict[int, Callable[[Check, Any, int], Decision | None]] = {
    api.PRODUCE: produce,
    api.FETCH: fetch,
    api.LIST_OFFSETS: list_offsets,
    api.LEADER_AND_ISR: _CLUSTER_ACTION,
    api.STOP_REPLICA: _CLUSTER_ACTION,
    api.UPDATE_METADATA: _CLUSTER_ACTION,
    api.CONTROLLED_SHUTDOWN: _CLUSTER_ACTION,
    api.OFFSET_COMMIT: offset_commit,
    api.OFFSET_FETCH: offset_fetch,
    api.FIND_COORDINATOR: find_coordinator,
    api.JOIN_GROUP: _group_read,
    api.HEARTBEAT: _group_read,
    api.LEAVE_GROUP: _group_read,
    api.SYNC_GROUP: _group_read,
    api.DESCRIBE_GROUPS: describe_groups,
    api.LIST_GROUPS: list_groups,
    api.CREATE_TOPICS: create_topics,
    api.DELETE_TOPICS: delete_topics,
    api.DELETE_RECORDS: delete_records,
    api.INIT_PRODUCER_ID: init_producer_id,
    api.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    api.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    api.ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    api.END_TXN: end_txn,
    api.WRITE_TXN_MARKERS: _CLUSTER_ACTION,
    api.TXN_OFFSET_COMMIT: txn_offset_commit,
    api.DESCRIBE_CONFIGS: _configs(Operation.DESCRIBE_CONFIGS, "results"),
    api.ALTER_CONFIGS: _configs(Operation.ALTER_CONFIGS, "responses"),
    api.DESCRIBE_LOG_DIRS: _cluster(DESCRIBE),
    api.CREATE_PARTITIONS: create_partitions,
    api.DELETE_GROUPS: delete_groups,
    api.ELECT_LEADERS: _cluster(ALTER),
    api.INCREMENTAL_ALTER_CONFIGS: _configs(Operation.ALTER_CONFIGS, "responses"),
    api.OFFSET_DELETE: offset_delete,
    api.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(DESCRIBE),
    api.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
    api.DESCRIBE_PRODUCERS: describe_producers,
    api.DESCRIBE_TRANSACTIONS: describe_transactions,
    api.LIST_TRANSACTIONS: list_transactions,
    api.DESCRIBE_ACLS: describe_acls,
    api.CREATE_ACLS: _cluster(ALTER),
    api.DELETE_ACLS: _cluster(ALTER),
    # AlterPartitionReassignments / ListPartitionReassignments (KIP-455), by number: a key
    # without a handler is never dispatched, so the rule waits harmlessly for one.
    48: _cluster(Operation.DESCRIBE_CONFIGS),  # DescribeClientQuotas
    49: alter_client_quotas,
    45: _cluster(ALTER),
    46: _cluster(DESCRIBE),
}
