"""The controller: Kafka's KafkaController for a ZooKeeper-coordinated cluster.

Every broker runs one :class:`Controller`; the one elected through ``/controller``
(see :class:`~odradek.cluster.zk.election.ControllerElector`) is active. Its work is a
sequence of events (``event_manager``): on election it loads the cluster from
ZooKeeper, tells every broker (UpdateMetadata, LeaderAndIsr) and brings partitions
online; then it reacts to brokers coming and going, topics created and deleted,
leaders' ISR changes, controlled shutdowns and preferred-leader elections. ZooKeeper
work runs in a worker thread (the store is synchronous) while the event task waits, so
only one thread touches the context at a time; the requests an event produced are sent
when it is done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster.controller import event_manager as ev
from odradek.cluster.controller.channel import ControllerChannelManager
from odradek.cluster.controller.context import (
    ControllerContext,
    LeaderIsr,
    PartitionStateName,
    ReplicaState,
    TopicPartition,
)
from odradek.cluster.controller.leadership import (
    ControlledShutdownResult,
    ElectionResult,
    LeadershipMoves,
)
from odradek.cluster.controller.partition_state_machine import PartitionStateMachine, Strategy
from odradek.cluster.controller.reassignment import ReassignmentResult, Reassignments
from odradek.cluster.controller.replica_state_machine import ReplicaStateMachine
from odradek.cluster.controller.request_batch import RequestBatch
from odradek.cluster.controller.topic_deletion import TopicDeletionManager
from odradek.cluster.peer import Connector, open_plaintext
from odradek.cluster.zk import paths
from odradek.cluster.zk.client import ControllerEpoch, ZkClient
from odradek.cluster.zk.election import ControllerElector
from odradek.cluster.zk.errors import ControllerMoved, ZooKeeperError

log = logging.getLogger(__name__)

ONLINE = PartitionStateName.ONLINE
OFFLINE = PartitionStateName.OFFLINE


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() == "true"


def _all_failed(
    partitions: Iterable[TopicPartition], code: ErrorCode
) -> dict[TopicPartition, ElectionResult]:
    return {tp: ElectionResult(code) for tp in partitions}


def _failed(event: ev.ControllerEvent, code: ErrorCode) -> Any:
    """The answer an event that waits for one gets when it could not be processed."""
    if isinstance(event, ev.ControlledShutdown):
        return ControlledShutdownResult(code)
    if isinstance(event, ev.ReplicaLeaderElection):
        return _all_failed(event.partitions, code)
    if isinstance(event, ev.AlterPartitionReassignments | ev.ListPartitionReassignments):
        return code  # a top-level error, as Kafka's Right(ApiError)
    return None


def _answer(event: ev.ControllerEvent, result: Any) -> None:
    reply = getattr(event, "reply", None)
    if reply is not None and not reply.done():
        reply.set_result(result)


class Controller:
    def __init__(
        self,
        zk: ZkClient,
        broker_id: int,
        config: Mapping[str, Any],
        connector: Connector = open_plaintext,
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.config = config
        self.unclean_default = _bool(config.get("unclean.leader.election.enable", False))
        self.auto_rebalance = _bool(config.get("auto.leader.rebalance.enable", True))
        self.imbalance_interval_s = float(
            config.get("leader.imbalance.check.interval.seconds", 300)
        )
        self.imbalance_percentage = float(config.get("leader.imbalance.per.broker.percentage", 10))
        self.ctx = ControllerContext()
        self.batch = RequestBatch(broker_id)
        # LeaderAndIsr names each leader's inter-broker endpoint (Kafka's liveLeaders).
        self.batch.listener = config.get("inter.broker.listener.name") or None
        self.batch.stop_replica_callback = self._stop_replica_answered
        self.partitions = PartitionStateMachine(self.ctx, zk, self.batch, self._unclean_enabled)
        self.replicas = ReplicaStateMachine(self.ctx, zk, self.batch)
        self.deletion = TopicDeletionManager(
            self.ctx,
            zk,
            self.batch,
            self.partitions,
            self.replicas,
            _bool(config.get("delete.topic.enable", True)),
        )
        self.leadership = LeadershipMoves(
            self.ctx, zk, self.partitions, self.replicas, self.imbalance_percentage
        )
        self.reassignments = Reassignments(
            self.ctx, zk, self.batch, self.partitions, self.replicas, self.deletion.resume
        )
        self.channels = ControllerChannelManager(broker_id, config, connector)
        self.events = ev.ControllerEventManager(self._process)
        self._elector: ControllerElector | None = None
        self._active: ControllerEpoch | None = None
        self._generation = 0  # bumped on every failover/resignation: stale watches drop
        self._watch_stoppers: list[Callable[[], None]] = []
        self._topic_watches: dict[str, Callable[[], None]] = {}
        self._channel_epochs: dict[int, int] = {}
        self._rebalance_task: asyncio.Task[None] | None = None

    # --- lifecycle ------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._active is not None

    @property
    def epoch(self) -> int | None:
        return None if self._active is None else self._active.epoch

    async def start(self) -> None:
        """Take part in controller elections; become active when elected."""
        self.events.start()
        self._elector = ControllerElector(self.zk, self.broker_id, self._elected, self._resigned)
        self.zk.on_session_lost(lambda: self.events.put_threadsafe(ev.Expire()))
        await asyncio.to_thread(self._elector.start)

    async def stop(self) -> None:
        """Stop taking part; resign (delete ``/controller``) if active."""
        if self._elector is not None:
            await asyncio.to_thread(self._elector.stop)
        await self.events.stop()
        await self._resign()

    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> ControlledShutdownResult:
        """What the broker's ControlledShutdown handler calls (on the controller broker).
        NOT_CONTROLLER when this broker is not the active controller."""
        if not self.is_active:
            return ControlledShutdownResult(ErrorCode.not_controller)
        reply: asyncio.Future[ControlledShutdownResult] = asyncio.get_running_loop().create_future()
        self.events.put(ev.ControlledShutdown(broker_id, broker_epoch, reply))
        try:
            return await reply
        except RuntimeError:
            return ControlledShutdownResult(ErrorCode.unknown_server_error)

    async def elect_leaders(
        self, partitions: set[TopicPartition], election_type: int
    ) -> dict[TopicPartition, ElectionResult]:
        """What the broker's ElectLeaders handler calls: per partition an error or the
        elected leader (Kafka's KafkaController.electLeaders). Every partition answers
        NOT_CONTROLLER when this broker is not the active controller."""
        if not self.is_active:
            return _all_failed(partitions, ErrorCode.not_controller)
        reply: asyncio.Future[dict[TopicPartition, ElectionResult]] = (
            asyncio.get_running_loop().create_future()
        )
        self.events.put(ev.ReplicaLeaderElection(frozenset(partitions), election_type, reply))
        try:
            return await reply
        except RuntimeError:
            return _all_failed(partitions, ErrorCode.unknown_server_error)

    async def alter_partition_reassignments(
        self, reassignments: dict[TopicPartition, tuple[int, ...] | None]
    ) -> dict[TopicPartition, ReassignmentResult] | ErrorCode:
        """AlterPartitionReassignments (Kafka's KafkaController.alterPartitionReassignments):
        per partition a result, or a top-level error (NOT_CONTROLLER on any broker that is
        not the active controller)."""
        if not self.is_active:
            return ErrorCode.not_controller
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        items = tuple(sorted(reassignments.items()))
        self.events.put(ev.AlterPartitionReassignments(items, reply))
        try:
            return await reply
        except RuntimeError:
            return ErrorCode.unknown_server_error

    async def list_partition_reassignments(
        self, partitions: set[TopicPartition] | None
    ) -> dict[TopicPartition, Any] | ErrorCode:
        """ListPartitionReassignments: the full assignment (replicas, adding, removing) of
        each partition being reassigned, or a top-level error."""
        if not self.is_active:
            return ErrorCode.not_controller
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        wanted = None if partitions is None else frozenset(partitions)
        self.events.put(ev.ListPartitionReassignments(wanted, reply))
        try:
            return await reply
        except RuntimeError:
            return ErrorCode.unknown_server_error

    # kazoo threads ------------------------------------------------------------------

    def _elected(self, epoch: ControllerEpoch) -> None:
        self.events.put_threadsafe(ev.Elected(epoch))

    def _resigned(self) -> None:
        self._active = None  # stop acting at once; the event clears the state
        self.events.put_threadsafe(ev.ControllerChange())

    def _watch_event(self, event: ev.ControllerEvent) -> Callable[..., None]:
        generation = self._generation

        def fire(*_args: Any) -> None:
            if generation == self._generation:
                self.events.put_threadsafe(event)

        return fire

    def _reassign_znode_watch(self) -> Callable[[bool], None]:
        """Fires on creation of ``/admin/reassign_partitions`` only (Kafka's
        PartitionReassignmentHandler.handleCreation): the controller's own rewrites of the
        znode as partitions complete must not start them again."""
        fire = self._watch_event(ev.ZkPartitionReassignment())
        existed = [True]  # failover reads the znode itself; later creations fire

        def changed(exists: bool) -> None:
            if exists and not existed[0]:
                fire()
            existed[0] = exists

        return changed

    def _stop_replica_answered(self, broker: int, response: Any) -> None:
        self.events.put(ev.TopicDeletionStopReplicaResponse(broker, response))

    # --- the event task -------------------------------------------------------------

    async def _process(self, event: ev.ControllerEvent) -> None:
        if isinstance(event, ev.Elected):
            if self._elector is not None and self._elector.epoch == event.epoch:
                await self._failover(event.epoch)
            return  # else the seat was lost again before this event ran
        if isinstance(event, ev.ControllerChange | ev.Expire):
            if self._elector is None or not self._elector.is_controller:
                await self._resign()
            return
        if not self.is_active:
            _answer(event, _failed(event, ErrorCode.not_controller))
            return
        try:
            result = await asyncio.to_thread(self._handle, event)
        except ControllerMoved as exc:
            log.warning("controller %d: %s; resigning", self.broker_id, exc)
            await self._resign()
            result = _failed(event, ErrorCode.not_controller)
        except ZooKeeperError as exc:
            log.error("controller %d: %s failed: %s", self.broker_id, type(event).__name__, exc)
            result = _failed(event, ErrorCode.unknown_server_error)
        await self._flush()
        _answer(event, result)

    async def _failover(self, epoch: ControllerEpoch) -> None:
        await self._resign()
        self._active = epoch
        self._generation += 1
        self.ctx.epoch, self.ctx.epoch_zk_version = epoch.epoch, epoch.zk_version
        log.info("controller %d: active with epoch %d", self.broker_id, epoch.epoch)
        try:
            await asyncio.to_thread(self._on_controller_failover)
        except ControllerMoved as exc:
            log.warning("controller %d: %s during failover", self.broker_id, exc)
            await self._resign()
            return
        await self._flush()
        if self.auto_rebalance and self._rebalance_task is None:
            self._rebalance_task = asyncio.create_task(self._rebalance_timer())

    async def _resign(self) -> None:
        self._active = None
        self._generation += 1
        for stop in self._watch_stoppers + list(self._topic_watches.values()):
            stop()
        self._watch_stoppers.clear()
        self._topic_watches.clear()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        await self.channels.close()
        self._channel_epochs.clear()
        self.batch.requests(self.ctx)  # drop anything unsent
        self.ctx.clear()

    async def _flush(self) -> None:
        """Channels follow the live brokers; then the batch goes out."""
        for broker in list(self.channels.brokers):
            if self.ctx.broker_epochs.get(broker) != self._channel_epochs.get(broker):
                await self.channels.remove_broker(broker)  # dead, or restarted
                self._channel_epochs.pop(broker, None)
        for broker, registration in sorted(self.ctx.live_brokers.items()):
            if broker not in self.channels.brokers:
                self.channels.add_broker(registration)
                self._channel_epochs[broker] = self.ctx.broker_epochs[broker]
        if self._active is None:
            return
        for request in self.batch.requests(self.ctx):
            self.channels.send(request)

    async def _rebalance_timer(self) -> None:
        while True:
            await asyncio.sleep(self.imbalance_interval_s)
            self.events.put(ev.AutoPreferredReplicaLeaderElection())

    # --- event handlers (worker thread) ---------------------------------------------

    def _handle(self, event: ev.ControllerEvent) -> Any:
        if isinstance(event, ev.BrokerChange):
            self._on_broker_change()
        elif isinstance(event, ev.TopicChange):
            self._on_topic_change()
        elif isinstance(event, ev.PartitionModifications):
            self._on_partition_modifications(event.topic)
        elif isinstance(event, ev.TopicDeletion):
            self.deletion.on_deletion_requests()
        elif isinstance(event, ev.TopicDeletionStopReplicaResponse):
            self.deletion.on_stop_replica_response(event.broker, event.response)
        elif isinstance(event, ev.IsrChangeNotification):
            self._on_isr_change()
        elif isinstance(event, ev.PreferredReplicaElection):
            self.leadership.on_preferred_election_request()
        elif isinstance(event, ev.AutoPreferredReplicaLeaderElection):
            self.leadership.check_leader_imbalance()
        elif isinstance(event, ev.ControlledShutdown):
            return self.leadership.controlled_shutdown(event.broker_id, event.broker_epoch)
        elif isinstance(event, ev.ReplicaLeaderElection):
            result = self.leadership.elect_leaders(set(event.partitions), event.election_type)
            self._forget_deleted_topics()
            return result
        elif isinstance(event, ev.ZkPartitionReassignment):
            self.reassignments.on_zk_reassignment()
        elif isinstance(event, ev.AlterPartitionReassignments):
            return self.reassignments.alter(dict(event.reassignments))
        elif isinstance(event, ev.ListPartitionReassignments):
            wanted = None if event.partitions is None else set(event.partitions)
            return self.reassignments.list(wanted)
        self._forget_deleted_topics()
        return None

    def _on_controller_failover(self) -> None:
        watch = self._watch_event
        self._watch_stoppers = [
            self.zk.watch_children(paths.BROKER_IDS, watch(ev.BrokerChange())),
            self.zk.watch_children(paths.TOPICS, watch(ev.TopicChange())),
            self.zk.watch_children(paths.DELETE_TOPICS, watch(ev.TopicDeletion())),
            self.zk.watch_children(
                paths.ISR_CHANGE_NOTIFICATION, watch(ev.IsrChangeNotification())
            ),
            self.zk.watch_exists(
                paths.PREFERRED_REPLICA_ELECTION, watch(ev.PreferredReplicaElection())
            ),
            self.zk.watch_exists(paths.REASSIGN_PARTITIONS, self._reassign_znode_watch()),
        ]
        for broker in self.zk.get_broker_ids():
            self._load_broker(broker)
        for topic in self.zk.get_topics():
            self._load_topic(topic)
        for tp in self.ctx.all_partitions():
            found = self.zk.get_partition_state(*tp)
            if found is not None:
                self.ctx.leadership[tp] = LeaderIsr.of(*found)
        self.ctx.topics_to_delete = set(self.zk.get_topic_deletions()) & self.ctx.topics()
        # Every live broker learns the whole cluster first (Kafka's onControllerFailover).
        self.batch.add_update_metadata(self.ctx.live_broker_ids, self.ctx.all_partitions())
        self.replicas.startup()
        self.partitions.startup()
        self.reassignments.initialize()
        self.deletion.on_deletion_requests()
        self.deletion.resume()
        self._forget_deleted_topics()

    def _load_broker(self, broker: int) -> bool:
        found = self.zk.get_broker_with_epoch(broker)
        if found is None:
            return False
        self.ctx.live_brokers[broker], self.ctx.broker_epochs[broker] = found
        return True

    def _load_topic(self, topic: str, only_new: bool = False) -> list[TopicPartition]:
        """Read ``/brokers/topics/<t>`` into the context; ``only_new`` keeps the partitions
        already known (Kafka's processPartitionModifications: the controller itself writes
        that znode during reassignments)."""
        found = self.zk.get_topic_assignment(topic)
        if found is None:
            return []
        assignment, _version = found
        known = set(self.ctx.partitions_of(topic))
        partitions = {
            p: r
            for p, r in assignment.partitions.items()
            if not only_new or (topic, p) not in known
        }
        self.ctx.add_topic(topic, assignment.topic_id, partitions)
        for p in partitions:
            adding = tuple(assignment.adding_replicas.get(p, ()))
            removing = tuple(assignment.removing_replicas.get(p, ()))
            if adding or removing:
                self.ctx.reassigning[(topic, p)] = (adding, removing)
        if topic not in self._topic_watches:
            self._topic_watches[topic] = self.zk.watch_exists(
                paths.topic(topic), self._watch_event(ev.PartitionModifications(topic))
            )
        return sorted(set(self.ctx.partitions_of(topic)) - known)

    def _forget_deleted_topics(self) -> None:
        for topic in self.deletion.completed:
            stop = self._topic_watches.pop(topic, None)
            if stop is not None:
                stop()
        self.deletion.completed.clear()

    # brokers --------------------------------------------------------------------

    def _on_broker_change(self) -> None:
        registered = set(self.zk.get_broker_ids())
        known = self.ctx.live_broker_ids
        dead = known - registered
        new: set[int] = set()
        bounced: set[int] = set()
        for broker in registered:
            previous_epoch = self.ctx.broker_epochs.get(broker)
            found = self.zk.get_broker_with_epoch(broker)
            if found is None:  # gone between the listing and the read
                if broker in known:
                    dead.add(broker)
                continue
            if previous_epoch is None:
                new.add(broker)
            elif found[1] != previous_epoch:
                bounced.add(broker)  # restarted within one event: fail it, then start it
            self.ctx.live_brokers[broker], self.ctx.broker_epochs[broker] = found
        for broker in dead:
            self.ctx.live_brokers.pop(broker, None)
            self.ctx.broker_epochs.pop(broker, None)
            self.ctx.shutting_down.discard(broker)
        if dead or bounced:
            log.info("controller %d: brokers failed: %s", self.broker_id, sorted(dead | bounced))
            self._on_broker_failure(dead | bounced)
        if new or bounced:
            log.info("controller %d: brokers started: %s", self.broker_id, sorted(new | bounced))
            self._on_broker_startup(new | bounced)

    def _on_broker_failure(self, failed: set[int]) -> None:
        deleting = self.ctx.topics_to_delete
        led = [
            tp
            for tp, state in self.ctx.leadership.items()
            if state.leader in failed and tp[0] not in deleting
        ]
        self.partitions.handle_state_changes(sorted(led), OFFLINE)
        self.partitions.trigger_online_partition_state_change()
        offline = [
            (tp, broker)
            for tp, replicas in sorted(self.ctx.assignment.items())
            if tp[0] not in deleting
            for broker in replicas
            if broker in failed
        ]
        self.replicas.handle_state_changes(offline, ReplicaState.OFFLINE)
        self.deletion.resume()
        # Every live broker learns who is gone, and which replicas are now offline, even
        # where the ISR did not change (Kafka re-sends the state of every partition with a
        # replica on the dead broker as its replica state machine takes it offline).
        self.batch.add_update_metadata(
            self.ctx.live_broker_ids, sorted({tp for tp, _broker in offline})
        )

    def _on_broker_startup(self, started: set[int]) -> None:
        self.batch.add_update_metadata(self.ctx.live_broker_ids, self.ctx.all_partitions())
        replicas = [
            (tp, broker)
            for tp, assigned in sorted(self.ctx.assignment.items())
            if tp[0] not in self.ctx.topics_to_delete
            for broker in assigned
            if broker in started
        ]
        for tp, broker in replicas:
            if self.ctx.replica_state(tp, broker) is ReplicaState.NON_EXISTENT:
                self.ctx.replica_states[(tp, broker)] = ReplicaState.NEW
        self.replicas.handle_state_changes(replicas, ReplicaState.ONLINE)
        self.partitions.trigger_online_partition_state_change()
        # Reassignments waiting for a broker that is back go on (maybeResumeReassignments).
        self.reassignments.resume(lambda _tp, a: any(b in started for b in a.target))
        self.deletion.resume()

    # topics ---------------------------------------------------------------------

    def _on_topic_change(self) -> None:
        topics = set(self.zk.get_topics())
        for topic in sorted(self.ctx.topics() - topics):
            stop = self._topic_watches.pop(topic, None)
            if stop is not None:
                stop()
            self.ctx.remove_topic(topic)
        added: list[TopicPartition] = []
        for topic in sorted(topics - self.ctx.topics()):
            added += self._load_topic(topic)
        self._on_new_partitions(added)

    def _on_partition_modifications(self, topic: str) -> None:
        if topic not in self.ctx.topics() or topic in self.ctx.topics_to_delete:
            return
        self._on_new_partitions(self._load_topic(topic, only_new=True))

    def _on_new_partitions(self, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        started = time.monotonic()
        replicas = [(tp, b) for tp in partitions for b in self.ctx.assignment[tp]]
        self.partitions.handle_state_changes(partitions, PartitionStateName.NEW)
        self.replicas.handle_state_changes(replicas, ReplicaState.NEW)
        self.partitions.handle_state_changes(partitions, ONLINE, Strategy.OFFLINE)
        self.replicas.handle_state_changes(replicas, ReplicaState.ONLINE)
        log.info(
            "controller %d: %d new partitions online in %.3f s",
            self.broker_id, len(partitions), time.monotonic() - started,
        )  # fmt: skip

    def _on_isr_change(self) -> None:
        notifications = self.zk.get_isr_change_notifications()
        changed = set().union(*(tps for _seq, tps in notifications)) if notifications else set()
        refreshed = []
        for tp in sorted(changed):
            if tp not in self.ctx.assignment:
                continue
            found = self.zk.get_partition_state(*tp)
            if found is not None:
                self.ctx.leadership[tp] = LeaderIsr.of(*found)
                refreshed.append(tp)
        if refreshed:
            self.batch.add_update_metadata(self.ctx.live_broker_ids, refreshed)
            self.reassignments.on_isr_change(refreshed)
        self.zk.delete_isr_change_notifications(
            [seq for seq, _tps in notifications], self.ctx.epoch_zk_version
        )

    def _unclean_enabled(self, topic: str) -> bool:
        overrides = self.zk.get_entity_config(paths.CONFIG_TYPE_TOPIC, topic)
        value = overrides.get("unclean.leader.election.enable")
        return self.unclean_default if value is None else _bool(value)
