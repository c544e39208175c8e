"""The controller's requests to a broker: LeaderAndIsr, UpdateMetadata, StopReplica, and
ControlledShutdown (a broker's request to the controller), as Kafka's ReplicaManager and
KafkaApis serve them in ZooKeeper mode.

Fencing, as Kafka:
- a request whose broker epoch is older than this broker's registration is refused with
  STALE_BROKER_EPOCH (it was meant for an earlier incarnation of this broker);
- a request from a controller whose epoch is older than the newest one seen is refused
  with STALE_CONTROLLER_EPOCH (a deposed controller);
- per partition, LeaderAndIsr applies only a leader epoch newer than the one held (an
  equal or older one gets STALE_CONTROLLER_EPOCH), StopReplica only one at least as new
  (else FENCED_LEADER_EPOCH).

The handlers take their request objects (:mod:`odradek.protocol.interbroker`) and build
the response of the same version, so they are tested by calling them directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import typing
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.metadata_cache import MetadataCache, StaleControllerEpoch
from odradek.broker.partition import (
    EPOCH_DURING_DELETE,
    NO_EPOCH,
    ReplicaStates,
    Role,
)
from odradek.broker.replica_fetcher import ReplicaFetcherManager
from odradek.broker.replica_manager import ReplicaManager
from odradek.protocol import interbroker
from odradek.storage.config import LogConfig

log = logging.getLogger(__name__)

# (topic, partition, leader epoch): a partition whose leadership changed here.
LeadershipChange = tuple[str, int, int]
# (became leader, stopped leading): called after every LeaderAndIsr and StopReplica with
# the partitions it changed (Kafka's onLeadershipChange / StopReplica callbacks, which
# move the group and transaction coordinators).
LeadershipListener = Callable[[list[LeadershipChange], list[LeadershipChange]], None]
# (broker_id, broker_epoch) -> (error code, partitions still led by the broker)
ControlledShutdownHook = Callable[[int, int], Awaitable[tuple[int, list[tuple[str, int]]]]]


class InterBrokerHandlers:
    """The four handlers over a narrow context: the replica manager (logs), the metadata
    cache, the per-partition replica states, and how to get a topic's log config (a
    coroutine: in cluster mode it reads ``/config/topics/<t>`` off the event loop)."""

    def __init__(
        self,
        broker_id: int,
        *,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        replica_states: ReplicaStates,
        log_config: Callable[[str], Awaitable[LogConfig]],
        broker_epoch: Callable[[], int] = lambda: -1,
        on_partitions_removed: Callable[[list[tuple[str, int]]], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.cache = metadata_cache
        self.states = replica_states
        self.log_config = log_config
        self.broker_epoch = broker_epoch
        self.on_partitions_removed = on_partitions_removed
        # Set by the server on the controller's broker: forwards ControlledShutdown to
        # the active controller; None (or the hook answering NOT_CONTROLLER) elsewhere.
        self.controlled_shutdown_hook: ControlledShutdownHook | None = None
        # Cluster mode: the replica fetchers a follower partition is handed to.
        self.fetchers: ReplicaFetcherManager | None = None
        self.leadership_listeners: list[LeadershipListener] = []

    def handlers(self) -> dict[int, Callable[[Any, Any], Awaitable[Any]]]:
        return {
            interbroker.LEADER_AND_ISR: self.handle_leader_and_isr,
            interbroker.STOP_REPLICA: self.handle_stop_replica,
            interbroker.UPDATE_METADATA: self.handle_update_metadata,
            interbroker.CONTROLLED_SHUTDOWN: self.handle_controlled_shutdown,
        }

    # --- fencing ------------------------------------------------------------------------

    def _fence(self, request: Any) -> ErrorCode | None:
        epoch_in_request = int(getattr(request, "broker_epoch", -1))
        # -1: an old request version without the field, which Kafka lets through.
        if epoch_in_request != -1 and epoch_in_request < self.broker_epoch():
            return ErrorCode.stale_broker_epoch
        if int(request.controller_epoch) < self.cache.controller_epoch:
            return ErrorCode.stale_controller_epoch
        return None

    # --- LeaderAndIsr -------------------------------------------------------------------

    async def handle_leader_and_isr(self, _ctx: Any, request: Any) -> Any:
        version = type(request).__version__
        states = list(_leader_and_isr_states(request))
        fenced = self._fence(request)
        if fenced is not None:
            log.warning(
                "ignoring LeaderAndIsr from controller %d epoch %d: %s",
                request.controller_id,
                request.controller_epoch,
                fenced.name,
            )
            errors = [(topic, topic_id, s.partition_index, fenced) for topic, topic_id, s in states]
            return _leader_and_isr_response(version, fenced, errors)
        controller_epoch = int(request.controller_epoch)
        self.cache.controller_epoch = controller_epoch
        if self.fetchers is not None:
            for live in getattr(request, "live_leaders", ()):
                self.fetchers.leader_addresses[int(live.broker_id)] = (
                    live.host_name,
                    int(live.port),
                )
        errors = []
        elected: list[LeadershipChange] = []
        resigned: list[LeadershipChange] = []
        # A new topic's LeaderAndIsr names all its partitions here: read each topic's
        # config once, and create the absent logs in one batch on a thread (one fsync of
        # the data directory), instead of a ZooKeeper read and a log each on the loop.
        configs = await self._topic_configs({topic for topic, _, _ in states})
        await self._create_absent_logs(states, configs)
        for topic, topic_id, state in states:
            code = await self._become_leader_or_follower(
                topic, topic_id, state, controller_epoch, configs[topic]
            )
            errors.append((topic, topic_id, int(state.partition_index), code))
            if code == ErrorCode.none:
                change = (topic, int(state.partition_index), int(state.leader_epoch))
                (elected if int(state.leader) == self.broker_id else resigned).append(change)
        self._leadership_changed(elected, resigned)
        return _leader_and_isr_response(version, ErrorCode.none, errors)

    def _leadership_changed(
        self, elected: list[LeadershipChange], resigned: list[LeadershipChange]
    ) -> None:
        if not elected and not resigned:
            return
        for listener in self.leadership_listeners:
            try:
                listener(elected, resigned)
            except Exception:  # one listener's bug must not fail the controller's request
                log.exception("leadership listener failed")

    async def _topic_configs(self, topics: set[str]) -> dict[str, LogConfig | None]:
        """Each topic's log config; None where it could not be read."""
        configs: dict[str, LogConfig | None] = {}
        for topic in sorted(topics):
            try:
                configs[topic] = await self.log_config(topic)
            except Exception as exc:  # ZooKeeper unreachable, a bad stored config
                log.error("no log config for %s: %s", topic, exc)
                configs[topic] = None
        return configs

    async def _create_absent_logs(
        self, states: list[tuple[str, uuid.UUID | None, Any]], configs: dict[str, LogConfig | None]
    ) -> None:
        """Create, in one batch, the logs of partitions this request makes us host."""
        specs = []
        for topic, topic_id, state in states:
            index = int(state.partition_index)
            config = configs[topic]
            held = self.states.get(topic, index)
            if (
                config is None
                or self.broker_id not in [int(r) for r in state.replicas]
                or int(state.leader_epoch) <= (held.leader_epoch if held is not None else -1)
                or self.replica_manager.partition(topic, index) is not None
            ):
                continue  # refused below, or hosted already
            specs.append((topic, index, config, topic_id))
        if not specs:
            return
        try:
            await asyncio.to_thread(self.replica_manager.log_manager.create_logs, specs)
        except OSError as exc:  # each partition then fails on its own below
            log.error("cannot create %d logs: %s", len(specs), exc)

    async def _become_leader_or_follower(
        self,
        topic: str,
        topic_id: uuid.UUID | None,
        state: Any,
        controller_epoch: int,
        config: LogConfig | None,
    ) -> ErrorCode:
        index = int(state.partition_index)
        requested = int(state.leader_epoch)
        held = self.states.get(topic, index)
        current = held.leader_epoch if held is not None else -1
        if requested <= current:
            log.info(
                "ignoring LeaderAndIsr for %s-%d: leader epoch %d is not newer than %d",
                topic,
                index,
                requested,
                current,
            )
            return ErrorCode.stale_controller_epoch
        replicas = [int(r) for r in state.replicas]
        if self.broker_id not in replicas:
            return ErrorCode.unknown_topic_or_partition
        leader = int(state.leader)
        isr = [int(r) for r in state.isr]
        if config is None:
            return ErrorCode.kafka_storage_error
        try:
            if leader == self.broker_id:
                if self.fetchers is not None:
                    self.fetchers.remove_partition(topic, index)
                partition = self.replica_manager.become_leader(
                    topic,
                    index,
                    config,
                    leader_epoch=requested,
                    topic_id=topic_id,
                    isr=isr,
                    replicas=replicas,
                )
                # The new epoch starts at the log end (Kafka's makeLeader), so followers
                # truncating by leader epoch find where this leader's writes begin.
                # Written without fsync (this runs on the event loop, once per partition
                # of the request): the log's next flush syncs it before the recovery
                # point passes data of this epoch, and recovery after a power cut
                # rebuilds entries from the batches (see leader_epoch.py). An entry with
                # no batch behind it yet describes nothing a follower could ask about.
                log_ = partition.log
                log_.leader_epoch_cache.assign(requested, log_.log_end_offset, sync=False)
                role = Role.LEADER
            else:
                self.replica_manager.become_follower(
                    topic,
                    index,
                    config,
                    leader=leader,
                    leader_epoch=requested,
                    topic_id=topic_id,
                    replicas=replicas,
                )
                if self.fetchers is not None:
                    if leader >= 0:
                        # Kafka's makeFollower: truncate by leader epoch, then fetch.
                        self.fetchers.add_partition(topic, index, leader, requested)
                    else:
                        self.fetchers.remove_partition(topic, index)
                role = Role.FOLLOWER
        except OSError as exc:
            log.error("cannot host %s-%d: %s", topic, index, exc)
            return ErrorCode.kafka_storage_error
        self.states.get_or_create(topic, index).apply(
            role,
            leader=leader,
            leader_epoch=requested,
            isr=[int(r) for r in state.isr],
            replicas=replicas,
            zk_version=int(state.partition_epoch),
            controller_epoch=controller_epoch,
            adding=[int(r) for r in getattr(state, "adding_replicas", ())],
            removing=[int(r) for r in getattr(state, "removing_replicas", ())],
        )
        log.info("%s-%d: %s at leader epoch %d", topic, index, role.value, requested)
        return ErrorCode.none

    # --- UpdateMetadata -----------------------------------------------------------------

    async def handle_update_metadata(self, _ctx: Any, request: Any) -> Any:
        cls = interbroker.response_class(interbroker.UPDATE_METADATA, type(request).__version__)
        fenced = self._fence(request)
        if fenced is not None:
            return cls(error_code=fenced)
        try:
            deleted = self.cache.update(request)
        except StaleControllerEpoch:
            return cls(error_code=ErrorCode.stale_controller_epoch)
        if deleted and self.on_partitions_removed is not None:
            self.on_partitions_removed(deleted)
        return cls(error_code=ErrorCode.none)

    # --- StopReplica --------------------------------------------------------------------

    async def handle_stop_replica(self, _ctx: Any, request: Any) -> Any:
        version = type(request).__version__
        targets = list(_stop_replica_targets(request))
        fenced = self._fence(request)
        if fenced is not None:
            errors = [(topic, index, fenced) for topic, index, _epoch, _delete in targets]
            return _stop_replica_response(version, fenced, errors)
        self.cache.controller_epoch = int(request.controller_epoch)
        errors = []
        stopped: list[LeadershipChange] = []
        for topic, index, epoch, delete in targets:
            code = self._stop_replica(topic, index, epoch, delete)
            errors.append((topic, index, code))
            if code == ErrorCode.none:
                stopped.append((topic, index, epoch))
        # A stopped replica leads nothing here any more, deleted or not.
        self._leadership_changed([], stopped)
        return _stop_replica_response(version, ErrorCode.none, errors)

    def _stop_replica(self, topic: str, index: int, epoch: int, delete: bool) -> ErrorCode:
        held = self.states.get(topic, index)
        if (
            held is not None
            and epoch not in (EPOCH_DURING_DELETE, NO_EPOCH)
            and epoch < held.leader_epoch
        ):
            return ErrorCode.fenced_leader_epoch
        self.states.remove(topic, index)
        if self.fetchers is not None:
            self.fetchers.remove_partition(topic, index)
        try:
            hosted = self.replica_manager.partition(topic, index) is not None
            if hosted or delete:
                # delete=True also removes a log left over from before a restart.
                self.replica_manager.remove_partition(topic, index, delete=delete)
        except OSError as exc:
            log.error("cannot stop %s-%d: %s", topic, index, exc)
            return ErrorCode.kafka_storage_error
        log.info("%s-%d: replica stopped%s", topic, index, " and deleted" if delete else "")
        return ErrorCode.none

    # --- ControlledShutdown -------------------------------------------------------------

    async def handle_controlled_shutdown(self, _ctx: Any, request: Any) -> Any:
        cls = interbroker.response_class(interbroker.CONTROLLED_SHUTDOWN, type(request).__version__)
        hook = self.controlled_shutdown_hook
        if hook is None:
            return cls(error_code=ErrorCode.not_controller, remaining_partitions=())
        code, remaining = await hook(
            int(request.broker_id), int(getattr(request, "broker_epoch", -1))
        )
        element = _element_type(cls, "remaining_partitions")
        return cls(
            error_code=ErrorCode(code),
            remaining_partitions=tuple(
                element(topic_name=topic, partition_index=_i32(index)) for topic, index in remaining
            ),
        )


