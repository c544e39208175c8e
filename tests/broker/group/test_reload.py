"""A coordinator rebuilt from the offsets log equals the one that wrote it."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.group.coordinator import GroupCoordinator
from odradek.broker.group.group import GroupState
from odradek.broker.group.offsets import OffsetCommitRequestData
from odradek.broker.group.offsets_records import (
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from tests.broker.group.harness import Harness, run, subscription, wait


def snapshot(coordinator: GroupCoordinator) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group in coordinator.groups():
        if group.generation_id == 0 and not group.offsets:
            continue  # never rebalanced, nothing committed: nothing to persist
        members = []
        for m in group.members.values():
            metadata = m.metadata_for(group.protocol_name) if group.protocol_name else None
            members.append(
                (
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    metadata,
                    m.assignment,
                )
            )
        out[group.group_id] = {
            "state": group.state,
            "generation": group.generation_id,
            "protocol_type": group.protocol_type,
            "protocol": group.protocol_name,
            "leader": group.leader_id,
            "members": sorted(members, key=lambda m: m[0]),
            "static": dict(group.static_members),
            "subscribed": group.subscribed_topics,
            "offsets": {
                tp: (c.offset, c.metadata, c.leader_epoch, c.commit_timestamp, c.expire_timestamp)
                for tp, c in group.offsets.items()
            },
        }
    return out


async def commit(h: Harness, group: str, member: str, gen: int, **offsets: int) -> None:
    parsed = {
        (name.split("_")[0], int(name.split("_")[1])): OffsetCommitRequestData(v, f"m{v}", 2)
        for name, v in offsets.items()
    }
    results = await h.coordinator.commit_offsets(
        group_id=group, member_id=member, group_instance_id=None, generation_id=gen, offsets=parsed
    )
    assert set(results.values()) == {ErrorCode.none}


async def build_state(h: Harness) -> dict[str, Any]:
    """Several kinds of groups; returns ids the tests need."""
    (a, b), gen = await h.stable_group("stable", 2, topics=("t", "u"), session_ms=30_000)
    await commit(h, "stable", a, gen, t_0=10, t_1=11, u_0=12)
    await commit(h, "stable", b, gen, t_0=13)  # overwrites t_0
    # static members
    sa = h.join("static", instance_id="ia", client_id="sa", session_ms=30_000)
    await h.settle()
    sb = h.join("static", instance_id="ib", client_id="sb", session_ms=30_000)
    await h.advance(0)
    ra, rb = await wait(sa), await wait(sb)
    s1 = h.sync("static", rb.member_id, ra.generation_id, instance_id="ib")
    await wait(
        h.sync(
            "static",
            ra.member_id,
            ra.generation_id,
            {ra.member_id: b"SA", rb.member_id: b"SB"},
            instance_id="ia",
        )
    )
    await wait(s1)
    # a simple consumer, a group that emptied, a deleted group, a deleted offset
    await commit(h, "simple", "", -1, x_0=1, x_1=2)
    (e,), egen = await h.stable_group("emptied", 1)
    await commit(h, "emptied", e, egen, t_0=5)
    h.coordinator.leave_group(group_id="emptied", members=[(e, None, None)])
    await commit(h, "doomed", "", -1, t_0=1)
    assert (await h.coordinator.delete_groups(["doomed"]))["doomed"] is ErrorCode.none
    await commit(h, "simple", "", -1, x_2=3)
    await h.coordinator.delete_offsets(group_id="simple", partitions=[("x", 2)])
    await h.settle()
    return {"a": a, "b": b, "gen": gen, "static": (ra, rb)}


@run
async def test_reload_rebuilds_every_group_and_offset() -> None:
    h = await Harness().start()
    await build_state(h)
    before = snapshot(h.coordinator)
    assert set(before) == {"stable", "static", "simple", "emptied"}
    other = await h.fresh().start()
    after = snapshot(other.coordinator)
    assert after == before
    assert after["stable"]["offsets"][("t", 0)][0] == 13
    assert after["emptied"]["state"] is GroupState.EMPTY
    assert after["emptied"]["protocol_type"] == "consumer"
    assert after["simple"]["protocol_type"] is None
    assert ("x", 2) not in after["simple"]["offsets"]


@run
async def test_members_carry_on_after_the_coordinator_moves() -> None:
    h = await Harness().start()
    ids = await build_state(h)
    a, b, gen = ids["a"], ids["b"], ids["gen"]
    ra, _rb = ids["static"]
    other = await h.fresh().start()
    # members keep their ids and generation: heartbeats, syncs and commits just work
    assert other.heartbeat("stable", a, gen) is ErrorCode.none
    synced = await wait(other.sync("stable", b, gen))
    assert synced.error is ErrorCode.none and synced.assignment == f"assignment-{b}".encode()
    await commit(other, "stable", a, gen, t_0=99)
    # a static member restarting against the new coordinator keeps its assignment
    restarted = await wait(other.join("static", instance_id="ia", client_id="sa"))
    assert restarted.error is ErrorCode.none and restarted.generation_id == ra.generation_id
    again = await wait(
        other.sync("static", restarted.member_id, restarted.generation_id, instance_id="ia")
    )
    assert again.assignment == b"SA"
    # a member that stays silent is expired by its session timeout (30 s)
    for _ in range(8):
        await other.advance(4_000)
        other.heartbeat("stable", b, gen)
    group = other.coordinator.group("stable")
    assert group is not None and not group.has(a) and group.has(b)
    assert group.state is GroupState.PREPARING_REBALANCE


@run
async def test_reload_of_a_group_caught_mid_rebalance_restores_the_last_stable_generation() -> None:
    h = await Harness().start()
    (a, b), gen = await h.stable_group("g", 2)
    h.join("g", a)  # a rebalance starts but never finishes here
    await h.settle()
    other = await h.fresh().start()
    group = other.coordinator.group("g")
    assert group is not None and group.state is GroupState.STABLE
    assert group.generation_id == gen and set(group.members) == {a, b}


@run
async def test_loading_skips_malformed_and_foreign_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    partition = h.coordinator.partition_for("g")
    records = h.log.partitions.setdefault(partition, [])
    good_value = encode_offset_commit_value(OffsetCommitValue(7, "", 1))
    records += [
        (0, b"\x00", b"x"),  # truncated key
        (1, encode_offset_commit_key("g", "t", 0), b"\x00\x07garbage"),  # unknown value version
        (2, struct.pack(">h", 5) + b"kip-848 record", b"whatever"),  # not for classic groups
        (3, encode_offset_commit_key("g", "t", 1), good_value),
    ]
    await h.start()
    assert "malformed record" in caplog.text
    error, offsets = h.coordinator.fetch_offsets(group_id="g", partitions=None)
    assert error is ErrorCode.none and list(offsets) == [("t", 1)]


@run
async def test_loading_records_written_by_older_kafka_versions() -> None:
    h = Harness()
    partition = h.coordinator.partition_for("legacy")
    member = MemberMetadataValue("m-1", "cid", "/10.0.0.1", 60_000, 30_000, subscription("t"), b"A")
    # value v0 of an offset (no leader epoch), v3 group metadata
    v0 = struct.pack(">hq", 0, 42) + struct.pack(">h", 2) + b"md" + struct.pack(">q", 5)
    h.log.partitions[partition] = [
        (0, encode_offset_commit_key("legacy", "t", 0), v0),
        (
            1,
            encode_group_metadata_key("legacy"),
            encode_group_metadata_value(
                GroupMetadataValue("consumer", 7, "range", "m-1", (member,))
            ),
        ),
    ]
    await h.start()
    group = h.coordinator.group("legacy")
    assert group is not None and group.state is GroupState.STABLE and group.generation_id == 7
    assert group.leader_id == "m-1" and group.get("m-1").assignment == b"A"
    assert group.subscribed_topics == {"t"}
    assert group.offsets[("t", 0)].offset == 42 and group.offsets[("t", 0)].metadata == "md"


@run
async def test_unload_during_load_stops_loading() -> None:
    h = Harness()
    partition = h.coordinator.partition_for("g")
    h.log.partitions[partition] = [
        (
            i,
            encode_offset_commit_key("g", "t", i),
            encode_offset_commit_value(OffsetCommitValue(i, "", 1)),
        )
        for i in range(5000)
    ]
    loading = asyncio.get_running_loop().create_task(h.coordinator.load_partition(partition))
    await asyncio.sleep(0)
    h.coordinator.unload_partition(partition)
    await loading
    assert h.coordinator.group("g") is None
    assert not h.coordinator.is_loading(partition)
    assert partition not in h.coordinator.owned_partitions()
    await h.coordinator.load_partition(partition)  # loading again later works
    assert len(h.coordinator.group("g").offsets) == 5000  # type: ignore[union-attr]
