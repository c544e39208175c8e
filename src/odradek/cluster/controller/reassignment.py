"""Partition reassignment, as Kafka 3.x's ZooKeeper-mode KafkaController (KIP-455).

Notation (Kafka's): ORS the original replicas, TRS the target replicas, RS the full set
during the move (TRS + ORS), AR the adding replicas (TRS - ORS), RR the removing
replicas (ORS - TRS).

:meth:`Reassignments.on_partition_reassignment` is Kafka's ``onPartitionReassignment``:

1. write RS, AR and RR to ``/brokers/topics/<t>`` (``adding_replicas`` /
   ``removing_replicas``) and into the context; replicas of an earlier target that the
   new one drops are stopped and deleted at once;
2. while TRS is not within the ISR: bump the leader epoch (same leader, same ISR) and
   send LeaderAndIsr with RS to every replica of RS, so the new replicas start as
   followers and the leader counts them as assigned; they catch up and the leader adds
   them to the ISR (its ``/isr_change_notification`` brings the controller back here);
3. once TRS is within the ISR: RS = TRS in the context; if the leader is not in TRS (or
   is not live) a new one is elected from TRS and the ISR (leader epoch + 1), else the
   leader epoch is bumped again to tell everyone the smaller replica set; each removed
   replica goes offline (StopReplica, out of the ISR, leader epoch + 1) and is deleted
   (StopReplica with delete); ``/brokers/topics/<t>`` gets RS = TRS with empty AR and RR;
   the partition leaves ``/admin/reassign_partitions``; UpdateMetadata to every broker.

A cancellation (a null target) reassigns back to ORS: the adding replicas are stopped
and deleted and the original assignment is written back. A reassignment in progress is
in ``/brokers/topics/<t>`` (non-empty AR or RR), so a new controller resumes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.cluster.controller.context import (
    ControllerContext,
    LeaderIsr,
    PartitionStateName,
    ReplicaAssignment,
    ReplicaState,
    TopicPartition,
)
from odradek.cluster.controller.partition_state_machine import (
    PartitionStateMachine,
    Strategy,
    read_leadership,
)
from odradek.cluster.controller.replica_state_machine import ReplicaStateMachine
from odradek.cluster.controller.request_batch import RequestBatch
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import TopicAssignment
from odradek.cluster.zk.errors import ControllerMoved, StaleVersion, ZooKeeperError

log = logging.getLogger(__name__)
S = ReplicaState
MAX_CAS_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    error_code: ErrorCode = ErrorCode.none
    message: str | None = None


def validate_replicas(ctx: ControllerContext, tp: TopicPartition, replicas: Sequence[int]) -> (
    ReassignmentResult | None
):
    """Kafka's validateReplicas: INVALID_REPLICA_ASSIGNMENT for an empty list, duplicates,
    negative ids or added replicas on brokers that are not alive."""
    invalid = ErrorCode.invalid_replica_assignment
    if not replicas:
        return ReassignmentResult(
            invalid, "Empty replica list specified in partition reassignment."
        )
    if len(set(replicas)) != len(replicas):
        return ReassignmentResult(
            invalid,
            f"Duplicate replica ids in partition reassignment replica list: {list(replicas)}",
        )
    if any(r < 0 for r in replicas):
        return ReassignmentResult(invalid, f"Invalid broker id in replica list: {list(replicas)}")
    adding = ctx.full_assignment(tp).reassign_to(replicas).adding
    if not set(adding) <= ctx.live_broker_ids:
        return ReassignmentResult(
            invalid,
            f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
            f"live broker list: {sorted(ctx.live_broker_ids)}",
        )
    return None


class Reassignments:
    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkClient,
        batch: RequestBatch,
        partitions: PartitionStateMachine,
        replicas: ReplicaStateMachine,
        resume_deletion: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.partitions = partitions
        self.replicas = replicas
        self.resume_deletion = resume_deletion

    # --- requests -----------------------------------------------------------------

    def alter(
        self, requested: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, ReassignmentResult]:
        """AlterPartitionReassignments (Kafka's processApiPartitionReassignment): a target
        per partition, None to cancel."""
        results: dict[TopicPartition, ReassignmentResult] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in sorted(requested.items()):
            error = None if target is None else validate_replicas(self.ctx, tp, target)
            if error is not None:
                results[tp] = error
                continue
            built = self._build(tp, target)
            if built is None:
                results[tp] = ReassignmentResult(
                    ErrorCode.no_reassignment_in_progress,
                    f"No reassignment in progress for {tp[0]}-{tp[1]}",
                )
            else:
                to_reassign[tp] = built
        # The latest request wins over the legacy znode's (Kafka does the same).
        self._remove_from_zk_reassignment(lambda tp, _replicas: tp in to_reassign)
        results.update(self._trigger(to_reassign))
        return results

    def list(
        self, partitions: set[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the partitions (all when None) being reassigned."""
        wanted = self.ctx.being_reassigned if partitions is None else partitions
        found = {}
        for tp in sorted(wanted):
            assignment = self.ctx.full_assignment(tp)
            if assignment.is_being_reassigned:
                found[tp] = assignment
        return found

    def on_zk_reassignment(self) -> set[TopicPartition]:
        """``/admin/reassign_partitions`` appeared (or a new controller found it): start
        what it asks; partitions that cannot be reassigned leave the znode at once."""
        try:
            requested = self.zk.get_partition_reassignment()
        except ValueError as exc:  # ZNodeDecodeError: not what Kafka's tool writes
            log.error("ignoring /admin/reassign_partitions: %s; deleting it", exc)
            self.zk.delete_partition_reassignment(self.ctx.epoch_zk_version)
            return set()
        if not requested:
            return set()
        results: dict[TopicPartition, ReassignmentResult] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in sorted(requested.items()):
            error = validate_replicas(self.ctx, tp, target)
            built = None if error is not None else self._build(tp, target)
            if built is None:
                results[tp] = error or ReassignmentResult(ErrorCode.no_reassignment_in_progress)
            else:
                to_reassign[tp] = built
        results.update(self._trigger(to_reassign))
        failed = {tp for tp, r in results.items() if r.error_code != ErrorCode.none}
        if failed:
            log.warning(
                "failed reassignments through ZooKeeper: %s",
                {f"{t}-{p}": results[(t, p)].error_code.name for t, p in sorted(failed)},
            )
            self._remove_from_zk_reassignment(lambda tp, _replicas: tp in failed)
        # Partitions that completed at once left the znode in _remove_from_reassigning.
        return set(results) - failed

    def resume(self, should_resume: Callable[[TopicPartition, ReplicaAssignment], bool]) -> None:
        """Kafka's maybeResumeReassignments: run the flow again for these partitions."""
        for tp in sorted(self.ctx.being_reassigned):
            assignment = self.ctx.full_assignment(tp)
            if should_resume(tp, assignment):
                self.on_partition_reassignment(tp, assignment)

    def initialize(self) -> None:
        """After failover: the legacy znode first, then reassignments in progress that
        ``/brokers/topics`` recorded (Kafka's initializePartitionReassignments)."""
        for tp in self.ctx.reassigning:
            self.ctx.being_reassigned.add(tp)
        from_zk = self.on_zk_reassignment()
        self.resume(lambda tp, _assignment: tp not in from_zk)

    def on_isr_change(self, partitions: Sequence[TopicPartition]) -> None:
        """A leader changed the ISR: a reassignment whose target is now in sync completes
        (Kafka's PartitionReassignmentIsrChange)."""
        for tp in partitions:
            if tp not in self.ctx.being_reassigned:
                continue
            assignment = self.ctx.full_assignment(tp)
            if self._is_complete(tp, assignment):
                self.on_partition_reassignment(tp, assignment)

    # --- the flow -----------------------------------------------------------------

    def _build(
        self, tp: TopicPartition, target: Sequence[int] | None
    ) -> ReplicaAssignment | None:
        """Kafka's maybeBuildReassignment: None for a cancellation with nothing to cancel."""
        current = self.ctx.full_assignment(tp)
        if current.is_being_reassigned:
            return current.reassign_to(current.origin if target is None else target)
        return None if target is None else current.reassign_to(target)

    def _trigger(
        self, reassignments: Mapping[TopicPartition, ReplicaAssignment]
    ) -> dict[TopicPartition, ReassignmentResult]:
        results = {}
        for tp, reassignment in sorted(reassignments.items()):
            if tp[0] in self.ctx.topics_to_delete or not self.ctx.assignment.get(tp):
                results[tp] = ReassignmentResult(
                    ErrorCode.unknown_topic_or_partition, "The partition does not exist."
                )
                continue
            try:
                self.on_partition_reassignment(tp, reassignment)
            except ControllerMoved:
                raise
            except (ZooKeeperError, ValueError) as exc:
                log.error("reassignment of %s-%d failed: %s", tp[0], tp[1], exc)
                results[tp] = ReassignmentResult(ErrorCode.unknown_server_error, str(exc))
                continue
            results[tp] = ReassignmentResult()
        return results

    def on_partition_reassignment(
        self, tp: TopicPartition, reassignment: ReplicaAssignment
    ) -> None:
        self._update_current(tp, reassignment)
        if not self._is_complete(tp, reassignment):
            log.info(
                "reassignment of %s-%d: replicas %s, adding %s, removing %s; waiting for %s "
                "to join the ISR",
                tp[0],
                tp[1],
                list(reassignment.replicas),
                list(reassignment.adding),
                list(reassignment.removing),
                list(reassignment.target),
            )
            self._bump_leader_epoch_and_send(tp, reassignment)  # A1
            new = [
                (tp, r)
                for r in reassignment.adding
                if self.ctx.replica_state(tp, r) is S.NON_EXISTENT
            ]
            self.replicas.handle_state_changes(new, S.NEW)  # A2
            return
        # B1: the added replicas are online.
        self.replicas.handle_state_changes([(tp, r) for r in reassignment.adding], S.ONLINE)
        completed = ReplicaAssignment(reassignment.target)
        self.ctx.set_full_assignment(tp, completed)  # B2
        self._move_leader_if_required(tp, completed)  # B3
        self._stop_removed_replicas(tp, reassignment.removing)  # B4, B5
        self._write_assignment(tp)  # B6
        self._remove_from_reassigning(tp, completed)  # B7
        self.batch.add_update_metadata(self.ctx.live_broker_ids, [tp])  # B8
        log.info(
            "reassignment of %s-%d completed: replicas %s", tp[0], tp[1], list(completed.replicas)
        )
        self.resume_deletion()

    def _update_current(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        current = self.ctx.full_assignment(tp)
        if current != reassignment:
            self.ctx.set_full_assignment(tp, reassignment)
            self._write_assignment(tp)
            unneeded = [r for r in current.replicas if r not in reassignment.replicas]
            if unneeded:
                self._stop_removed_replicas(tp, unneeded)
        self.ctx.being_reassigned.add(tp)

    def _is_complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        if not assignment.is_being_reassigned:
            return True
        state = read_leadership(self.zk, self.ctx, tp)
        return state is not None and set(assignment.target) <= set(state.isr)

    def _bump_leader_epoch_and_send(
        self, tp: TopicPartition, assignment: ReplicaAssignment
    ) -> None:
        """Kafka's updateLeaderEpochAndSendRequest: leader epoch + 1 with the same leader
        and ISR, so every replica (and the leader) learns the new replica set."""
        state = self._bump_leader_epoch(tp)
        if state is None:
            return
        self.batch.add_leader_and_isr(assignment.origin, tp, state)
        self.batch.add_leader_and_isr(assignment.adding, tp, state, is_new=True)

    def _bump_leader_epoch(self, tp: TopicPartition) -> LeaderIsr | None:
        for _attempt in range(MAX_CAS_ATTEMPTS):
            current = read_leadership(self.zk, self.ctx, tp)
            if current is None:
                log.error("partition %s-%d has no state znode; cannot bump its epoch", *tp)
                return None
            proposed = LeaderIsr(
                current.leader,
                current.leader_epoch + 1,
                current.isr,
                self.ctx.epoch,
                current.zk_version,
                current.leader_recovery_state,
            )
            try:
                version = self.zk.update_partition_state(
                    tp[0], tp[1], proposed.znode(), current.zk_version, self.ctx.epoch_zk_version
                )
            except StaleVersion:
                continue  # the leader changed the ISR meanwhile
            state = LeaderIsr(
                proposed.leader,
                proposed.leader_epoch,
                proposed.isr,
                proposed.controller_epoch,
                version,
                proposed.leader_recovery_state,
            )
            self.ctx.leadership[tp] = state
            return state
        log.error("partition %s-%d: gave up bumping the leader epoch", *tp)
        return None

    def _move_leader_if_required(self, tp: TopicPartition, completed: ReplicaAssignment) -> None:
        state = self.ctx.leadership.get(tp)
        leader = state.leader if state is not None else -1
        if leader in completed.replicas and self.ctx.is_live(leader):
            # Same leader, fewer replicas: a new epoch carries the new replica set.
            self._bump_leader_epoch_and_send(tp, completed)
            return
        # The leader is being removed (or is not live): elect one from TRS and the ISR.
        if self.ctx.partition_state(tp) is PartitionStateName.NEW:
            return
        self.partitions.handle_state_changes([tp], PartitionStateName.ONLINE, Strategy.REASSIGN)

    def _stop_removed_replicas(self, tp: TopicPartition, removed: Sequence[int]) -> None:
        """Offline first (StopReplica, out of the ISR), then deleted (StopReplica with
        delete), as Kafka's stopRemovedReplicasOfReassignedPartition."""
        replicas = [(tp, r) for r in removed]
        for replica in replicas:
            if self.ctx.replica_state(*replica) is S.NON_EXISTENT:
                self.ctx.replica_states[replica] = S.NEW  # never started: may go offline
        self.replicas.handle_state_changes(replicas, S.OFFLINE)
        self.replicas.handle_state_changes(replicas, S.DELETION_STARTED)
        self.replicas.handle_state_changes(replicas, S.DELETION_SUCCESSFUL)
        self.replicas.handle_state_changes(replicas, S.NON_EXISTENT)

    def _write_assignment(self, tp: TopicPartition) -> None:
        """``/brokers/topics/<t>`` with every partition's full assignment."""
        topic = tp[0]
        partitions = self.ctx.partitions_of(topic)
        full = {p: self.ctx.full_assignment((topic, p)) for _t, p in partitions}
        assignment = TopicAssignment(
            {p: a.replicas for p, a in full.items()},
            self.ctx.topic_ids.get(topic),
            {p: a.adding for p, a in full.items() if a.adding},
            {p: a.removing for p, a in full.items() if a.removing},
        )
        self.zk.write_topic_assignment(topic, assignment, self.ctx.epoch_zk_version)

    def _remove_from_reassigning(self, tp: TopicPartition, completed: ReplicaAssignment) -> None:
        self._remove_from_zk_reassignment(
            lambda other, replicas: other == tp and tuple(replicas) == completed.replicas
        )
        self.ctx.being_reassigned.discard(tp)

    def _remove_from_zk_reassignment(
        self, should_remove: Callable[[TopicPartition, tuple[int, ...]], bool]
    ) -> None:
        """Kafka's maybeRemoveFromZkReassignment: the legacy znode keeps what is still to
        do; it is deleted when nothing is left."""
        try:
            requested = self.zk.get_partition_reassignment()
        except ValueError:
            return  # malformed: on_zk_reassignment deletes it
        if not requested:
            return
        remaining = {tp: r for tp, r in requested.items() if not should_remove(tp, r)}
        if remaining == requested:
            return
        if remaining:
            self.zk.set_partition_reassignment(remaining, self.ctx.epoch_zk_version)
        else:
            log.info("no partitions left to reassign: deleting /admin/reassign_partitions")
            self.zk.delete_partition_reassignment(self.ctx.epoch_zk_version)
