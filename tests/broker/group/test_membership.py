"""Join, sync, heartbeat, leave: the classic rebalance protocol driven with a hand-moved clock."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.group.group import (
    GroupMetadata,
    GroupState,
    IllegalGroupStateTransition,
    MemberMetadata,
)
from odradek.broker.group.offsets_records import (
    GroupMetadataKey,
    decode_group_metadata_value,
    decode_key,
)
from tests.broker.group.harness import AppendFailed, Harness, run, subscription, wait

G = "group-a"


def state(h: Harness, group: str = G) -> GroupState:
    g = h.coordinator.group(group)
    assert g is not None
    return g.state


def last_group_record(h: Harness, group: str = G):  # type: ignore[no-untyped-def]
    partition = h.coordinator.partition_for(group)
    for _, key, value in reversed(h.log.records(partition)):
        if decode_key(key) == GroupMetadataKey(group):
            return None if value is None else decode_group_metadata_value(value)
    raise AssertionError("no group metadata record")


# -- the state machine on its own --------------------------------------------------------------

ALLOWED = {
    (GroupState.EMPTY, GroupState.PREPARING_REBALANCE),
    (GroupState.STABLE, GroupState.PREPARING_REBALANCE),
    (GroupState.COMPLETING_REBALANCE, GroupState.PREPARING_REBALANCE),
    (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE),
    (GroupState.PREPARING_REBALANCE, GroupState.EMPTY),
    (GroupState.COMPLETING_REBALANCE, GroupState.STABLE),
} | {(s, GroupState.DEAD) for s in GroupState}


@pytest.mark.parametrize("source", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_every_state_transition(source: GroupState, target: GroupState) -> None:
    group = GroupMetadata("g", source, 0)
    if (source, target) in ALLOWED:
        group.transition_to(target, 5)
        assert group.state is target and group.current_state_timestamp == 5
    else:
        with pytest.raises(IllegalGroupStateTransition):
            group.transition_to(target, 5)
        assert group.state is source


def _member(member_id: str, protocols: list[str]) -> MemberMetadata:
    return MemberMetadata(
        member_id, None, "c", "/h", 1000, 1000, "consumer", [(p, p.encode()) for p in protocols]
    )


def test_protocol_selection_takes_the_most_voted_common_protocol() -> None:
    group = GroupMetadata("g", GroupState.EMPTY, 0)
    group.add(_member("a", ["roundrobin", "range"]), None)
    group.add(_member("b", ["roundrobin", "range", "sticky"]), None)
    group.add(_member("c", ["range", "roundrobin"]), None)
    assert group.candidate_protocols() == {"roundrobin", "range"}
    assert group.select_protocol() == "roundrobin"  # two votes against one
    group.add(_member("d", ["range"]), None)
    assert group.select_protocol() == "range"  # the only one all support
    # Ties go to the leader's preference.
    tie = GroupMetadata("t", GroupState.EMPTY, 0)
    tie.add(_member("x", ["b", "a"]), None)
    tie.add(_member("y", ["a", "b"]), None)
    assert tie.leader_id == "x" and tie.select_protocol() == "b"


def test_supports_protocols() -> None:
    group = GroupMetadata("g", GroupState.EMPTY, 0)
    assert not group.supports_protocols("consumer", [])
    assert not group.supports_protocols("", [("range", b"")])
    assert group.supports_protocols("consumer", [("range", b"")])
    group.add(_member("a", ["range"]), None)
    group.state = GroupState.STABLE
    assert group.supports_protocols("consumer", [("x", b""), ("range", b"")])
    assert not group.supports_protocols("connect", [("range", b"")])
    assert not group.supports_protocols("consumer", [("roundrobin", b"")])


# -- joining -------------------------------------------------------------------------------------


@run
async def test_member_id_required_then_join_sync_heartbeat() -> None:
    h = await Harness().start()
    first = await h.join(G, client_id="app")
    assert first.error is ErrorCode.member_id_required
    assert first.member_id.startswith("app-")
    assert state(h) is GroupState.EMPTY
    group = h.coordinator.group(G)
    assert group is not None and first.member_id in group.pending_members

    task = h.join(G, first.member_id, client_id="app")
    await h.settle()
    assert state(h) is GroupState.PREPARING_REBALANCE
    assert not task.done()  # the initial delay (0 ms here) ends on the next tick
    await h.advance(0)
    joined = await wait(task)
    assert joined.error is ErrorCode.none
    assert joined.generation_id == 1
    assert joined.leader_id == joined.member_id == first.member_id
    assert joined.protocol_type == "consumer" and joined.protocol_name == "range"
    assert joined.members == ((first.member_id, None, subscription("t")),)
    assert state(h) is GroupState.COMPLETING_REBALANCE
    assert h.heartbeat(G, first.member_id, 1) is ErrorCode.none  # allowed while syncing

    synced = await wait(h.sync(G, first.member_id, 1, {first.member_id: b"my-partitions"}))
    assert synced.error is ErrorCode.none and synced.assignment == b"my-partitions"
    assert synced.protocol_type == "consumer" and synced.protocol_name == "range"
    assert state(h) is GroupState.STABLE
    record = last_group_record(h)
    assert record is not None and record.generation == 1 and record.protocol == "range"
    assert record.leader == first.member_id
    assert [(m.member_id, m.assignment, m.subscription) for m in record.members] == [
        (first.member_id, b"my-partitions", subscription("t"))
    ]
    assert record.members[0].client_host == "/127.0.0.1"
    assert h.heartbeat(G, first.member_id, 1) is ErrorCode.none


@run
async def test_old_join_versions_skip_member_id_required() -> None:
    h = await Harness().start()
    task = h.join(G, require_known_member_id=False)
    await h.advance(0)
    joined = await wait(task)
    assert joined.error is ErrorCode.none and joined.member_id.startswith("client-")


@run
async def test_pending_member_id_expires_after_the_session_timeout() -> None:
    h = await Harness().start()
    first = await h.join(G, session_ms=5000)
    assert first.error is ErrorCode.member_id_required
    await h.advance(4999)
    group = h.coordinator.group(G)
    assert group is not None and first.member_id in group.pending_members
    await h.advance(1)
    assert first.member_id not in group.pending_members
    late = await h.join(G, first.member_id)
    assert late.error is ErrorCode.unknown_member_id


@run
async def test_join_validation_errors() -> None:
    h = await Harness().start()
    assert (await h.join("")).error is ErrorCode.invalid_group_id
    assert (await h.join(G, session_ms=5)).error is ErrorCode.invalid_session_timeout
    assert (await h.join(G, session_ms=1_800_001)).error is ErrorCode.invalid_session_timeout
    assert (await h.join("other", "ghost-id")).error is ErrorCode.unknown_member_id
    assert (await h.join(G, protocols=[])).error is ErrorCode.inconsistent_group_protocol
    _ids, _ = await h.stable_group(G, 1)
    bad_type = await h.join(G, protocol_type="connect")
    assert bad_type.error is ErrorCode.inconsistent_group_protocol
    bad_protocol = await h.join(G, protocols=[("roundrobin", b"")])
    assert bad_protocol.error is ErrorCode.inconsistent_group_protocol


@run
async def test_coordinator_errors_not_ours_and_loading() -> None:
    h = Harness()
    partition = h.coordinator.partition_for(G)
    assert h.heartbeat(G, "m", 1) is ErrorCode.not_coordinator  # nothing loaded yet
    await h.start()
    h.log.not_leader.add(partition)
    assert (await h.join(G)).error is ErrorCode.not_coordinator
    h.log.not_leader.clear()
    # a partition being loaded answers COORDINATOR_LOAD_IN_PROGRESS
    h.coordinator.unload_partition(partition)
    for i in range(3000):
        h.log.partitions.setdefault(partition, []).append((i, b"\x00\x09junk", None))
    loading = asyncio.get_running_loop().create_task(h.coordinator.load_partition(partition))
    await asyncio.sleep(0)
    assert h.coordinator.is_loading(partition)
    assert h.heartbeat(G, "m", 1) is ErrorCode.coordinator_load_in_progress
    await loading
    assert h.heartbeat(G, "m", 1) is ErrorCode.unknown_member_id
    await h.coordinator.shutdown()
    assert h.heartbeat(G, "m", 1) is ErrorCode.coordinator_not_available


@run
async def test_rebalance_when_a_second_member_joins() -> None:
    h = await Harness().start()
    (a,), gen = await h.stable_group(G, 1)
    b_task = await h.join_new(G, client_id="b", topics=("t", "u"))
    assert state(h) is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(G, a, gen) is ErrorCode.rebalance_in_progress
    assert not b_task.done()
    a_task = h.join(G, a)  # a rejoins: everybody is in, the join completes at once
    a_res, b_res = await wait(a_task), await wait(b_task)
    assert a_res.generation_id == b_res.generation_id == gen + 1
    assert a_res.leader_id == b_res.leader_id == a
    assert {m[0] for m in a_res.members} == {a, b_res.member_id}
    assert b_res.members == ()  # only the leader gets the member list
    assert state(h) is GroupState.COMPLETING_REBALANCE
    # a follower's SyncGroup waits for the leader's assignment
    b_sync = h.sync(G, b_res.member_id, gen + 1)
    await h.settle()
    assert not b_sync.done()
    a_sync = h.sync(G, a, gen + 1, {a: b"A", b_res.member_id: b"B"})
    assert (await wait(a_sync)).assignment == b"A"
    assert (await wait(b_sync)).assignment == b"B"
    assert state(h) is GroupState.STABLE
    group = h.coordinator.group(G)
    assert group is not None and group.subscribed_topics == {"t", "u"}


@run
async def test_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout() -> None:
    h = await Harness().start()
    timeouts = {"rebalance_ms": 20_000, "session_ms": 30_000}
    (a, b), gen = await h.stable_group(G, 2, **timeouts)
    c_task = await h.join_new(G, client_id="c", **timeouts)
    a_task = h.join(G, a, **timeouts)
    await h.settle()
    assert not a_task.done()  # b has not rejoined
    # b keeps heart-beating (so its session lives) but never rejoins
    await h.advance(9_000)
    assert h.heartbeat(G, b, gen) is ErrorCode.rebalance_in_progress
    await h.advance(10_999)
    assert not a_task.done()
    await h.advance(1)
    a_res, c_res = await wait(a_task), await wait(c_task)
    assert a_res.generation_id == gen + 1
    assert {m[0] for m in a_res.members} == {a, c_res.member_id}
    assert h.heartbeat(G, b, gen) is ErrorCode.unknown_member_id


@run
async def test_leave_group_rebalances_and_the_last_leave_empties_the_group() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group(G, 2)
    group = h.coordinator.group(G)
    assert group is not None and group.leader_id == a
    error, results = h.coordinator.leave_group(group_id=G, members=[(a, None, "closing")])
    assert error is ErrorCode.none and results == [ErrorCode.none]
    assert state(h) is GroupState.PREPARING_REBALANCE
    assert group.leader_id == b  # the leader left: another member leads
    b_res = await wait(h.join(G, b))
    assert b_res.generation_id == gen + 1 and b_res.leader_id == b
    await wait(h.sync(G, b, gen + 1, {b: b"all"}))
    h.coordinator.leave_group(group_id=G, members=[(b, None, None)])
    await h.settle()
    assert state(h) is GroupState.EMPTY
    assert group.generation_id == gen + 2
    record = last_group_record(h)
    assert record is not None and record.members == () and record.protocol is None
    assert record.generation == gen + 2


@run
async def test_leave_group_batch_errors() -> None:
    h = await Harness().start()
    error, results = h.coordinator.leave_group(group_id="nope", members=[("x", None, None)])
    assert (error, results) == (ErrorCode.none, [ErrorCode.unknown_member_id])
    (a,), _ = await h.stable_group(G, 1)
    pending = await h.join(G)
    assert pending.error is ErrorCode.member_id_required
    error, results = h.coordinator.leave_group(
        group_id=G,
        members=[
            ("ghost", None, None),
            ("", "no-such-instance", None),
            (pending.member_id, None, None),
            (a, "wrong-instance", None),
        ],
    )
    assert error is ErrorCode.none
    assert results == [
        ErrorCode.unknown_member_id,
        ErrorCode.unknown_member_id,
        ErrorCode.none,
        ErrorCode.unknown_member_id,
    ]
    group = h.coordinator.group(G)
    assert group is not None and not group.pending_members
    error, _ = h.coordinator.leave_group(group_id="", members=[])
    assert error is ErrorCode.invalid_group_id


@run
async def test_session_expiry_through_the_timer() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group(G, 2, session_ms=10_000)
    for _ in range(3):  # b heartbeats every 4 s, a stays silent
        await h.advance(3_000)
        assert h.heartbeat(G, b, gen) is ErrorCode.none
    group = h.coordinator.group(G)
    assert group is not None and group.has(a) and state(h) is GroupState.STABLE
    await h.advance(1_000)  # 10 s since a's last sign of life
    assert not group.has(a)
    assert state(h) is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(G, b, gen) is ErrorCode.rebalance_in_progress
    assert h.heartbeat(G, a, gen) is ErrorCode.unknown_member_id
    b_res = await wait(h.join(G, b))
    assert b_res.generation_id == gen + 1 and b_res.members == ((b, None, subscription("t")),)


@run
async def test_heartbeat_errors() -> None:
    h = await Harness().start()
    assert h.heartbeat("", "m", 1) is ErrorCode.invalid_group_id
    assert h.heartbeat(G, "m", 1) is ErrorCode.unknown_member_id  # unknown group
    (a,), gen = await h.stable_group(G, 1)
    assert h.heartbeat(G, a, gen + 1) is ErrorCode.illegal_generation
    assert h.heartbeat(G, a, gen - 1) is ErrorCode.illegal_generation
    assert h.heartbeat(G, "stranger", gen) is ErrorCode.unknown_member_id
    assert h.heartbeat(G, a, gen, instance_id="not-static") is ErrorCode.unknown_member_id


@run
async def test_group_max_size() -> None:
    h = await Harness(group_max_size=2).start()
    (a, _b), gen = await h.stable_group(G, 2)
    full = await h.join(G, require_known_member_id=False)
    assert full.error is ErrorCode.group_max_size_reached
    assert state(h) is GroupState.STABLE  # the refused member caused no rebalance
    assert h.heartbeat(G, a, gen) is ErrorCode.none


@run
async def test_initial_rebalance_delay_extends_for_each_new_member() -> None:
    h = await Harness(group_initial_rebalance_delay_ms=3000).start()
    a_task = await h.join_new(G, client_id="a", rebalance_ms=10_000)
    await h.advance(1000)
    b_task = await h.join_new(G, client_id="b", rebalance_ms=10_000)
    await h.advance(1999)
    assert not a_task.done()
    await h.advance(1)  # 3 s: b arrived meanwhile, so wait another 3 s
    assert not a_task.done()
    await h.advance(2999)
    assert not a_task.done()
    await h.advance(1)
    a_res, b_res = await wait(a_task), await wait(b_task)
    assert a_res.generation_id == b_res.generation_id == 1
    assert len(a_res.members) == 2


@run
async def test_initial_delay_never_exceeds_the_rebalance_timeout() -> None:
    h = await Harness(group_initial_rebalance_delay_ms=3000).start()
    start = h.clock.now
    first = await h.join_new(G, client_id="m0", rebalance_ms=7_000)
    newcomers = 0
    # A newcomer every 2 s keeps extending the delay (3 s, then 3 s more, ...) but the
    # initial delays add up to the rebalance timeout at most: 3 s + 3 s + 1 s.
    while not first.done() and h.clock.now - start < 20_000:
        await h.advance(100)
        if (h.clock.now - start) % 2000 == 0 and not first.done():
            newcomers += 1
            await h.join_new(G, client_id=f"m{newcomers}", rebalance_ms=7_000)
    assert h.clock.now - start == 7_000
    result = await wait(first)
    assert result.generation_id == 1 and len(result.members) == newcomers + 1 == 4


@run
async def test_duplicate_join_requests_get_the_same_answer() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group(G, 2)
    first = h.join(G, a)
    second = h.join(G, a)  # a client retry while the first is parked
    await h.settle()
    assert not first.done() and not second.done()
    b_task = h.join(G, b)
    r1, r2, rb = await wait(first), await wait(second), await wait(b_task)
    assert r1 == r2 and r1.generation_id == gen + 1 and rb.generation_id == gen + 1


@run
async def test_cancelled_join_does_not_break_the_rebalance() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group(G, 2)
    dropped = h.join(G, a)
    await h.settle()
    dropped.cancel()  # the client connection went away
    await h.settle()
    retry = h.join(G, a)
    rb = await wait(h.join(G, b))
    assert (await wait(retry)).generation_id == rb.generation_id == gen + 1


@run
async def test_rejoin_in_stable_group() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group(G, 2)
    # a follower rejoining with unchanged metadata just gets the current generation
    same = await wait(h.join(G, b))
    assert same.generation_id == gen and same.members == () and state(h) is GroupState.STABLE
    # the leader rejoining asks for a new assignment: rebalance
    leader = h.join(G, a)
    await h.settle()
    assert state(h) is GroupState.PREPARING_REBALANCE
    h.join(G, b)
    assert (await wait(leader)).generation_id == gen + 1


@run
async def test_follower_changing_subscription_triggers_rebalance() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group(G, 2)
    changed = h.join(G, b, topics=("t", "new-topic"))
    await h.settle()
    assert state(h) is GroupState.PREPARING_REBALANCE
    a_res = await wait(h.join(G, a))
    assert (await wait(changed)).generation_id == a_res.generation_id == gen + 1
    assert dict((m, md) for m, _, md in a_res.members)[b] == subscription("t", "new-topic")


@run
async def test_member_rejoining_during_sync_with_same_metadata_gets_the_same_generation() -> None:
    h = await Harness().start()
    (a, b), _gen = await h.stable_group(G, 2)
    ta, tb = h.join(G, a), h.join(G, b)
    ra, _rb = await wait(ta), await wait(tb)
    assert state(h) is GroupState.COMPLETING_REBALANCE
    again = await wait(h.join(G, a))  # it lost the response and asks again
    assert again == ra


@run
async def test_sync_errors() -> None:
    h = await Harness().start()
    assert (await wait(h.sync(G, "m", 1))).error is ErrorCode.unknown_member_id
    (a, b), gen = await h.stable_group(G, 2)
    assert (await wait(h.sync(G, a, gen + 1))).error is ErrorCode.illegal_generation
    assert (await wait(h.sync(G, "x", gen))).error is ErrorCode.unknown_member_id
    bad = h.sync(G, a, gen, protocol_name="roundrobin")
    assert (await wait(bad)).error is ErrorCode.inconsistent_group_protocol
    bad_type = h.sync(G, a, gen, protocol_type="connect")
    assert (await wait(bad_type)).error is ErrorCode.inconsistent_group_protocol
    # a late SyncGroup in a Stable group returns the member's assignment
    late = await wait(h.sync(G, b, gen, protocol_type="consumer", protocol_name="range"))
    assert late.error is ErrorCode.none and late.assignment == f"assignment-{b}".encode()
    h.join(G, a)
    await h.settle()
    assert (await wait(h.sync(G, b, gen))).error is ErrorCode.rebalance_in_progress


@run
async def test_parked_sync_of_follower_gets_rebalance_in_progress_when_someone_joins() -> None:
    h = await Harness().start()
    (a, b), _gen = await h.stable_group(G, 2)
    h.join(G, a)
    rb = await wait(h.join(G, b))
    parked = h.sync(G, b, rb.generation_id)
    await h.settle()
    assert not parked.done()
    await h.join_new(G, client_id="newcomer")  # a new member during the sync
    assert (await wait(parked)).error is ErrorCode.rebalance_in_progress
    assert state(h) is GroupState.PREPARING_REBALANCE


@run
async def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = await Harness().start()
    (a, b), _gen = await h.stable_group(G, 2, rebalance_ms=15_000, session_ms=60_000)
    ta, tb = (
        h.join(G, a, rebalance_ms=15_000, session_ms=60_000),
        h.join(G, b, rebalance_ms=15_000, session_ms=60_000),
    )
    ra, _ = await wait(ta), await wait(tb)
    leader_sync = h.sync(G, a, ra.generation_id, {a: b"x", b: b"y"})
    assert (await wait(leader_sync)).error is ErrorCode.none
    assert state(h) is GroupState.STABLE
    await h.advance(14_999)
    group = h.coordinator.group(G)
    assert group is not None and group.has(b)
    await h.advance(1)  # b never sent SyncGroup in this generation
    assert not group.has(b)
    assert state(h) is GroupState.PREPARING_REBALANCE


@pytest.mark.parametrize(
    ("append_error", "answer"),
    [
        (19, ErrorCode.coordinator_not_available),  # NOT_ENOUGH_REPLICAS
        (20, ErrorCode.coordinator_not_available),  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
        (7, ErrorCode.coordinator_not_available),  # REQUEST_TIMED_OUT (the ISR never had it)
        (6, ErrorCode.not_coordinator),  # NOT_LEADER_OR_FOLLOWER
    ],
)
@run
async def test_storing_the_assignment_fails(append_error: int, answer: ErrorCode) -> None:
    h = await Harness().start()
    (a, b), _gen = await h.stable_group(G, 2)
    ta, tb = h.join(G, a), h.join(G, b)
    ra, rb = await wait(ta), await wait(tb)
    follower = h.sync(G, b, rb.generation_id)
    h.log.fail_next.append(AppendFailed(append_error))
    leader = h.sync(G, a, ra.generation_id, {a: b"1", b: b"2"})
    assert (await wait(leader)).error is answer
    assert (await wait(follower)).error is answer
    assert state(h) is GroupState.PREPARING_REBALANCE


@run
async def test_unload_answers_parked_requests_not_coordinator() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group(G, 2)
    parked = h.join(G, a)
    await h.settle()
    h.coordinator.unload_partition(h.coordinator.partition_for(G))
    assert (await wait(parked)).error is ErrorCode.not_coordinator
    assert h.coordinator.group(G) is None
    assert h.heartbeat(G, b, gen) is ErrorCode.not_coordinator
    # nothing of the dead group is left waiting in the purgatories
    assert h.coordinator.rebalancer.rebalance_purgatory.delayed() == 0
    assert h.coordinator.rebalancer.heartbeat_purgatory.delayed() == 0


@run
async def test_shutdown_answers_parked_requests() -> None:
    h = await Harness().start()
    (a, _b), _gen = await h.stable_group(G, 2)
    parked = h.join(G, a)
    await h.settle()
    await h.coordinator.shutdown()
    assert (await wait(parked)).error is ErrorCode.not_coordinator
    assert (await h.join(G)).error is ErrorCode.coordinator_not_available


# -- static membership (KIP-345) ---------------------------------------------------------------


async def static_group(
    h: Harness, skip: bool = False, protocols: list[tuple[str, bytes]] | None = None
) -> tuple[str, str, int]:
    ta = h.join(G, instance_id="inst-a", client_id="a", skip_assignment=skip, protocols=protocols)
    await h.settle()
    tb = h.join(G, instance_id="inst-b", client_id="b", skip_assignment=skip, protocols=protocols)
    await h.advance(0)
    ra, rb = await wait(ta), await wait(tb)
    assert ra.error is ErrorCode.none and ra.member_id.startswith("inst-a-")
    gen = ra.generation_id
    a, b = ra.member_id, rb.member_id
    sb = h.sync(G, b, gen, instance_id="inst-b")
    sa = h.sync(G, a, gen, {a: b"A-parts", b: b"B-parts"}, instance_id="inst-a")
    assert (await wait(sa)).assignment == b"A-parts"
    assert (await wait(sb)).assignment == b"B-parts"
    return a, b, gen


@run
async def test_static_member_restart_gets_its_assignment_back_without_rebalance() -> None:
    h = await Harness().start()
    a, b, gen = await static_group(h)
    assert h.coordinator.group(G).leader_id == a  # type: ignore[union-attr]
    # a restarts: no member id, same instance id
    rejoined = await wait(h.join(G, instance_id="inst-a", client_id="a"))
    assert rejoined.error is ErrorCode.none
    new_a = rejoined.member_id
    assert new_a != a and new_a.startswith("inst-a-")
    assert rejoined.generation_id == gen
    # an old client must not think it leads (it would compute a useless assignment)
    assert rejoined.leader_id == a != new_a and rejoined.members == ()
    assert state(h) is GroupState.STABLE
    synced = await wait(h.sync(G, new_a, gen, instance_id="inst-a"))
    assert synced.assignment == b"A-parts"
    assert h.heartbeat(G, b, gen, "inst-b") is ErrorCode.none  # no rebalance for b
    # the old incarnation is fenced
    assert h.heartbeat(G, a, gen, "inst-a") is ErrorCode.fenced_instance_id
    assert (await wait(h.sync(G, a, gen, instance_id="inst-a"))).error is (
        ErrorCode.fenced_instance_id
    )
    results = await h.coordinator.commit_offsets(
        group_id=G, member_id=a, group_instance_id="inst-a", generation_id=gen, offsets={}
    )
    assert results == {}
    # the new member id is what the log says now
    record = last_group_record(h)
    assert record is not None
    assert {m.group_instance_id: m.member_id for m in record.members}["inst-a"] == new_a


@run
async def test_static_leader_restart_with_skip_assignment() -> None:
    h = await Harness().start()
    _a, _b, gen = await static_group(h, skip=True)
    rejoined = await wait(h.join(G, instance_id="inst-a", client_id="a", skip_assignment=True))
    assert rejoined.skip_assignment is True
    assert rejoined.leader_id == rejoined.member_id  # KIP-814: it knows it leads...
    assert {m[1] for m in rejoined.members} == {"inst-a", "inst-b"}  # ...and sees members
    assert state(h) is GroupState.STABLE and rejoined.generation_id == gen


@run
async def test_static_member_restart_with_other_metadata_keeps_the_generation() -> None:
    h = await Harness().start()
    both = [("range", b"r"), ("roundrobin", b"rr")]
    _a, _b, gen = await static_group(h, protocols=both)
    # b prefers another protocol now, but range still wins the vote (a leads, a ties)
    rb = await wait(
        h.join(G, instance_id="inst-b", client_id="b", protocols=[("roundrobin", b"2"), *both])
    )
    assert rb.error is ErrorCode.none and rb.generation_id == gen
    assert state(h) is GroupState.STABLE


@run
async def test_static_member_restart_that_changes_the_protocol_rebalances() -> None:
    h = await Harness().start()
    both = [("range", b"r"), ("roundrobin", b"rr")]
    a, _b, gen = await static_group(h, protocols=both)
    restarted = h.join(G, instance_id="inst-b", client_id="b", protocols=[("roundrobin", b"x")])
    await h.settle()
    assert state(h) is GroupState.PREPARING_REBALANCE  # range is no longer common to all
    ra = await wait(h.join(G, a, instance_id="inst-a", client_id="a", protocols=both))
    rb = await wait(restarted)
    assert ra.generation_id == rb.generation_id == gen + 1
    assert ra.protocol_name == rb.protocol_name == "roundrobin"


@run
async def test_static_member_replaced_while_parked_in_join_is_fenced() -> None:
    h = await Harness().start()
    a, b, gen = await static_group(h)
    old_join = h.join(G, a, instance_id="inst-a", client_id="a")  # leader rejoin: rebalance
    await h.settle()
    assert state(h) is GroupState.PREPARING_REBALANCE
    new_join = h.join(G, instance_id="inst-a", client_id="a")  # the restarted process
    fenced = await wait(old_join)
    assert fenced.error is ErrorCode.fenced_instance_id
    rb = await wait(h.join(G, b, instance_id="inst-b", client_id="b"))
    ra = await wait(new_join)
    assert ra.error is ErrorCode.none and ra.generation_id == rb.generation_id == gen + 1
    assert ra.member_id != a and ra.leader_id == ra.member_id


@run
async def test_static_member_that_does_not_rejoin_keeps_its_place_until_its_session_ends() -> None:
    h = await Harness().start()
    ta = h.join(G, instance_id="inst-a", client_id="a", session_ms=30_000, rebalance_ms=10_000)
    await h.settle()
    tb = h.join(G, instance_id="inst-b", client_id="b", session_ms=30_000, rebalance_ms=10_000)
    await h.advance(0)
    ra, rb = await wait(ta), await wait(tb)
    gen = ra.generation_id
    sb = h.sync(G, rb.member_id, gen, instance_id="inst-b")
    await wait(h.sync(G, ra.member_id, gen, {}, instance_id="inst-a"))
    await wait(sb)
    # a asks for a rebalance; b (static) stays silent
    again = h.join(G, ra.member_id, instance_id="inst-a", session_ms=30_000, rebalance_ms=10_000)
    await h.advance(10_000)
    result = await wait(again)
    group = h.coordinator.group(G)
    assert group is not None and group.has(rb.member_id)  # still a member
    assert {m[1] for m in result.members} == {"inst-a", "inst-b"}
    await wait(h.sync(G, ra.member_id, result.generation_id, {}, instance_id="inst-a"))
    for _ in range(8):  # a keeps heartbeating; b's session runs out
        await h.advance(4_000)
        h.heartbeat(G, ra.member_id, group.generation_id, "inst-a")
    assert not group.has(rb.member_id)


@run
async def test_admin_removes_static_member_by_instance_id() -> None:
    h = await Harness().start()
    a, b, _gen = await static_group(h)
    error, results = h.coordinator.leave_group(group_id=G, members=[("", "inst-b", "admin")])
    assert error is ErrorCode.none
    assert results == [ErrorCode.none]
    assert state(h) is GroupState.PREPARING_REBALANCE
    group = h.coordinator.group(G)
    assert group is not None and not group.has(b) and group.static_member_id("inst-b") is None
    _error, results = h.coordinator.leave_group(group_id=G, members=[(a, "inst-b", None)])
    assert results == [ErrorCode.unknown_member_id]


@run
async def test_protocol_candidates_follow_the_members() -> None:
    h = await Harness().start()
    t1 = await h.join_new(G, protocols=[("roundrobin", b"1"), ("range", b"1")], client_id="x")
    t2 = await h.join_new(G, protocols=[("range", b"2"), ("roundrobin", b"2")], client_id="y")
    t3 = await h.join_new(G, protocols=[("roundrobin", b"3")], client_id="z")
    await h.advance(0)
    results = [await wait(t) for t in (t1, t2, t3)]
    assert {r.protocol_name for r in results} == {"roundrobin"}
