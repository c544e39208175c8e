"""Topic deletion, as Kafka's TopicDeletionManager.

A topic named under ``/admin/delete_topics`` is marked for deletion; every broker gets
UpdateMetadata with leader -2 (LeaderDuringDelete) for its partitions, then each replica
goes OfflineReplica -> ReplicaDeletionStarted (StopReplica with delete). A replica whose
broker answers without error is ReplicaDeletionSuccessful; one whose broker is down or
answers an error is ReplicaDeletionIneligible and is retried when the broker is back.
Once every replica of the topic is deleted, the controller removes
``/brokers/topics/<t>``, ``/config/topics/<t>`` and ``/admin/delete_topics/<t>``.
"""

from __future__ import annotations

import logging
from typing import Any

from odradek.cluster.controller.context import ControllerContext, PartitionStateName, ReplicaState
from odradek.cluster.controller.partition_state_machine import PartitionStateMachine
from odradek.cluster.controller.replica_state_machine import ReplicaStateMachine
from odradek.cluster.controller.request_batch import RequestBatch
from odradek.cluster.zk.client import ZkClient

log = logging.getLogger(__name__)
S = ReplicaState


class TopicDeletionManager:
    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkClient,
        batch: RequestBatch,
        partitions: PartitionStateMachine,
        replicas: ReplicaStateMachine,
        enabled: bool,
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.partitions = partitions
        self.replicas = replicas
        self.enabled = enabled  # delete.topic.enable
        self.completed: list[str] = []  # topics whose znodes were removed (for watches)

    def on_deletion_requests(self) -> None:
        requested = set(self.zk.get_topic_deletions())
        for topic in sorted(requested - self.ctx.topics()):
            log.info("deletion of unknown topic %s requested; dropping the request", topic)
            self.zk.delete_topic_deletion(topic, self.ctx.epoch_zk_version)
        if not self.enabled:
            # Kafka removes the requests when delete.topic.enable is false.
            for topic in sorted(requested & self.ctx.topics()):
                log.info("delete.topic.enable is false; ignoring deletion of %s", topic)
                self.zk.delete_topic_deletion(topic, self.ctx.epoch_zk_version)
            return
        new = (requested & self.ctx.topics()) - self.ctx.topics_to_delete
        if not new:
            return
        self.ctx.topics_to_delete |= new
        partitions = [tp for topic in sorted(new) for tp in self.ctx.partitions_of(topic)]
        self.batch.add_update_metadata(self.ctx.live_broker_ids, partitions)
        self.resume()

    def resume(self) -> None:
        """Start (or retry) deleting every replica of the topics marked for deletion."""
        for topic in sorted(self.ctx.topics_to_delete):
            if any(tp[0] == topic for tp in self.ctx.being_reassigned):
                continue  # ineligible while a reassignment runs; resumed when it completes
            for tp in self.ctx.partitions_of(topic):
                for broker in self.ctx.assignment[tp]:
                    state = self.ctx.replica_state(tp, broker)
                    if not self.ctx.is_live(broker):
                        if state in (S.OFFLINE, S.DELETION_STARTED):
                            self.replicas.handle_state_changes(
                                [(tp, broker)], S.DELETION_INELIGIBLE
                            )
                        elif state in (S.ONLINE, S.NEW):
                            self.replicas.handle_state_changes([(tp, broker)], S.OFFLINE)
                            self.replicas.handle_state_changes(
                                [(tp, broker)], S.DELETION_INELIGIBLE
                            )
                        continue
                    if state in (S.ONLINE, S.NEW, S.DELETION_INELIGIBLE, S.NON_EXISTENT):
                        if state is S.NON_EXISTENT:
                            self.ctx.replica_states[(tp, broker)] = S.OFFLINE
                        else:
                            self.replicas.handle_state_changes([(tp, broker)], S.OFFLINE)
                    if self.ctx.replica_state(tp, broker) is S.OFFLINE:
                        self.replicas.handle_state_changes([(tp, broker)], S.DELETION_STARTED)
            self._complete_if_done(topic)

    def on_stop_replica_response(self, broker: int, response: Any) -> None:
        failed = int(getattr(response, "error_code", 0)) != 0
        for error in getattr(response, "partition_errors", ()):
            tp = (error.topic_name, int(error.partition_index))
            if tp[0] not in self.ctx.topics_to_delete:
                continue
            if self.ctx.replica_state(tp, broker) is not S.DELETION_STARTED:
                continue
            ok = not failed and int(error.error_code) == 0
            target = S.DELETION_SUCCESSFUL if ok else S.DELETION_INELIGIBLE
            self.replicas.handle_state_changes([(tp, broker)], target)
        for topic in sorted(self.ctx.topics_to_delete):
            self._complete_if_done(topic)

    def _complete_if_done(self, topic: str) -> None:
        replicas = [
            (tp, broker)
            for tp in self.ctx.partitions_of(topic)
            for broker in self.ctx.assignment[tp]
        ]
        if any(self.ctx.replica_state(tp, b) is not S.DELETION_SUCCESSFUL for tp, b in replicas):
            return
        self.replicas.handle_state_changes(replicas, S.NON_EXISTENT)
        partitions = self.ctx.partitions_of(topic)
        self.partitions.handle_state_changes(partitions, PartitionStateName.OFFLINE)
        self.partitions.handle_state_changes(partitions, PartitionStateName.NON_EXISTENT)
        self.zk.delete_topic_znodes(topic, self.ctx.epoch_zk_version)
        self.ctx.remove_topic(topic)
        self.completed.append(topic)
        log.info("topic %s deleted", topic)
