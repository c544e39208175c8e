"""The partition state machine, as Kafka's ZkPartitionStateMachine.

States: NonExistentPartition -> NewPartition -> OnlinePartition <-> OfflinePartition ->
NonExistentPartition. Going online writes the partition's state znode: a new partition
gets its first leader (the first live replica) and an ISR of the live replicas; an
existing one gets a leader from an election strategy (offline, controlled shutdown,
preferred replica) with ``leader_epoch + 1``. Every write is a compare-and-set on the
znode version fenced by the controller epoch, so a replaced controller gets
ControllerMoved and a leader's concurrent ISR change is re-read and the election re-run.
Each change adds LeaderAndIsr for the replicas and UpdateMetadata for every broker to
the event's request batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from enum import Enum

from odradek.cluster.controller import election
from odradek.cluster.controller.context import (
    NO_LEADER,
    ControllerContext,
    LeaderIsr,
    PartitionStateName,
    TopicPartition,
)
from odradek.cluster.controller.request_batch import RequestBatch
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.errors import ControllerMoved, NodeExists, StaleVersion

log = logging.getLogger(__name__)

NEW = PartitionStateName.NEW
ONLINE = PartitionStateName.ONLINE
OFFLINE = PartitionStateName.OFFLINE
NON_EXISTENT = PartitionStateName.NON_EXISTENT

VALID_PREVIOUS = {
    NEW: {NON_EXISTENT},
    ONLINE: {NEW, ONLINE, OFFLINE},
    OFFLINE: {NEW, ONLINE, OFFLINE},
    NON_EXISTENT: {OFFLINE},
}
MAX_CAS_ATTEMPTS = 5


def read_leadership(zk: ZkClient, ctx: ControllerContext, tp: TopicPartition) -> LeaderIsr | None:
    """The partition's state znode, into the context. A znode written by a controller of
    a later epoch means this one has been replaced: ControllerMoved, as Kafka aborts."""
    found = zk.get_partition_state(*tp)
    if found is None:
        return None
    state = LeaderIsr.of(*found)
    if state.controller_epoch > ctx.epoch:
        raise ControllerMoved(
            f"{tp[0]}-{tp[1]} was written by controller epoch {state.controller_epoch}, "
            f"this controller has epoch {ctx.epoch}"
        )
    ctx.leadership[tp] = state
    return state


class Strategy(Enum):
    OFFLINE = "OfflinePartitionLeaderElectionStrategy"
    CONTROLLED_SHUTDOWN = "ControlledShutdownPartitionLeaderElectionStrategy"
    PREFERRED = "PreferredReplicaPartitionLeaderElectionStrategy"
    # ElectLeaders with election type UNCLEAN: the offline strategy with allowUnclean.
    UNCLEAN = "OfflinePartitionLeaderElectionStrategy(allowUnclean=true)"
    REASSIGN = "ReassignPartitionLeaderElectionStrategy"


class PartitionStateMachine:
    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkClient,
        batch: RequestBatch,
        unclean_enabled: Callable[[str], bool],
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.unclean_enabled = unclean_enabled  # topic -> unclean.leader.election.enable

    def startup(self) -> None:
        """Initial states from the loaded context, then bring partitions online."""
        for tp in self.ctx.all_partitions():
            state = self.ctx.leadership.get(tp)
            if state is None:
                self.ctx.partition_states[tp] = NEW
            elif self.ctx.is_live(state.leader):
                self.ctx.partition_states[tp] = ONLINE
            else:
                self.ctx.partition_states[tp] = OFFLINE
        self.trigger_online_partition_state_change()

    def trigger_online_partition_state_change(self) -> None:
        """New and offline partitions (of topics not being deleted) get a leader."""
        candidates = [
            tp
            for tp in self.ctx.partitions_in(NEW) + self.ctx.partitions_in(OFFLINE)
            if tp[0] not in self.ctx.topics_to_delete
        ]
        self.handle_state_changes(candidates, ONLINE, Strategy.OFFLINE)

    def handle_state_changes(
        self,
        partitions: Iterable[TopicPartition],
        target: PartitionStateName,
        strategy: Strategy = Strategy.OFFLINE,
    ) -> dict[TopicPartition, LeaderIsr | None]:
        """Move each partition to ``target``; returns, for online transitions, the new
        leadership of each partition (None where no leader could be chosen)."""
        results: dict[TopicPartition, LeaderIsr | None] = {}
        partitions = list(partitions)
        initialized: dict[TopicPartition, LeaderIsr | None] = {}
        if target is ONLINE:
            # New partitions' first leaders are written to ZooKeeper in one pipelined
            # batch (a new topic of 1,000 partitions: a few round trips, not 2,000).
            initialized = self._initialize_all(
                [tp for tp in partitions if self.ctx.partition_state(tp) is NEW]
            )
        for tp in partitions:
            current = self.ctx.partition_state(tp)
            if current not in VALID_PREVIOUS[target]:
                log.error(
                    "controller %s: invalid partition transition %s -> %s for %s-%d",
                    self.batch.controller_id,
                    current.value,
                    target.value,
                    *tp,
                )
                continue
            if target is NEW:
                self.ctx.partition_states[tp] = NEW
            elif target is ONLINE:
                if current is NEW:
                    results[tp] = initialized[tp] if tp in initialized else self._initialize(tp)
                else:
                    results[tp] = self._elect(tp, strategy)
                if results[tp] is not None:
                    self.ctx.partition_states[tp] = ONLINE
            elif target is OFFLINE:
                self.ctx.partition_states[tp] = OFFLINE
            else:
                self.ctx.partition_states.pop(tp, None)
        return results

    # --- a new partition's first leader -------------------------------------------

    def _initialize_all(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsr | None]:
        """``_initialize`` for many new partitions, their znodes created in one batch."""
        done: dict[TopicPartition, LeaderIsr | None] = {}
        planned: list[tuple[TopicPartition, LeaderIsr]] = []
        for tp in partitions:
            live = tuple(r for r in self.ctx.assignment.get(tp, ()) if self.ctx.is_live(r))
            if not live:
                continue  # _initialize reports it
            planned.append((tp, LeaderIsr(live[0], 0, live, self.ctx.epoch, 0)))
        if len(planned) < 2:
            return done
        outcomes = self.zk.create_partition_states(
            [(tp[0], tp[1], state.znode()) for tp, state in planned], self.ctx.epoch_zk_version
        )
        for (tp, state), outcome in zip(planned, outcomes, strict=True):
            if outcome is not None:  # NodeExists: elect from what is there, one by one
                found = self.zk.get_partition_state(*tp)
                if found is None:
                    done[tp] = None
                    continue
                self.ctx.leadership[tp] = LeaderIsr.of(*found)
                done[tp] = self._elect(tp, Strategy.OFFLINE)
                continue
            self.ctx.leadership[tp] = state
            self.batch.add_leader_and_isr(list(state.isr), tp, state, is_new=True)
            done[tp] = state
        return done

    def _initialize(self, tp: TopicPartition) -> LeaderIsr | None:
        replicas = self.ctx.assignment.get(tp, ())
        live = tuple(r for r in replicas if self.ctx.is_live(r))
        if not live:
            log.error("no live replica of new partition %s-%d among %s", *tp, list(replicas))
            return None
        state = LeaderIsr(live[0], 0, live, self.ctx.epoch, 0)
        try:
            self.zk.create_partition_state(tp[0], tp[1], state.znode(), self.ctx.epoch_zk_version)
        except NodeExists:
            # Written before (a previous controller died half-way): elect from it.
            found = self.zk.get_partition_state(*tp)
            if found is None:
                return None
            self.ctx.leadership[tp] = LeaderIsr.of(*found)
            return self._elect(tp, Strategy.OFFLINE)
        self.ctx.leadership[tp] = state
        self.batch.add_leader_and_isr(live, tp, state, is_new=True)
        return state

    # --- elections ----------------------------------------------------------------

    def _elect(self, tp: TopicPartition, strategy: Strategy) -> LeaderIsr | None:
        for _attempt in range(MAX_CAS_ATTEMPTS):
            # Read the znode first, as Kafka does: leaders change the ISR on their own.
            current = read_leadership(self.zk, self.ctx, tp)
            if current is None:
                return None
            proposed = self._propose(tp, current, strategy)
            if proposed is None:
                return None
            if proposed == current:
                return current  # nothing to change (the preferred replica already leads)
            try:
                version = self.zk.update_partition_state(
                    tp[0], tp[1], proposed.znode(), current.zk_version, self.ctx.epoch_zk_version
                )
            except StaleVersion:
                continue  # a leader changed the ISR meanwhile: read again, elect again
            state = LeaderIsr(
                proposed.leader,
                proposed.leader_epoch,
                proposed.isr,
                proposed.controller_epoch,
                version,
                proposed.leader_recovery_state,
            )
            self.ctx.leadership[tp] = state
            replicas = self.ctx.assignment.get(tp, ())
            self.batch.add_leader_and_isr([r for r in replicas if self.ctx.is_live(r)], tp, state)
            return state
        log.error("partition %s-%d: gave up after %d stale writes", *tp, MAX_CAS_ATTEMPTS)
        return None

    def _propose(
        self, tp: TopicPartition, current: LeaderIsr, strategy: Strategy
    ) -> LeaderIsr | None:
        replicas = self.ctx.assignment.get(tp, ())
        live = self.ctx.live_broker_ids
        recovery = current.leader_recovery_state
        if strategy in (Strategy.OFFLINE, Strategy.UNCLEAN):
            if (
                current.leader != NO_LEADER
                and current.leader in live
                and current.leader in current.isr
            ):
                return current  # still led by a live broker: nothing to elect
            leader, isr, unclean = election.offline_partition_leader(
                replicas, current.isr, live, False
            )
            if leader is None and (strategy is Strategy.UNCLEAN or self.unclean_enabled(tp[0])):
                leader, isr, unclean = election.offline_partition_leader(
                    replicas, current.isr, live, True
                )
            if unclean:
                log.warning(
                    "unclean leader election for %s-%d: broker %s leads though it was not in "
                    "the ISR %s; records only they had are lost",
                    *tp,
                    leader,
                    list(current.isr),
                )
                recovery = 1  # RECOVERING: the new leader may lack acknowledged records
        elif strategy is Strategy.CONTROLLED_SHUTDOWN:
            leader, isr = election.controlled_shutdown_leader(
                replicas, current.isr, live, self.ctx.shutting_down
            )
        elif strategy is Strategy.REASSIGN:
            leader = election.reassign_partition_leader(replicas, current.isr, live)
            isr = current.isr
        else:
            leader = election.preferred_replica_leader(replicas, current.isr, live)
            isr = current.isr
            if leader == current.leader:
                return current
        if leader is None:
            log.info("no leader can be elected for %s-%d (%s)", *tp, strategy.value)
            return None
        return LeaderIsr(
            leader,
            current.leader_epoch + 1,
            tuple(isr),
            self.ctx.epoch,
            current.zk_version,
            recovery,
        )
