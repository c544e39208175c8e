"""The group API handlers: kio requests of every version in, encodable kio responses out."""

from __future__ import annotations

import asyncio
import io
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from odradek.broker.group.handlers import GROUP_API_VERSIONS, GroupHandlers
from odradek.protocol.build import build, request_class, response_class
from tests.broker.group.harness import Harness, run, subscription, wait

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC = 10, 11, 12, 13, 14
DESCRIBE, LIST, COMMIT, FETCH, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 8, 9, 42, 47
NODE = (1, "broker-1.local", 9092)


@dataclass
class Header:
    client_id: str | None = "test-client"


@dataclass
class Ctx:
    header: Header = field(default_factory=Header)
    client_host: str = "127.0.0.1"


def request(api_key: int, version: int, **values: Any) -> Any:
    return build(request_class(api_key, version), values)


def encoded(response: Any) -> Any:
    """Encode with kio, decode again: the response is valid for its version."""
    buffer = io.BytesIO()
    entity_writer(type(response))(buffer, response)
    decoded, _ = entity_reader(type(response))(buffer.getvalue(), 0)
    return decoded


def make(h: Harness, **kwargs: Any) -> GroupHandlers:
    seen: list[int] = []

    def coordinator_node(partition: int) -> tuple[int, str, int]:
        seen.append(partition)
        return NODE

    handlers = GroupHandlers(h.coordinator, coordinator_node=coordinator_node, **kwargs)
    handlers.seen = seen  # type: ignore[attr-defined]
    return handlers


async def call(handlers: GroupHandlers, api_key: int, version: int, **values: Any) -> Any:
    req = request(api_key, version, **values)
    response = await handlers.handlers()[api_key](Ctx(), req)
    assert type(response) is response_class(api_key, version)
    return encoded(response)


def test_every_api_and_version_is_covered() -> None:
    for api_key, (low, high) in GROUP_API_VERSIONS.items():
        for version in range(low, high + 1):
            request_class(api_key, version)
            response_class(api_key, version)


# -- FindCoordinator -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 7))
@run
async def test_find_coordinator(version: int) -> None:
    h = await Harness().start()
    handlers = make(h)
    if version < 4:
        response = await call(handlers, FIND_COORDINATOR, version, key="test")
        assert response.error_code is ErrorCode.none
        assert (response.node_id, response.host, response.port) == NODE
        assert handlers.seen == [h.coordinator.partition_for("test")]  # type: ignore[attr-defined]
        if version >= 1:
            assert response.error_message is None
    else:
        response = await call(handlers, FIND_COORDINATOR, version, coordinator_keys=("a", "b"))
        assert [(c.key, c.node_id, c.error_code) for c in response.coordinators] == [
            ("a", 1, ErrorCode.none),
            ("b", 1, ErrorCode.none),
        ]


@run
async def test_find_coordinator_errors_and_transactions() -> None:
    h = await Harness().start()

    async def txn_node(transactional_id: str) -> tuple[int, str, int] | None:
        return (7, "txn-host", 1) if transactional_id == "known" else None

    no_leader = GroupHandlers(h.coordinator, coordinator_node=lambda p: None)
    response = await call(no_leader, FIND_COORDINATOR, 2, key="g")
    assert response.error_code is ErrorCode.coordinator_not_available
    assert response.node_id == -1 and response.error_message
    # a transactional id without a transaction coordinator wired in
    response = await call(no_leader, FIND_COORDINATOR, 1, key="t", key_type=1)
    assert response.error_code is ErrorCode.coordinator_not_available
    with_txn = make(h, transaction_node=txn_node)
    response = await call(
        with_txn, FIND_COORDINATOR, 4, key_type=1, coordinator_keys=("known", "other")
    )
    assert [(c.node_id, c.host, c.error_code) for c in response.coordinators] == [
        (7, "txn-host", ErrorCode.none),
        (-1, "", ErrorCode.coordinator_not_available),
    ]
    response = await call(with_txn, FIND_COORDINATOR, 6, key_type=2, coordinator_keys=("s",))
    assert response.coordinators[0].error_code is ErrorCode.invalid_request


# -- a whole group life through the handlers, for each JoinGroup version ---------------------------

# JoinGroup version -> (SyncGroup, Heartbeat, LeaveGroup) versions a client would pair with it
PAIRED = {
    0: (0, 0, 0),
    1: (0, 0, 0),
    2: (1, 1, 1),
    3: (2, 2, 2),
    4: (2, 2, 2),
    5: (3, 3, 3),
    6: (4, 4, 4),
    7: (4, 4, 4),
    8: (5, 4, 5),
    9: (5, 4, 5),
}


