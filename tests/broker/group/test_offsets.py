"""Committed offsets: commit, fetch, expire, delete (offsets and whole groups)."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from odradek.broker.group.group import CommittedOffset, GroupMetadata, GroupState
from odradek.broker.group.offsets import OffsetCommitRequestData
from odradek.broker.group.offsets_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
)
from tests.broker.group.harness import AppendFailed, Harness, run, wait

G = "offsets-group"
DAY_MS = 24 * 3600 * 1000


def data(offset: int, metadata: str | None = None, epoch: int = -1) -> OffsetCommitRequestData:
    return OffsetCommitRequestData(offset=offset, metadata=metadata, leader_epoch=epoch)


async def simple_commit(
    h: Harness, offsets: dict[tuple[str, int], OffsetCommitRequestData], group: str = G
) -> dict[tuple[str, int], ErrorCode]:
    return await h.coordinator.commit_offsets(
        group_id=group, member_id="", group_instance_id=None, generation_id=-1, offsets=offsets
    )


def fetched(h: Harness, partitions: list[tuple[str, int]] | None, group: str = G) -> dict:  # type: ignore[type-arg]
    error, result = h.coordinator.fetch_offsets(group_id=group, partitions=partitions)
    assert error is ErrorCode.none
    return {
        tp: (None if c is None else (c.offset, c.metadata, c.leader_epoch))
        for tp, c in result.items()
    }


def decoded_records(h: Harness, group: str = G) -> list[tuple[object, object]]:
    out = []
    for _, key, value in h.log.records(h.coordinator.partition_for(group)):
        decoded_key = decode_key(key)
        if isinstance(decoded_key, OffsetCommitKey):
            out.append((decoded_key, None if value is None else decode_offset_commit_value(value)))
        else:
            out.append((decoded_key, value))
    return out


@run
async def test_simple_consumer_commits_and_fetches() -> None:
    h = await Harness().start()
    h.clock.now += 5
    results = await simple_commit(h, {("t", 0): data(10, "meta", 3), ("t", 1): data(20)})
    assert results == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    group = h.coordinator.group(G)
    assert group is not None and group.state is GroupState.EMPTY and group.protocol_type is None
    assert fetched(h, None) == {("t", 0): (10, "meta", 3), ("t", 1): (20, "", -1)}
    assert fetched(h, [("t", 1), ("t", 2), ("u", 0)]) == {
        ("t", 1): (20, "", -1),
        ("t", 2): None,
        ("u", 0): None,
    }
    # both offsets went to the log as one batch, in Kafka's record format
    records = decoded_records(h)
    assert [k for k, _ in records] == [OffsetCommitKey(G, "t", 0), OffsetCommitKey(G, "t", 1)]
    value = records[0][1]
    assert value.offset == 10 and value.metadata == "meta" and value.leader_epoch == 3  # type: ignore[attr-defined]
    assert value.commit_timestamp == h.clock.now  # type: ignore[attr-defined]
    assert h.log.appends == 1
    # a later commit wins
    await simple_commit(h, {("t", 0): data(11)})
    assert fetched(h, [("t", 0)]) == {("t", 0): (11, "", -1)}


@run
async def test_fetch_for_unknown_group_and_invalid_ids() -> None:
    h = await Harness().start()
    assert fetched(h, [("t", 0)], group="nobody") == {("t", 0): None}
    assert fetched(h, None, group="nobody") == {}
    error, _ = h.coordinator.fetch_offsets(group_id=None, partitions=None)  # type: ignore[arg-type]
    assert error is ErrorCode.invalid_group_id
    # the empty group id is legal for offsets (as in Kafka, for old clients)
    assert (await simple_commit(h, {("t", 0): data(1)}, group="")) == {("t", 0): ErrorCode.none}
    assert fetched(h, None, group="") == {("t", 0): (1, "", -1)}


@run
async def test_commit_validation_for_group_members() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group(G, 2)

    async def commit(member: str, generation: int, instance: str | None = None) -> ErrorCode:
        results = await h.coordinator.commit_offsets(
            group_id=G,
            member_id=member,
            group_instance_id=instance,
            generation_id=generation,
            offsets={("t", 0): data(5)},
        )
        return results[("t", 0)]

    assert await commit(a, gen) is ErrorCode.none
    assert await commit(a, gen + 1) is ErrorCode.illegal_generation
    assert await commit("stranger", gen) is ErrorCode.unknown_member_id
    assert await commit("", -1) is ErrorCode.unknown_member_id  # simple commits: only if empty
    assert await commit(a, gen, instance="x") is ErrorCode.unknown_member_id
    # during the sync phase of a new generation, members are told to finish the rebalance
    h.join(G, a)
    rb = await wait(h.join(G, b))
    assert await commit(b, rb.generation_id) is ErrorCode.rebalance_in_progress
    # a group this coordinator never saw refuses a commit with a generation
    results = await h.coordinator.commit_offsets(
        group_id="unseen",
        member_id="m",
        group_instance_id=None,
        generation_id=3,
        offsets={("t", 0): data(1)},
    )
    assert results == {("t", 0): ErrorCode.illegal_generation}


@run
async def test_commit_during_preparing_rebalance_is_accepted() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group(G, 2)
    h.join(G, a)
    await h.settle()
    results = await h.coordinator.commit_offsets(
        group_id=G,
        member_id=b,
        group_instance_id=None,
        generation_id=gen,
        offsets={("t", 0): data(9)},
    )
    assert results == {("t", 0): ErrorCode.none}


@run
async def test_metadata_too_large_rejects_only_that_partition() -> None:
    h = await Harness(offset_metadata_max_bytes=10).start()
    results = await simple_commit(h, {("t", 0): data(1, "x" * 11), ("t", 1): data(2, "x" * 10)})
    assert results == {("t", 0): ErrorCode.offset_metadata_too_large, ("t", 1): ErrorCode.none}
    assert fetched(h, None) == {("t", 1): (2, "x" * 10, -1)}


@run
async def test_append_failures_map_to_coordinator_errors_and_change_nothing() -> None:
    h = await Harness().start()
    await simple_commit(h, {("t", 0): data(1)})
    cases = [
        (AppendFailed(6), ErrorCode.not_coordinator),  # NOT_LEADER_OR_FOLLOWER
        (AppendFailed(19), ErrorCode.coordinator_not_available),  # NOT_ENOUGH_REPLICAS
        (AppendFailed(20), ErrorCode.coordinator_not_available),  # ..._AFTER_APPEND
        (AppendFailed(7), ErrorCode.coordinator_not_available),  # REQUEST_TIMED_OUT
        (AppendFailed(56), ErrorCode.not_coordinator),  # KAFKA_STORAGE_ERROR
        (AppendFailed(10), ErrorCode.invalid_commit_offset_size),  # MESSAGE_TOO_LARGE
        (TimeoutError(), ErrorCode.coordinator_not_available),
        (RuntimeError("disk on fire"), ErrorCode.unknown_server_error),
    ]
    for exc, expected in cases:
        h.log.fail_next.append(exc)
        assert await simple_commit(h, {("t", 0): data(99)}) == {("t", 0): expected}
    assert fetched(h, None) == {("t", 0): (1, "", -1)}


@run
async def test_commit_in_flight_when_the_client_goes_away_is_still_applied() -> None:
    h = await Harness().start()
    h.log.gate = asyncio.Event()
    task = asyncio.get_running_loop().create_task(simple_commit(h, {("t", 0): data(7)}))
    for _ in range(5):
        await asyncio.sleep(0)
    assert h.log.appends == 1  # the append is issued and waits
    task.cancel()
    await asyncio.sleep(0)
    h.log.gate.set()
    h.log.gate = None
    await h.settle()
    assert fetched(h, None) == {("t", 0): (7, "", -1)}


def test_out_of_order_append_completion_keeps_the_later_record() -> None:
    group = GroupMetadata("g", GroupState.EMPTY, 0)
    group.apply_offset_commit(("t", 0), CommittedOffset(5, "", 0, append_offset=10))
    group.apply_offset_commit(("t", 0), CommittedOffset(4, "", 0, append_offset=9))  # older
    assert group.offsets[("t", 0)].offset == 5
    group.apply_offset_commit(("t", 0), CommittedOffset(6, "", 0, append_offset=11))
    assert group.offsets[("t", 0)].offset == 6


# -- expiration ----------------------------------------------------------------------------------


@run
async def test_offsets_of_an_empty_group_expire_after_retention_and_the_group_dies() -> None:
    h = await Harness(offsets_retention_minutes=1).start()
    (a,), gen = await h.stable_group(G, 1, session_ms=100_000)
    await h.coordinator.commit_offsets(
        group_id=G,
        member_id=a,
        group_instance_id=None,
        generation_id=gen,
        offsets={("t", 0): data(3)},
    )
    await h.advance(90_000)  # a stable group's subscribed offsets never expire
    assert h.heartbeat(G, a, gen) is ErrorCode.none
    assert await h.coordinator.expire_offsets() == 0
    h.coordinator.leave_group(group_id=G, members=[(a, None, None)])
    await h.settle()
    group = h.coordinator.group(G)
    assert group is not None and group.state is GroupState.EMPTY
    await h.advance(59_999)  # retention counts from when the group became empty
    assert await h.coordinator.expire_offsets() == 0
    await h.advance(1)
    assert await h.coordinator.expire_offsets() == 1
    assert h.coordinator.group(G) is None  # empty and without offsets: dead and forgotten
    tail = decoded_records(h)[-2:]
    assert tail == [(OffsetCommitKey(G, "t", 0), None), (GroupMetadataKey(G), None)]
    assert fetched(h, [("t", 0)]) == {("t", 0): None}


@run
async def test_stable_group_expires_offsets_of_topics_it_no_longer_subscribes() -> None:
    h = await Harness(offsets_retention_minutes=1).start()
    (a,), gen = await h.stable_group(G, 1, topics=("t",), session_ms=100_000)
    for topic in ("t", "old-topic"):
        await h.coordinator.commit_offsets(
            group_id=G,
            member_id=a,
            group_instance_id=None,
            generation_id=gen,
            offsets={(topic, 0): data(1)},
        )
    await h.advance(60_000)
    assert await h.coordinator.expire_offsets() == 1
    assert fetched(h, None) == {("t", 0): (1, "", -1)}
    assert h.coordinator.group(G) is not None


@run
async def test_simple_consumer_offsets_expire_by_commit_time() -> None:
    h = await Harness(offsets_retention_minutes=1).start()
    await simple_commit(h, {("t", 0): data(1)})
    await h.advance(30_000)
    await simple_commit(h, {("t", 1): data(1)})
    await h.advance(30_000)
    assert await h.coordinator.expire_offsets() == 1
    assert fetched(h, None) == {("t", 1): (1, "", -1)}
    await h.advance(30_000)
    assert await h.coordinator.expire_offsets() == 1
    assert h.coordinator.group(G) is None


@run
async def test_explicit_retention_time_of_old_commit_versions() -> None:
    h = await Harness(offsets_retention_minutes=60 * 24).start()
    await h.coordinator.commit_offsets(
        group_id=G,
        member_id="",
        group_instance_id=None,
        generation_id=-1,
        offsets={("t", 0): data(1)},
        retention_ms=5_000,
    )
    _, value = decoded_records(h)[0]
    assert value.expire_timestamp == h.clock.now + 5_000  # type: ignore[attr-defined]
    await h.advance(4_999)
    assert await h.coordinator.expire_offsets() == 0
    await h.advance(1)
    assert await h.coordinator.expire_offsets() == 1


@run
async def test_offsets_with_a_commit_in_flight_do_not_expire() -> None:
    h = await Harness(offsets_retention_minutes=1).start()
    await simple_commit(h, {("t", 0): data(1)})
    await h.advance(120_000)
    h.log.gate = asyncio.Event()
    pending = asyncio.get_running_loop().create_task(simple_commit(h, {("t", 0): data(2)}))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    expired = await h.coordinator.expire_offsets()
    assert expired == 0 and h.coordinator.group(G) is not None
    h.log.gate.set()
    h.log.gate = None
    assert await pending == {("t", 0): ErrorCode.none}
    assert fetched(h, None) == {("t", 0): (2, "", -1)}


@run
async def test_periodic_expiration_runs_on_the_timer() -> None:
    h = await Harness(
        offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000
    ).start()
    h.coordinator.startup()
    await simple_commit(h, {("t", 0): data(1)})
    await h.advance(59_999)
    assert fetched(h, None) != {}
    for _ in range(2):
        await h.advance(10_000)
    assert h.coordinator.group(G) is None
    await h.coordinator.shutdown()


# -- OffsetDelete / DeleteGroups -----------------------------------------------------------------


@run
async def test_offset_delete_rules() -> None:
    h = await Harness().start()
    error, _ = await h.coordinator.delete_offsets(group_id=G, partitions=[("t", 0)])
    assert error is ErrorCode.group_id_not_found
    (a,), gen = await h.stable_group(G, 1, topics=("t",))
    await h.coordinator.commit_offsets(
        group_id=G,
        member_id=a,
        group_instance_id=None,
        generation_id=gen,
        offsets={("t", 0): data(1), ("u", 0): data(2)},
    )
    error, results = await h.coordinator.delete_offsets(
        group_id=G, partitions=[("t", 0), ("u", 0), ("u", 9)]
    )
    assert error is ErrorCode.none
    assert results == {
        ("t", 0): ErrorCode.group_subscribed_to_topic,
        ("u", 0): ErrorCode.none,
        ("u", 9): ErrorCode.none,  # nothing to delete is not an error
    }
    assert fetched(h, None) == {("t", 0): (1, "", -1)}
    assert decoded_records(h)[-1] == (OffsetCommitKey(G, "u", 0), None)
    # once empty, everything may go
    h.coordinator.leave_group(group_id=G, members=[(a, None, None)])
    await h.settle()
    error, results = await h.coordinator.delete_offsets(group_id=G, partitions=[("t", 0)])
    assert (error, results) == (ErrorCode.none, {("t", 0): ErrorCode.none})
    assert fetched(h, None) == {}
    assert (await h.coordinator.delete_offsets(group_id="", partitions=[]))[0] is (
        ErrorCode.invalid_group_id
    )


@run
async def test_offset_delete_in_a_non_consumer_group_needs_it_empty() -> None:
    h = await Harness().start()
    task = await h.join_new(G, protocol_type="connect", protocols=[("default", b"x")])
    await h.advance(0)
    await wait(task)
    error, results = await h.coordinator.delete_offsets(group_id=G, partitions=[("t", 0)])
    assert (error, results) == (ErrorCode.non_empty_group, {})


@run
async def test_offset_delete_write_failure_keeps_the_offset() -> None:
    h = await Harness().start()
    await simple_commit(h, {("t", 0): data(1)})
    h.log.fail_next.append(AppendFailed(6))
    error, results = await h.coordinator.delete_offsets(group_id=G, partitions=[("t", 0)])
    assert error is ErrorCode.none and results == {("t", 0): ErrorCode.not_coordinator}
    assert fetched(h, None) == {("t", 0): (1, "", -1)}


@run
async def test_delete_groups() -> None:
    h = await Harness().start()
    await simple_commit(h, {("t", 0): data(1), ("t", 1): data(2)}, group="empty-one")
    await h.stable_group("busy", 1)
    results = await h.coordinator.delete_groups(["empty-one", "busy", "ghost", None])
    assert results == {
        "empty-one": ErrorCode.none,
        "busy": ErrorCode.non_empty_group,
        "ghost": ErrorCode.group_id_not_found,
        None: ErrorCode.invalid_group_id,
    }
    assert h.coordinator.group("empty-one") is None
    assert fetched(h, None, group="empty-one") == {}
    tombstones = [k for k, v in decoded_records(h, "empty-one") if v is None]
    assert set(tombstones) == {
        OffsetCommitKey("empty-one", "t", 0),
        OffsetCommitKey("empty-one", "t", 1),
        GroupMetadataKey("empty-one"),
    }
    # a fresh coordinator reading the log does not resurrect it
    other = await h.fresh().start()
    assert other.coordinator.group("empty-one") is None
    assert other.coordinator.group("busy") is not None


@run
async def test_list_groups_with_filters() -> None:
    h = await Harness().start()
    await h.stable_group("stable-one", 1)
    await simple_commit(h, {("t", 0): data(1)}, group="simple-one")
    error, groups = h.coordinator.list_groups()
    assert error is ErrorCode.none
    listed = {(g.group_id, g.protocol_type, g.state.value, g.group_type) for g in groups}
    assert listed == {
        ("stable-one", "consumer", "Stable", "classic"),
        ("simple-one", "", "Empty", "classic"),
    }
    _, only_empty = h.coordinator.list_groups(states_filter=["empty"])
    assert [g.group_id for g in only_empty] == ["simple-one"]
    _, consumer_type = h.coordinator.list_groups(types_filter=["consumer"])
    assert consumer_type == []  # KIP-848 "consumer" groups: none here
    _, classic = h.coordinator.list_groups(types_filter=["Classic"])
    assert len(classic) == 2


@run
async def test_describe_group() -> None:
    h = await Harness().start()
    (a, b), _gen = await h.stable_group(G, 2)
    error, summary = h.coordinator.describe_group(G)
    assert error is ErrorCode.none and summary is not None
    assert summary.state is GroupState.STABLE and summary.protocol == "range"
    assert summary.protocol_type == "consumer"
    members = {m.member_id: m for m in summary.members}
    assert set(members) == {a, b}
    assert members[a].assignment == f"assignment-{a}".encode()
    assert members[a].client_id == "c0" and members[a].client_host == "/127.0.0.1"
    assert members[a].metadata != b""
    # while rebalancing there is no protocol and no metadata to show
    h.join(G, a)
    await h.settle()
    _, summary = h.coordinator.describe_group(G)
    assert summary is not None and summary.state is GroupState.PREPARING_REBALANCE
    assert summary.protocol == "" and all(m.metadata == b"" for m in summary.members)
    assert h.coordinator.describe_group("unknown") == (ErrorCode.none, None)


@run
async def test_offsets_of_deleted_topics_are_tombstoned() -> None:
    h = await Harness().start()
    await simple_commit(h, {("gone", 0): data(5), ("gone", 1): data(6), ("kept", 0): data(7)})
    await simple_commit(h, {("gone", 0): data(9)}, group="only-gone")
    removed = await h.coordinator.on_partitions_deleted([("gone", 0), ("gone", 1)])
    assert removed == 3
    assert fetched(h, None) == {("kept", 0): (7, "", -1)}
    # A group left empty and without offsets is gone, metadata tombstone included.
    assert h.coordinator.group("only-gone") is None
    tombstoned = [decode_key(k) for _, k, v in h.log.records() if v is None]
    assert OffsetCommitKey(G, "gone", 0) in tombstoned
    assert OffsetCommitKey(G, "gone", 1) in tombstoned
    assert OffsetCommitKey("only-gone", "gone", 0) in tombstoned
    assert GroupMetadataKey("only-gone") in tombstoned
    # The state rebuilt from the log agrees.
    fresh = await h.fresh().start()
    assert fetched(fresh, None) == {("kept", 0): (7, "", -1)}
    assert fresh.coordinator.group("only-gone") is None
