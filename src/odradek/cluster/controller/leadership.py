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
                    tp for tp in imbalanced if broker in self.ctx.leadership.get(tp, _NO_STATE).isr
                ]
                self.elect_preferred(candidates)
