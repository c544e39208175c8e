"""Moving leadership on purpose: controlled shutdown and preferred-replica elections.

As Kafka's KafkaController.doControlledShutdown, onReplicaElection and
checkAndTriggerAutoLeaderRebalance: a broker shutting down hands the partitions it leads
to another in-sync replica and leaves the ISR of the others; the preferred replica (the
first of the assignment) takes its partitions back when asked through
``/admin/preferred_replica_election`` or when a broker's share of partitions it should
lead but does not exceeds ``leader.imbalance.per.broker.percentage``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.cluster.controller.context import (
    ControllerContext,
    LeaderIsr,
    PartitionStateName,
    ReplicaState,
    TopicPartition,
)
from odradek.cluster.controller.partition_state_machine import PartitionStateMachine, Strategy
from odradek.cluster.controller.replica_state_machine import ReplicaStateMachine
from odradek.cluster.zk.client import ZkClient

log = logging.getLogger(__name__)

ONLINE = PartitionStateName.ONLINE
OFFLINE = PartitionStateName.OFFLINE
_NO_STATE = LeaderIsr(-1, -1, (), -1, -1)


@dataclass(frozen=True, slots=True)
class ControlledShutdownResult:
    """What a ControlledShutdown response carries: an error code and the partitions the
    broker still leads (it retries while there are any, as Kafka's broker does)."""

    error_code: ErrorCode
    remaining: tuple[TopicPartition, ...] = ()


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types (Kafka's ElectionType)


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """One partition's answer to an ElectLeaders request: an error code and message, or
    the leader it elected."""

    error_code: ErrorCode
    message: str | None = None
    leader: int | None = None


class LeadershipMoves:
    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkClient,
        partitions: PartitionStateMachine,
        replicas: ReplicaStateMachine,
        imbalance_percentage: float,
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.partitions = partitions
        self.replicas = replicas
        self.imbalance_percentage = imbalance_percentage

    def controlled_shutdown(self, broker: int, broker_epoch: int) -> ControlledShutdownResult:
        if not self.ctx.is_live(broker):
            return ControlledShutdownResult(ErrorCode.broker_not_available)
        if broker_epoch != -1 and broker_epoch < self.ctx.broker_epochs[broker]:
            return ControlledShutdownResult(ErrorCode.stale_broker_epoch)
        self.ctx.shutting_down.add(broker)
        log.info("controlled shutdown of broker %d", broker)
        movable = [
            tp
            for tp in self.ctx.partitions_on_broker(broker)
            if tp[0] not in self.ctx.topics_to_delete and len(self.ctx.assignment[tp]) > 1
        ]
        led = [tp for tp in movable if self._leader(tp) == broker]
        self.partitions.handle_state_changes(led, ONLINE, Strategy.CONTROLLED_SHUTDOWN)
        followers = [(tp, broker) for tp in movable if tp not in led]
        self.replicas.handle_state_changes(followers, ReplicaState.OFFLINE)
        remaining = tuple(
            tp
            for tp in self.ctx.partitions_on_broker(broker)
            if self._leader(tp) == broker and len(self.ctx.assignment[tp]) > 1
        )
        return ControlledShutdownResult(ErrorCode.none, remaining)

    def _leader(self, tp: TopicPartition) -> int | None:
        state = self.ctx.leadership.get(tp)
        return None if state is None else state.leader

    def on_preferred_election_request(self) -> None:
        requested = self.zk.get_preferred_replica_election()
        if not requested:
            return
        valid = [
            tp
            for tp in sorted(requested)
            if tp in self.ctx.assignment and tp[0] not in self.ctx.topics_to_delete
        ]
        self.elect_preferred(valid)
        self.zk.delete_preferred_replica_election(self.ctx.epoch_zk_version)

    def elect_preferred(self, partitions: list[TopicPartition]) -> None:
        eligible = [
            tp
            for tp in partitions
            if self.ctx.partition_state(tp) in (ONLINE, OFFLINE)
            and self._leader(tp) != self.ctx.assignment[tp][0]
        ]
        self.partitions.handle_state_changes(eligible, ONLINE, Strategy.PREFERRED)

    def elect_leaders(
        self, requested: set[TopicPartition], election_type: int
    ) -> dict[TopicPartition, ElectionResult]:
        """Kafka's processReplicaLeaderElection for an AdminClient request: unknown
        partitions UNKNOWN_TOPIC_OR_PARTITION, topics being deleted INVALID_TOPIC_EXCEPTION,
        partitions that need no election (preferred: the preferred replica leads; unclean:
        a live leader) ELECTION_NOT_NEEDED; the rest are elected (preferred: the first
        replica if live and in the ISR; unclean: the offline strategy allowing an
        out-of-sync replica) and where that fails PREFERRED_LEADER_NOT_AVAILABLE or
        ELIGIBLE_LEADERS_NOT_AVAILABLE."""
        results: dict[TopicPartition, ElectionResult] = {}
        electable: list[TopicPartition] = []
        for tp in sorted(requested):
            if tp not in self.ctx.assignment:
                results[tp] = ElectionResult(
                    ErrorCode.unknown_topic_or_partition, "The partition does not exist."
                )
            elif tp[0] in self.ctx.topics_to_delete:
                results[tp] = ElectionResult(
                    ErrorCode.invalid_topic_exception, "The topic is being deleted"
                )
            else:
                leader = self._leader(tp)
                if election_type == PREFERRED:
                    needed = leader != self.ctx.assignment[tp][0]
                else:
                    needed = leader is None or leader < 0 or not self.ctx.is_live(leader)
                if needed:
                    electable.append(tp)
                else:
                    results[tp] = ElectionResult(ErrorCode.election_not_needed)
        if election_type == PREFERRED:
            strategy, failure = Strategy.PREFERRED, ErrorCode.preferred_leader_not_available
        else:
            strategy, failure = Strategy.UNCLEAN, ErrorCode.eligible_leaders_not_available
        elected = self.partitions.handle_state_changes(electable, ONLINE, strategy)
        for tp in electable:
            state = elected.get(tp)
            if state is None:
                results[tp] = ElectionResult(
                    failure,
                    f"Failed to elect leader for partition {tp[0]}-{tp[1]} under strategy "
                    f"{strategy.value}",
                )
            else:
                results[tp] = ElectionResult(ErrorCode.none, leader=state.leader)
        return results

    def check_leader_imbalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: a broker whose share of partitions
        it should lead (it is first in the assignment) but does not exceeds
        ``leader.imbalance.per.broker.percentage`` gets those partitions back."""
        for broker in sorted(self.ctx.live_not_shutting_down):
            preferred = [
                tp
                for tp, replicas in sorted(self.ctx.assignment.items())
                if replicas and replicas[0] == broker and tp[0] not in self.ctx.topics_to_delete
            ]
            if not preferred:
                continue
            imbalanced = [tp for tp in preferred if self._leader(tp) != broker]
            if len(imbalanced) * 100 / len(preferred) > self.imbalance_percentage:
                candidates = [
                    tp
                    for tp in imbalanced
                    if broker in self.ctx.leadership.get(tp, _NO_STATE).isr
                    and tp not in self.ctx.being_reassigned  # as Kafka: not while moving
                ]
                self.elect_preferred(candidates)