@pytest.mark.parametrize("join_version", range(0, 10))
@run
async def test_group_lifecycle(join_version: int) -> None:
    sync_v, hb_v, leave_v = PAIRED[join_version]
    h = await Harness().start()
    handlers = make(h)
    join_args: dict[str, Any] = {
        "group_id": "life",
        "session_timeout": 10_000,
        "rebalance_timeout": 20_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription("t")}],
    }
    if join_version >= 4:
        first = await call(handlers, JOIN, join_version, **join_args)
        assert first.error_code is ErrorCode.member_id_required
        assert first.member_id.startswith("test-client-")
        join_args["member_id"] = first.member_id
    task = asyncio.get_running_loop().create_task(call(handlers, JOIN, join_version, **join_args))
    await h.advance(0)
    joined = await wait(task)
    assert joined.error_code is ErrorCode.none
    member = joined.member_id
    assert joined.leader == member and joined.generation_id == 1
    assert joined.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member, subscription("t"))]
    if join_version >= 7:
        assert joined.protocol_type == "consumer"

    sync_args: dict[str, Any] = {
        "group_id": "life",
        "generation_id": 1,
        "member_id": member,
        "assignments": [{"member_id": member, "assignment": b"my-assignment"}],
    }
    if sync_v >= 5:
        sync_args.update(protocol_type="consumer", protocol_name="range")
    synced = await call(handlers, SYNC, sync_v, **sync_args)
    assert synced.error_code is ErrorCode.none and synced.assignment == b"my-assignment"

    beat = await call(handlers, HEARTBEAT, hb_v, group_id="life", generation_id=1, member_id=member)
    assert beat.error_code is ErrorCode.none
    bad_beat = await call(
        handlers, HEARTBEAT, hb_v, group_id="life", generation_id=2, member_id=member
    )
    assert bad_beat.error_code is ErrorCode.illegal_generation

    described = await call(handlers, DESCRIBE, min(join_version, 6), groups=("life",))
    (group,) = described.groups
    assert group.error_code is ErrorCode.none and group.group_state == "Stable"
    assert group.protocol_data == "range" and group.protocol_type == "consumer"
    (described_member,) = group.members
    assert described_member.member_id == member
    assert described_member.client_id == "test-client"
    assert described_member.client_host == "/127.0.0.1"
    assert described_member.member_assignment == b"my-assignment"

    if leave_v <= 2:
        left = await call(handlers, LEAVE, leave_v, group_id="life", member_id=member)
        assert left.error_code is ErrorCode.none
        again = await call(handlers, LEAVE, leave_v, group_id="life", member_id=member)
        assert again.error_code is ErrorCode.unknown_member_id
    else:
        left = await call(
            handlers,
            LEAVE,
            leave_v,
            group_id="life",
            members=[{"member_id": member}, {"member_id": "ghost"}],
        )
        assert left.error_code is ErrorCode.none
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (member, ErrorCode.none),
            ("ghost", ErrorCode.unknown_member_id),
        ]
    await h.settle()
    listed = await call(handlers, LIST, min(join_version, 5))
    assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("life", "consumer")]
    deleted = await call(handlers, DELETE_GROUPS, min(join_version, 2), groups_names=("life",))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [("life", ErrorCode.none)]


@pytest.mark.parametrize("version", range(2, 10))
@run
async def test_offset_commit_versions(version: int) -> None:
    h = await Harness().start()
    handlers = make(h)
    args: dict[str, Any] = {
        "group_id": "simple",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_metadata": "m"},
                    {
                        "partition_index": 1,
                        "committed_offset": 6,
                        "committed_metadata": None,
                        "committed_leader_epoch": 4,
                    },
                ],
            }
        ],
    }
    response = await call(handlers, COMMIT, version, **args)
    assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [
        (0, ErrorCode.none),
        (1, ErrorCode.none),
    ]
    _, offsets = h.coordinator.fetch_offsets(group_id="simple", partitions=None)
    assert offsets[("t", 1)].leader_epoch == (4 if version >= 6 else -1)  # type: ignore[union-attr]
    assert offsets[("t", 1)].metadata == ""  # type: ignore[union-attr]


@run
async def test_offset_commit_retention_time_and_unknown_partitions() -> None:
    h = await Harness().start()
    handlers = make(h, partition_exists=lambda topic, partition: partition < 1)
    response = await call(
        handlers,
        COMMIT,
        2,
        group_id="g",
        member_id="",
        retention_time=60_000,
        topics=[
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""},
                    {"partition_index": 7, "committed_offset": 1, "committed_metadata": ""},
                ],
            }
        ],
    )
    assert [p.error_code for p in response.topics[0].partitions] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
    ]
    _, offsets = h.coordinator.fetch_offsets(group_id="g", partitions=None)
    assert offsets[("t", 0)].expire_timestamp == h.clock.now + 60_000  # type: ignore[union-attr]