# --- request readers (every version) ------------------------------------------------


def _leader_and_isr_states(request: Any) -> Iterable[tuple[str, uuid.UUID | None, Any]]:
    ungrouped = getattr(request, "ungrouped_partition_states", None)
    if ungrouped is not None:  # v0-1
        for state in ungrouped:
            yield state.topic_name, None, state
        return
    for topic_state in request.topic_states:  # v2+
        topic_id = getattr(topic_state, "topic_id", None)
        if topic_id is not None and topic_id.int == 0:
            topic_id = None
        for state in topic_state.partition_states:
            yield topic_state.topic_name, topic_id, state


def _stop_replica_targets(request: Any) -> Iterable[tuple[str, int, int, bool]]:
    """(topic, partition, leader epoch, delete) of every partition named."""
    if getattr(request, "topic_states", None) is not None:  # v3+
        for topic_state in request.topic_states:
            for p in topic_state.partition_states:
                yield (
                    topic_state.topic_name,
                    int(p.partition_index),
                    int(p.leader_epoch),
                    bool(p.delete_partition),
                )
        return
    delete = bool(request.delete_partitions)
    if getattr(request, "topics", None) is not None:  # v1-2
        for topic in request.topics:
            for index in topic.partition_indexes:
                yield topic.name, int(index), NO_EPOCH, delete
        return
    for p in request.ungrouped_partitions:  # v0
        yield p.topic_name, int(p.partition_index), NO_EPOCH, delete


