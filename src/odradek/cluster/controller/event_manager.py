"""ControllerEventManager: one queue, drained by one task, as Kafka's.

Everything the controller does is an event. ZooKeeper watches run on kazoo's threads and
only enqueue (through ``loop.call_soon_threadsafe``); the single task processes events
one at a time, so the controller context never sees two writers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from odradek import timeouts
from odradek.cluster.zk.client import ControllerEpoch

log = logging.getLogger(__name__)


class ControllerEvent:
    """Base of every event."""


@dataclass(frozen=True)
class Elected(ControllerEvent):
    """This broker won ``/controller`` (Kafka's Startup/Reelect ending in failover)."""

    epoch: ControllerEpoch


@dataclass(frozen=True)
class ControllerChange(ControllerEvent):
    """This broker lost the seat (``/controller`` moved, session lost): resign."""


@dataclass(frozen=True)
class Expire(ControllerEvent):
    """The ZooKeeper session expired."""


@dataclass(frozen=True)
class BrokerChange(ControllerEvent):
    pass


@dataclass(frozen=True)
class TopicChange(ControllerEvent):
    pass


@dataclass(frozen=True)
class PartitionModifications(ControllerEvent):
    topic: str


@dataclass(frozen=True)
class TopicDeletion(ControllerEvent):
    pass


@dataclass(frozen=True)
class TopicDeletionStopReplicaResponse(ControllerEvent):
    broker: int
    response: Any


@dataclass(frozen=True)
class IsrChangeNotification(ControllerEvent):
    pass


@dataclass(frozen=True)
class PreferredReplicaElection(ControllerEvent):
    pass


@dataclass(frozen=True)
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    pass


@dataclass(frozen=True)
class ControlledShutdown(ControllerEvent):
    broker_id: int
    broker_epoch: int
    reply: asyncio.Future[Any] = field(compare=False)


@dataclass(frozen=True)
class ReplicaLeaderElection(ControllerEvent):
    """An ElectLeaders request (Kafka's AdminClientTriggered ReplicaLeaderElection):
    ``election_type`` 0 = preferred, 1 = unclean."""

    partitions: frozenset[tuple[str, int]]
    election_type: int
    reply: asyncio.Future[Any] = field(compare=False)


@dataclass(frozen=True)
class ZkPartitionReassignment(ControllerEvent):
    """``/admin/reassign_partitions`` was created (the legacy tool's request)."""


@dataclass(frozen=True)
class AlterPartitionReassignments(ControllerEvent):
    """An AlterPartitionReassignments request: a target per partition, None cancels."""

    reassignments: tuple[tuple[tuple[str, int], tuple[int, ...] | None], ...]
    reply: asyncio.Future[Any] = field(compare=False)


@dataclass(frozen=True)
class ListPartitionReassignments(ControllerEvent):
    """A ListPartitionReassignments request; ``partitions`` None lists every one."""

    partitions: frozenset[tuple[str, int]] | None
    reply: asyncio.Future[Any] = field(compare=False)


class ControllerEventManager:
    def __init__(self, process: Callable[[ControllerEvent], Awaitable[None]]) -> None:
        self._process = process
        self._queue: asyncio.Queue[ControllerEvent | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run(), name="controller-event-thread")

    def put(self, event: ControllerEvent) -> None:
        """Enqueue from the event loop."""
        self._queue.put_nowait(event)

    def put_threadsafe(self, event: ControllerEvent) -> None:
        """Enqueue from any thread (kazoo's watch and session threads)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:  # the loop closed meanwhile
            pass

    async def stop(self) -> None:
        """Finish the event in progress and drop the queued ones, as Kafka's
        ``clearAndPut(ShutdownEventThread)``: this controller is resigning, its successor
        starts from ZooKeeper, and each queued event could wait on ZooKeeper (a broker
        cut off from it would wait out the connection timeout once per event)."""
        if self._task is None:
            return
        while not self._queue.empty():
            dropped = self._queue.get_nowait()
            reply = getattr(dropped, "reply", None)
            if reply is not None and not reply.done():
                reply.set_exception(RuntimeError(f"{type(dropped).__name__}: controller stopped"))
        self._queue.put_nowait(None)
        try:
            await timeouts.wait_for(self._task, 30)
        except TimeoutError:
            self._task.cancel()
        self._task = None

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            if event is None:
                return
            try:
                await self._process(event)
            except Exception:
                log.exception("controller event %s failed", type(event).__name__)
                reply = getattr(event, "reply", None)
                if reply is not None and not reply.done():
                    reply.set_exception(RuntimeError(f"{type(event).__name__} failed"))