@run
async def test_topic_id_versions_answer_unknown_topic_id() -> None:
    h = await Harness().start()
    handlers = make(h)
    topic_id = uuid.uuid4()
    commit = await call(
        handlers,
        COMMIT,
        10,
        group_id="g",
        member_id="",
        topics=[
            {
                "topic_id": topic_id,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                ],
            }
        ],
    )
    assert commit.topics[0].topic_id == topic_id
    assert commit.topics[0].partitions[0].error_code is ErrorCode.unknown_topic_id
    fetch = await call(
        handlers,
        FETCH,
        10,
        groups=[{"group_id": "g", "topics": [{"topic_id": topic_id, "partition_indexes": [0]}]}],
    )
    assert fetch.groups[0].topics[0].partitions[0].error_code is ErrorCode.unknown_topic_id


@pytest.mark.parametrize("version", range(1, 10))
@run
async def test_offset_fetch_versions(version: int) -> None:
    h = await Harness().start()
    handlers = make(h)
    await call(
        handlers,
        COMMIT,
        7,
        group_id="g",
        member_id="",
        topics=[
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 42,
                        "committed_metadata": "md",
                        "committed_leader_epoch": 3,
                    }
                ],
            }
        ],
    )
    topics = [{"name": "t", "partition_indexes": [0, 1]}]

    def check(topics_out: Any) -> None:
        partitions = {(t.name, p.partition_index): p for t in topics_out for p in t.partitions}
        assert partitions[("t", 0)].committed_offset == 42
        assert partitions[("t", 0)].metadata == "md"
        if version >= 5:
            assert partitions[("t", 0)].committed_leader_epoch == 3
        if ("t", 1) in partitions:
            assert partitions[("t", 1)].committed_offset == -1

    if version >= 8:
        response = await call(
            handlers,
            FETCH,
            version,
            groups=[
                {"group_id": "g", "topics": topics},
                {"group_id": "g", "topics": None},
                {"group_id": "nobody", "topics": None},
            ],
        )
        explicit, everything, nobody = response.groups
        check(explicit.topics)
        check(everything.topics)
        assert len(everything.topics[0].partitions) == 1
        assert nobody.error_code is ErrorCode.none and nobody.topics == ()
    else:
        response = await call(handlers, FETCH, version, group_id="g", topics=topics)
        check(response.topics)
        if version >= 2:
            everything = await call(handlers, FETCH, version, group_id="g", topics=None)
            check(everything.topics)
            assert everything.error_code is ErrorCode.none


@pytest.mark.parametrize("version", [1, 3, 8])
@run
async def test_offset_fetch_group_errors_per_version(version: int) -> None:
    h = await Harness().start()
    handlers = make(h)
    h.log.not_leader.add(h.coordinator.partition_for("moved"))
    topics = [{"name": "t", "partition_indexes": [0]}]
    if version >= 8:
        response = await call(
            handlers, FETCH, version, groups=[{"group_id": "moved", "topics": topics}]
        )
        assert response.groups[0].error_code is ErrorCode.not_coordinator
    elif version >= 2:
        response = await call(handlers, FETCH, version, group_id="moved", topics=topics)
        assert response.error_code is ErrorCode.not_coordinator and response.topics == ()
    else:  # v0-1: no group-level error field, every partition carries it
        response = await call(handlers, FETCH, version, group_id="moved", topics=topics)
        assert response.topics[0].partitions[0].error_code is ErrorCode.not_coordinator


@run
async def test_join_errors_keep_nullable_fields_right() -> None:
    h = await Harness().start()
    handlers = make(h)
    for version in (0, 6, 7, 9):
        response = await call(
            handlers,
            JOIN,
            version,
            group_id="",
            session_timeout=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": b""}],
        )
        assert response.error_code is ErrorCode.invalid_group_id
        assert response.protocol_name == ("" if version < 7 else None)


@run
async def test_join_v0_uses_the_session_timeout_as_rebalance_timeout() -> None:
    h = await Harness().start()
    handlers = make(h)
    task = asyncio.get_running_loop().create_task(
        call(
            handlers,
            JOIN,
            0,
            group_id="old",
            session_timeout=12_345,
            member_id="",
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": b""}],
        )
    )
    await h.advance(0)
    response = await wait(task)
    group = h.coordinator.group("old")
    assert group is not None
    assert group.get(response.member_id).rebalance_timeout_ms == 12_345


