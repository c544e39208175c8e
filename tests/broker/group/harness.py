"""An in-memory ``__consumer_offsets``, a hand-moved clock and helpers to drive a coordinator."""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from odradek.broker.group.config import GroupConfig
from odradek.broker.group.coordinator import GroupCoordinator
from odradek.broker.group.group import JoinGroupResult, SyncGroupResult
from odradek.broker.timing_wheel import Timer

T = TypeVar("T")

START_MS = 1_700_000_000_000


def run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test function on a fresh event loop, bounded in time."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 30))

    return wrapper


class FakeClock:
    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class AppendFailed(Exception):
    def __init__(self, error_code: int) -> None:
        super().__init__(f"append failed with {error_code}")
        self.error_code = error_code


class FakeOffsetsLog:
    """Partitions as lists of (offset, key, value); optional failures and a gate on appends."""

    def __init__(self, num_partitions: int = 50) -> None:
        self.num_partitions = num_partitions
        self.partitions: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        self.not_leader: set[int] = set()
        self.fail_next: list[BaseException] = []
        self.gate: asyncio.Event | None = None
        self.appends = 0

    def is_local_leader(self, partition: int) -> bool:
        return partition not in self.not_leader

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        self.appends += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_next:
            raise self.fail_next.pop(0)
        log = self.partitions.setdefault(partition, [])
        for key, value in records:
            log.append((len(log), bytes(key), None if value is None else bytes(value)))
        return len(log) - 1

    def read(self, partition: int) -> Iterator[tuple[int, bytes, bytes | None]]:
        yield from list(self.partitions.get(partition, []))

    def log_end_offset(self, partition: int) -> int:
        return len(self.partitions.get(partition, []))

    def records(self, partition: int | None = None) -> list[tuple[int, bytes, bytes | None]]:
        if partition is not None:
            return list(self.partitions.get(partition, []))
        return [r for p in sorted(self.partitions) for r in self.partitions[p]]


def subscription(*topics: str, version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription: version, topics, null user data."""
    out = struct.pack(">hi", version, len(topics))
    for topic in topics:
        data = topic.encode()
        out += struct.pack(">h", len(data)) + data
    return out + struct.pack(">i", -1)


@dataclass
class Joined:
    member_id: str
    generation: int
    leader: str
    result: JoinGroupResult


class Harness:
    """A coordinator over a fake log; every offsets partition loaded and led locally."""

    def __init__(self, log: FakeOffsetsLog | None = None, **config: Any) -> None:
        defaults: dict[str, Any] = {
            "group_initial_rebalance_delay_ms": 0,
            "group_min_session_timeout_ms": 10,
        }
        defaults.update(config)
        self.clock = FakeClock()
        self.timer = Timer(clock=self.clock)
        self.log = log or FakeOffsetsLog()
        self.config = GroupConfig(**defaults)
        self.coordinator = GroupCoordinator(self.log, self.timer, self.config, clock=self.clock)

    async def start(self) -> Harness:
        for partition in range(self.log.num_partitions):
            await self.coordinator.load_partition(partition)
        return self

    def fresh(self, **config: Any) -> Harness:
        """A second coordinator over the same log (another broker taking over)."""
        other = Harness(self.log, **{**self._config_overrides(), **config})
        other.clock.now = self.clock.now
        return other

    def _config_overrides(self) -> dict[str, Any]:
        return {
            name: getattr(self.config, name)
            for name in self.config.__dataclass_fields__  # type: ignore[attr-defined]
        }

    async def settle(self) -> None:
        """Let futures and background tasks run until nothing is left to do."""
        for _ in range(20):
            await asyncio.sleep(0)
        await self.coordinator.wait_for_background_tasks()
        for _ in range(5):
            await asyncio.sleep(0)

    async def advance(self, ms: int) -> None:
        """Move the clock and run what is due, as the timer driver would (it re-runs at once
        while tasks are due, e.g. a wait re-armed with a zero delay)."""
        await self.settle()  # requests already issued reach the coordinator first
        self.clock.now += ms
        for _ in range(100):
            self.timer.advance_clock(self.clock.now)
            await self.settle()
            due = self.timer.next_expiration_ms()
            if due is None or due > self.clock.now:
                return
        raise AssertionError("timer keeps having due tasks")

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        client_id: str = "client",
        instance_id: str | None = None,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        protocol_type: str = "consumer",
        protocols: Sequence[tuple[str, bytes]] | None = None,
        topics: Sequence[str] = ("t",),
        require_known_member_id: bool = True,
        skip_assignment: bool = False,
    ) -> asyncio.Task[JoinGroupResult]:
        if protocols is None:
            protocols = [("range", subscription(*topics))]
        return asyncio.get_running_loop().create_task(
            self.coordinator.join_group(
                group_id=group,
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host="/127.0.0.1",
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                protocol_type=protocol_type,
                protocols=protocols,
                require_known_member_id=require_known_member_id,
                supports_skip_assignment=skip_assignment,
            )
        )

    async def join_new(self, group: str, **kwargs: Any) -> asyncio.Task[JoinGroupResult]:
        """KIP-394 flow: get a member id first, then join with it (returns the parked join)."""
        first = await self.join(group, **kwargs)
        if kwargs.get("instance_id") is not None or not kwargs.get("require_known_member_id", True):
            raise AssertionError("join_new is for dynamic members on JoinGroup v4+")
        assert first.error is ErrorCode.member_id_required, first
        task = self.join(group, first.member_id, **kwargs)
        await self.settle()
        return task

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> asyncio.Task[SyncGroupResult]:
        return asyncio.get_running_loop().create_task(
            self.coordinator.sync_group(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance_id,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                assignments=assignments or {},
            )
        )

    def heartbeat(
        self, group: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> ErrorCode:
        return self.coordinator.heartbeat(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance_id,
            generation_id=generation,
        )

    async def stable_group(
        self, group: str, count: int, **join_kwargs: Any
    ) -> tuple[list[str], int]:
        """``count`` dynamic members joined and synced; returns (member ids, generation)."""
        tasks = [await self.join_new(group, client_id=f"c{i}", **join_kwargs) for i in range(count)]
        await self.advance(0)  # the initial delay (0 ms) fires on the next tick
        results = [await wait(t) for t in tasks]
        assert all(r.error is ErrorCode.none for r in results), results
        generation = results[0].generation_id
        leader = results[0].leader_id
        ids = [r.member_id for r in results]
        syncs = [
            self.sync(
                group,
                mid,
                generation,
                {m: f"assignment-{m}".encode() for m in ids} if mid == leader else None,
            )
            for mid in ids
        ]
        for s in syncs:
            assert (await wait(s)).error is ErrorCode.none
        return ids, generation


async def wait(awaitable: Awaitable[T], timeout: float = 5) -> T:
    return await asyncio.wait_for(awaitable, timeout)