# --- response builders ----------------------------------------------------------------


def _element_type(cls: type, field_name: str) -> type:
    """The element class of a ``tuple[Element, ...]`` field of a generated dataclass."""
    for f in dataclasses.fields(cls):
        if f.name == field_name:
            annotation = f.type
            args = typing.get_args(annotation)
            while args and typing.get_origin(annotation) is not tuple:
                annotation = args[0]
                args = typing.get_args(annotation)
            return args[0]
    raise LookupError(f"{cls.__name__} has no field {field_name}")


def _i32(value: int) -> Any:
    from kio.static.primitive import i32

    return i32(value)


def _has(cls: type, name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(cls))


def _leader_and_isr_response(
    version: int,
    error: ErrorCode,
    errors: list[tuple[str, uuid.UUID | None, int, ErrorCode]],
) -> Any:
    cls = interbroker.response_class(interbroker.LEADER_AND_ISR, version)
    if _has(cls, "partition_errors"):  # v0-4: one flat list
        element = _element_type(cls, "partition_errors")
        return cls(
            error_code=error,
            partition_errors=tuple(
                element(topic_name=topic, partition_index=_i32(index), error_code=code)
                for topic, _tid, index, code in errors
            ),
        )
    topic_cls = _element_type(cls, "topics")
    partition_cls = _element_type(topic_cls, "partition_errors")
    by_topic: dict[uuid.UUID | None, list[Any]] = {}
    for _topic, topic_id, index, code in errors:
        by_topic.setdefault(topic_id, []).append(
            partition_cls(partition_index=_i32(index), error_code=code)
        )
    return cls(
        error_code=error,
        topics=tuple(
            topic_cls(topic_id=topic_id or uuid.UUID(int=0), partition_errors=tuple(parts))
            for topic_id, parts in by_topic.items()
        ),
    )


def _stop_replica_response(
    version: int, error: ErrorCode, errors: list[tuple[str, int, ErrorCode]]
) -> Any:
    cls = interbroker.response_class(interbroker.STOP_REPLICA, version)
    element = _element_type(cls, "partition_errors")
    return cls(
        error_code=error,
        partition_errors=tuple(
            element(topic_name=topic, partition_index=_i32(index), error_code=code)
            for topic, index, code in errors
        ),
    )