@run
async def test_static_member_through_handlers() -> None:
    h = await Harness().start()
    handlers = make(h)
    args = {
        "group_id": "static",
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": "",
        "group_instance_id": "host-1",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"sub"}],
    }
    task = asyncio.get_running_loop().create_task(call(handlers, JOIN, 5, **args))
    await h.advance(0)
    joined = await wait(task)
    assert joined.error_code is ErrorCode.none  # static members skip MEMBER_ID_REQUIRED
    assert joined.members[0].group_instance_id == "host-1"
    await call(
        handlers,
        SYNC,
        3,
        group_id="static",
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        group_instance_id="host-1",
        assignments=[],
    )
    fenced = await call(
        handlers,
        HEARTBEAT,
        3,
        group_id="static",
        generation_id=joined.generation_id,
        member_id="someone-else",
        group_instance_id="host-1",
    )
    assert fenced.error_code is ErrorCode.fenced_instance_id
    described = await call(handlers, DESCRIBE, 4, groups=("static",))
    assert described.groups[0].members[0].group_instance_id == "host-1"


@run
async def test_describe_groups_unknown_and_authorized_operations() -> None:
    h = await Harness().start()
    handlers = make(h)
    old = await call(handlers, DESCRIBE, 5, groups=("nope",), include_authorized_operations=True)
    assert old.groups[0].error_code is ErrorCode.none
    assert old.groups[0].group_state == "Dead"
    assert old.groups[0].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
    new = await call(handlers, DESCRIBE, 6, groups=("nope",))
    assert new.groups[0].error_code is ErrorCode.group_id_not_found
    assert new.groups[0].error_message and new.groups[0].authorized_operations == -(2**31)
    h.log.not_leader.add(h.coordinator.partition_for("elsewhere"))
    moved = await call(handlers, DESCRIBE, 0, groups=("elsewhere",))
    assert moved.groups[0].error_code is ErrorCode.not_coordinator


@run
async def test_list_groups_filters() -> None:
    h = await Harness().start()
    handlers = make(h)
    await h.stable_group("busy", 1)
    await h.coordinator.commit_offsets(
        group_id="idle", member_id="", group_instance_id=None, generation_id=-1, offsets={}
    )
    response = await call(handlers, LIST, 4, states_filter=("Stable",))
    assert [(g.group_id, g.group_state) for g in response.groups] == [("busy", "Stable")]
    response = await call(handlers, LIST, 5, types_filter=("consumer",))
    assert response.groups == ()
    response = await call(handlers, LIST, 5, types_filter=("classic",))
    assert {g.group_type for g in response.groups} == {"classic"}


@run
async def test_offset_delete_and_delete_groups_handlers() -> None:
    h = await Harness().start()
    handlers = make(h)
    await call(
        handlers,
        COMMIT,
        8,
        group_id="g",
        member_id="",
        topics=[
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""},
                    {"partition_index": 1, "committed_offset": 1, "committed_metadata": ""},
                ],
            }
        ],
    )
    response = await call(
        handlers,
        OFFSET_DELETE,
        0,
        group_id="g",
        topics=[{"name": "t", "partitions": [{"partition_index": 0}]}],
    )
    assert response.error_code is ErrorCode.none
    assert response.topics[0].partitions[0].error_code is ErrorCode.none
    missing = await call(
        handlers,
        OFFSET_DELETE,
        0,
        group_id="unknown",
        topics=[{"name": "t", "partitions": [{"partition_index": 0}]}],
    )
    assert missing.error_code is ErrorCode.group_id_not_found and missing.topics == ()
    await h.stable_group("busy", 1)
    deleted = await call(handlers, DELETE_GROUPS, 2, groups_names=("g", "busy", "unknown"))
    assert [r.error_code for r in deleted.results] == [
        ErrorCode.none,
        ErrorCode.non_empty_group,
        ErrorCode.group_id_not_found,
    ]


@run
async def test_leave_group_v0_for_unknown_group_and_sync_v5_protocol_fields() -> None:
    h = await Harness().start()
    handlers = make(h)
    left = await call(handlers, LEAVE, 0, group_id="g", member_id="m")
    assert left.error_code is ErrorCode.unknown_member_id
    (a,), gen = await h.stable_group("g5", 1)
    synced = await call(
        handlers,
        SYNC,
        5,
        group_id="g5",
        generation_id=gen,
        member_id=a,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[],
    )
    assert synced.protocol_type == "consumer" and synced.protocol_name == "range"
    assert synced.assignment == f"assignment-{a}".encode()
