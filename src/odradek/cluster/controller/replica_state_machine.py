"""The replica state machine, as Kafka's ZkReplicaStateMachine.

States of one replica (a partition on one broker): NewReplica, OnlineReplica,
OfflineReplica, ReplicaDeletionStarted, ReplicaDeletionSuccessful,
ReplicaDeletionIneligible, NonExistentReplica. Going online resends the partition's
LeaderAndIsr to that broker; going offline stops the replica (StopReplica without
delete) and takes it out of the ISR (the leader becomes -1 when it was the leader and
the ISR keeps its last member, so the partition cannot silently lose acknowledged
records); deletion sends StopReplica with delete.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from odradek.cluster.controller.context import (
    NO_LEADER,
    ControllerContext,
    LeaderIsr,
    ReplicaState,
    TopicPartition,
)
from odradek.cluster.controller.partition_state_machine import read_leadership
from odradek.cluster.controller.request_batch import RequestBatch
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.errors import StaleVersion

log = logging.getLogger(__name__)

Replica = tuple[TopicPartition, int]
S = ReplicaState
VALID_PREVIOUS = {
    S.NEW: {S.NON_EXISTENT},
    S.ONLINE: {S.NEW, S.ONLINE, S.OFFLINE, S.DELETION_INELIGIBLE},
    S.OFFLINE: {S.NEW, S.ONLINE, S.OFFLINE, S.DELETION_INELIGIBLE},
    S.DELETION_STARTED: {S.OFFLINE},
    S.DELETION_SUCCESSFUL: {S.DELETION_STARTED},
    S.DELETION_INELIGIBLE: {S.OFFLINE, S.DELETION_STARTED},
    S.NON_EXISTENT: {S.DELETION_SUCCESSFUL},
}
MAX_CAS_ATTEMPTS = 5


class ReplicaStateMachine:
    def __init__(self, ctx: ControllerContext, zk: ZkClient, batch: RequestBatch) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch

    def startup(self) -> None:
        """Replicas on live brokers are online (and get LeaderAndIsr again: a new
        controller resends state), the rest ineligible for deletion until they return."""
        online: list[Replica] = []
        for tp, replicas in sorted(self.ctx.assignment.items()):
            for broker in replicas:
                if self.ctx.is_live(broker):
                    self.ctx.replica_states[(tp, broker)] = S.ONLINE
                    online.append((tp, broker))
                else:
                    self.ctx.replica_states[(tp, broker)] = S.DELETION_INELIGIBLE
        self.handle_state_changes(online, S.ONLINE)

    def handle_state_changes(self, replicas: Iterable[Replica], target: ReplicaState) -> None:
        for tp, broker in replicas:
            current = self.ctx.replica_state(tp, broker)
            if current not in VALID_PREVIOUS[target]:
                log.error(
                    "invalid replica transition %s -> %s for %s-%d on broker %d",
                    current.value,
                    target.value,
                    tp[0],
                    tp[1],
                    broker,
                )
                continue
            if target is S.ONLINE and current is not S.NEW:
                state = self.ctx.leadership.get(tp)
                if state is not None:
                    self.batch.add_leader_and_isr([broker], tp, state)
            elif target is S.OFFLINE:
                self.batch.add_stop_replica([broker], tp, delete=False)
                self._remove_from_isr(tp, broker)
            elif target is S.DELETION_STARTED:
                self.batch.add_stop_replica([broker], tp, delete=True)
            if target is S.NON_EXISTENT:
                self.ctx.replica_states.pop((tp, broker), None)
            else:
                self.ctx.replica_states[(tp, broker)] = target

    def _remove_from_isr(self, tp: TopicPartition, broker: int) -> None:
        for _attempt in range(MAX_CAS_ATTEMPTS):
            current = read_leadership(self.zk, self.ctx, tp)
            if current is None or broker not in current.isr:
                return
            # Kafka keeps the last ISR member: with no other in-sync copy, only that
            # broker (or an unclean election) may lead again.
            isr = (
                current.isr
                if len(current.isr) == 1
                else tuple(r for r in current.isr if r != broker)
            )
            leader = NO_LEADER if current.leader == broker else current.leader
            proposed = LeaderIsr(
                leader,
                current.leader_epoch + 1,
                isr,
                self.ctx.epoch,
                current.zk_version,
                current.leader_recovery_state,
            )
            try:
                version = self.zk.update_partition_state(
                    tp[0], tp[1], proposed.znode(), current.zk_version, self.ctx.epoch_zk_version
                )
            except StaleVersion:
                continue
            state = LeaderIsr(
                leader,
                proposed.leader_epoch,
                isr,
                self.ctx.epoch,
                version,
                proposed.leader_recovery_state,
            )
            self.ctx.leadership[tp] = state
            if tp[0] not in self.ctx.topics_to_delete:
                others = [
                    r
                    for r in self.ctx.assignment.get(tp, ())
                    if r != broker and self.ctx.is_live(r)
                ]
                self.batch.add_leader_and_isr(others, tp, state)
            return
