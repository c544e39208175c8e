"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), as Kafka 3.9's
ZooKeeper-mode broker (KIP-455).

KafkaApis hands both to the controller; only the active controller answers, any other
broker answers a top-level NOT_CONTROLLER (the admin client sends them to the
controller and retries). Per partition Alter answers what the controller decided
(INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS);
the answer does not wait for the reassignment to finish. A null replica list cancels.

The controller is reached through two hooks the server sets once the broker runs its
controller (``odradek.broker.cluster_mode.start_controller``):
``alter_hook(targets) -> {tp: (code, message)} | top-level code`` and
``list_hook(partitions | None) -> {tp: (replicas, adding, removing)} | top-level code``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import respond

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext

ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
TopicPartition = tuple[str, int]
Replicas = tuple[int, ...]
AlterHook = Callable[
    [dict[TopicPartition, Replicas | None]],
    Awaitable[dict[TopicPartition, tuple[int, str | None]] | int],
]
ListHook = Callable[
    [set[TopicPartition] | None],
    Awaitable[dict[TopicPartition, tuple[Replicas, Replicas, Replicas]] | int],
]


@dataclass
class ReassignmentHandlers:
    alter_hook: AlterHook | None = None
    list_hook: ListHook | None = None

    def handlers(self) -> dict[int, Callable[[Any, Any], Awaitable[Any]]]:
        return {
            ALTER_PARTITION_REASSIGNMENTS: self.handle_alter,
            LIST_PARTITION_REASSIGNMENTS: self.handle_list,
        }

    async def handle_alter(self, ctx: RequestContext, request: Any) -> Any:
        targets: dict[TopicPartition, Replicas | None] = {}
        for topic in request.topics:
            for p in topic.partitions:
                replicas = None if p.replicas is None else tuple(int(r) for r in p.replicas)
                targets[(str(topic.name), int(p.partition_index))] = replicas
        answer: Any = int(ErrorCode.not_controller)
        if self.alter_hook is not None:
            answer = await self.alter_hook(targets)
        if isinstance(answer, int):
            return respond(
                ctx,
                {
                    "throttle_time": 0,
                    "error_code": answer,
                    "error_message": ErrorCode(answer).name.upper(),
                    "responses": [],
                },
            )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), (code, message) in sorted(answer.items()):
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": code, "error_message": message}
            )
        return respond(
            ctx,
            {
                "throttle_time": 0,
                "error_code": 0,
                "error_message": None,
                "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )

    async def handle_list(self, ctx: RequestContext, request: Any) -> Any:
        wanted: set[TopicPartition] | None = None
        if request.topics is not None:
            wanted = {
                (str(topic.name), int(p))
                for topic in request.topics
                for p in topic.partition_indexes
            }
        answer: Any = int(ErrorCode.not_controller)
        if self.list_hook is not None:
            answer = await self.list_hook(wanted)
        if isinstance(answer, int):
            return respond(
                ctx,
                {
                    "throttle_time": 0,
                    "error_code": answer,
                    "error_message": ErrorCode(answer).name.upper(),
                    "topics": [],
                },
            )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), (replicas, adding, removing) in sorted(answer.items()):
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "replicas": list(replicas),
                    "adding_replicas": list(adding),
                    "removing_replicas": list(removing),
                }
            )
        return respond(
            ctx,
            {
                "throttle_time": 0,
                "error_code": 0,
                "error_message": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )
