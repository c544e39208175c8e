"""ElectLeaders (API key 43) in cluster mode, as Kafka 3.9's ZooKeeper-mode broker.

KafkaApis.handleElectLeaders takes the request's partitions (all partitions of the
metadata cache when the request names none) and hands them to the controller through
ReplicaManager.electLeaders. Only the active controller elects; on any other broker every
partition answers NOT_CONTROLLER (Kafka's admin client sends the request to the
controller). For each partition the controller elected a leader for, the answer waits
(up to the request's timeout, Kafka's DelayedElectLeader) until this broker's metadata
cache shows that leader; still waiting then: REQUEST_TIMED_OUT. Errors from the
controller (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION...) are answered at once.

The controller is reached through ``hook``, an ``async (partitions, election_type) ->
{(topic, partition): (error_code, message, leader)}`` the server sets once the broker
runs its controller; without it every partition answers NOT_CONTROLLER.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import millis, respond
from odradek.broker.metadata_cache import MetadataCache

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext

ELECT_LEADERS = 43
PREFERRED, UNCLEAN = 0, 1
TopicPartition = tuple[str, int]
ElectionAnswer = tuple[int, str | None, int | None]  # error code, message, leader
ElectHook = Callable[[set[TopicPartition], int], Awaitable[dict[TopicPartition, ElectionAnswer]]]


@dataclass
class ElectLeadersHandler:
    cache: MetadataCache
    hook: ElectHook | None = None

    def handlers(self) -> dict[int, Callable[[Any, Any], Awaitable[Any]]]:
        return {ELECT_LEADERS: self.handle_elect_leaders}

    async def handle_elect_leaders(self, ctx: RequestContext, request: Any) -> Any:
        version = ctx.header.api_version
        # v0 has no election type: always preferred (KIP-460 added unclean in v1).
        election_type = int(request.election_type) if version >= 1 else PREFERRED
        partitions = self._requested(request)
        if election_type not in (PREFERRED, UNCLEAN):
            # Kafka cannot parse an unknown ElectionType: the request is invalid.
            message = f"Unknown election type {election_type}"
            answers = {tp: (int(ErrorCode.invalid_request), message, None) for tp in partitions}
            return self._respond(ctx, answers, ErrorCode.invalid_request)
        if self.hook is None or not partitions:
            code = int(ErrorCode.not_controller)
            answers = {tp: (code, None, None) for tp in partitions}
        else:
            answers = dict(await self.hook(partitions, election_type))
        await self._wait_for_leaders(answers, millis(request.timeout))
        return self._respond(ctx, answers, ErrorCode.none)

    def _requested(self, request: Any) -> set[TopicPartition]:
        if request.topic_partitions is None:
            return {
                (topic, partition)
                for topic in self.cache.topics()
                for partition in self.cache.partitions(topic) or {}
            }
        return {
            (str(entry.topic), int(partition))
            for entry in request.topic_partitions
            for partition in entry.partitions
        }

    async def _wait_for_leaders(
        self, answers: dict[TopicPartition, ElectionAnswer], ms: int
    ) -> None:
        expected = {
            tp: leader
            for tp, (code, _message, leader) in answers.items()
            if code == ErrorCode.none and leader is not None
        }

        def shown(tp: TopicPartition) -> bool:
            state = self.cache.partition(*tp)
            return state is not None and state.leader == expected[tp]

        if expected:
            await self.cache.wait_until(lambda: all(shown(tp) for tp in expected), ms / 1000)
        for tp, leader in expected.items():
            if not shown(tp):
                answers[tp] = (
                    int(ErrorCode.request_timed_out),
                    f"Timed out waiting for leader {leader} of {tp[0]}-{tp[1]} to be known",
                    None,
                )

    def _respond(
        self,
        ctx: RequestContext,
        answers: dict[TopicPartition, ElectionAnswer],
        top_level: ErrorCode,
    ) -> Any:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), (code, message, _leader) in sorted(answers.items()):
            by_topic.setdefault(topic, []).append(
                {"partition_id": partition, "error_code": code, "error_message": message}
            )
        return respond(
            ctx,
            {
                "throttle_time": 0,
                "error_code": top_level,
                "replica_election_results": [
                    {"topic": topic, "partition_result": results}
                    for topic, results in by_topic.items()
                ],
            },
        )
