"""Kafka's ZooKeeper data, typed: a small store shaped like Kafka's KafkaZkClient.

Brokers register under ``/brokers/ids``, topics and their partition state live under
``/brokers/topics``, the controller is elected through ``/controller`` and fenced by
``/controller_epoch``, configs and their change notifications under ``/config``. Partition
state changes only by compare-and-set on the znode version. Blocking behaviour, threads
and the controller-epoch fencing are described in :mod:`odradek.cluster.zk.session`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import ZnodeStat

from odradek.cluster.zk import paths
from odradek.cluster.zk.codecs import (
    BrokerRegistration,
    ControllerRegistration,
    PartitionState,
    ProducerIdBlock,
    TopicAssignment,
    TopicPartition,
    ZNodeDecodeError,
    decode_cluster_id,
    decode_config_change,
    decode_config_entity,
    decode_controller_epoch,
    decode_isr_change,
    decode_preferred_replica_election,
    decode_reassignment,
    encode_cluster_id,
    encode_config_change,
    encode_config_entity,
    encode_controller_epoch,
    encode_isr_change,
    encode_preferred_replica_election,
    encode_reassignment,
    random_kafka_uuid,
)
from odradek.cluster.zk.errors import (
    BrokerIdAlreadyRegistered,
    ControllerMoved,
    NodeExists,
    NoNode,
)
from odradek.cluster.zk.session import DEFAULT_SESSION_TIMEOUT_MS, ZkSession

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_SESSION_TIMEOUT_MS", "ControllerEpoch", "ZkClient"]
DEFAULT_RESERVED_BROKER_MAX_ID = 1000  # reserved.broker.max.id
INITIAL_CONTROLLER_EPOCH = 0  # KafkaController.InitialControllerEpoch
# Requests in flight at once when writing many znodes (create_partition_states).
PIPELINE_CHUNK = 500


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """What a won election gives: the epoch and the ``/controller_epoch`` znode version
    that fences every later controller write."""

    epoch: int
    zk_version: int


class ZkClient(ZkSession):
    """Kafka's ZooKeeper data over one session (see the module docstring)."""

    def create_top_level_paths(self) -> None:
        """The persistent paths Kafka creates at startup (ZkData.PersistentZkPaths)."""
        for path in paths.PERSISTENT_PATHS:
            self._call(self._zk.ensure_path, path)

    # --- brokers ------------------------------------------------------------------

    def register_broker(self, registration: BrokerRegistration) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; return the broker epoch (the
        znode's creation zxid, as Kafka). Raise BrokerIdAlreadyRegistered when another
        session holds it: a second broker with the same broker.id, or this broker's
        previous session that ZooKeeper has not expired yet."""
        path = paths.broker_id(registration.broker_id)
        try:
            self._call(self._zk.create, path, registration.encode(), ephemeral=True, makepath=True)
        except NodeExistsError:
            pass  # ours if an earlier attempt got through before a connection loss
        found = self._get(path)
        if found is None:
            raise NoNode(path)  # vanished at once: the owning session just ended
        _data, stat = found
        if stat.ephemeralOwner != self.session_id:
            raise BrokerIdAlreadyRegistered(registration.broker_id, stat.ephemeralOwner)
        log.info(
            "registered broker %d at %s, broker epoch %d", registration.broker_id, path, stat.czxid
        )
        return stat.czxid

    def get_broker(self, broker: int) -> BrokerRegistration | None:
        found = self._get(paths.broker_id(broker))
        return None if found is None else BrokerRegistration.decode(broker, found[0])

    def get_broker_with_epoch(self, broker: int) -> tuple[BrokerRegistration, int] | None:
        """The registration and the broker epoch (creation zxid of the ephemeral znode),
        which the controller puts in every request it sends that broker."""
        found = self._get(paths.broker_id(broker))
        if found is None:
            return None
        return BrokerRegistration.decode(broker, found[0]), found[1].czxid

    def get_broker_ids(self) -> list[int]:
        return sorted(int(name) for name in self._children(paths.BROKER_IDS) if name.isdigit())

    def generate_broker_id(
        self, reserved_broker_max_id: int = DEFAULT_RESERVED_BROKER_MAX_ID
    ) -> int:
        """A fresh broker id: each unconditional write bumps ``/brokers/seqid``'s znode
        version by one (starting at 1), and the id is that version plus
        ``reserved.broker.max.id``, as Kafka's generateBrokerSequenceId."""
        try:
            stat = self._call(self._zk.set, paths.BROKER_SEQUENCE_ID, b"", -1)
        except NoNodeError:
            self._call(self._zk.ensure_path, paths.BROKER_SEQUENCE_ID)
            stat = self._call(self._zk.set, paths.BROKER_SEQUENCE_ID, b"", -1)
        return stat.version + reserved_broker_max_id

    # --- cluster id ---------------------------------------------------------------

    def get_cluster_id(self) -> str | None:
        found = self._get(paths.CLUSTER_ID)
        return None if found is None else decode_cluster_id(found[0])

    def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        """The cluster id in ``/cluster/id``; the first broker to ask creates it (a
        random Kafka Uuid unless ``proposed``), every later one reads the same value."""
        proposed = proposed or random_kafka_uuid()
        try:
            self._call(
                self._zk.create, paths.CLUSTER_ID, encode_cluster_id(proposed), makepath=True
            )
            return proposed
        except NodeExistsError:
            cluster_id = self.get_cluster_id()
            if cluster_id is None:
                raise NoNode(paths.CLUSTER_ID) from None
            return cluster_id

    # --- topics and partition state -----------------------------------------------

    def get_topics(self) -> list[str]:
        return sorted(self._children(paths.TOPICS))

    def create_topic(
        self, topic: str, assignment: TopicAssignment, config: Mapping[str, str] | None = None
    ) -> None:
        """Write the topic's config, then its assignment (AdminZkClient order: a
        controller that sees the assignment can already read the config). Raise
        NodeExists if the topic exists, before touching its config."""
        if self._call(self._zk.exists, paths.topic(topic)) is not None:
            raise NodeExists(paths.topic(topic))
        self.set_entity_config(paths.CONFIG_TYPE_TOPIC, topic, config or {})
        try:
            self._call(self._zk.create, paths.topic(topic), assignment.encode(), makepath=True)
        except NodeExistsError:
            raise NodeExists(paths.topic(topic)) from None

    def get_topic_assignment(self, topic: str) -> tuple[TopicAssignment, int] | None:
        found = self._get(paths.topic(topic))
        if found is None:
            return None
        return TopicAssignment.decode(topic, found[0]), found[1].version

    def set_topic_assignment(
        self,
        topic: str,
        assignment: TopicAssignment,
        expected_version: int,
        controller_epoch_version: int | None = None,
    ) -> int:
        """Compare-and-set the assignment; return the new znode version."""
        return self._conditional_set(
            paths.topic(topic), assignment.encode(), expected_version, controller_epoch_version
        )

    def create_partition_state(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        controller_epoch_version: int | None = None,
    ) -> int:
        """Create ``.../partitions/<p>/state`` (version 0, returned). Raise NodeExists if it
        is already there, ControllerMoved if the epoch check fails."""
        self._call(self._zk.ensure_path, paths.topic_partition(topic, partition))
        path = paths.partition_state(topic, partition)
        results = self._multi(
            controller_epoch_version, lambda txn: txn.create(path, state.encode())
        )
        if isinstance(results[-1], NodeExistsError):
            raise NodeExists(path)
        if isinstance(results[-1], Exception):
            raise results[-1]
        return 0

    def create_partition_states(
        self,
        states: list[tuple[str, int, PartitionState]],
        controller_epoch_version: int | None = None,
    ) -> list[NodeExists | None]:
        """``create_partition_state`` for many partitions, pipelined as Kafka's
        createTopicPartitionStatesRaw: all requests are sent, then all answers awaited
        (one round trip per chunk instead of two per partition). Per partition, None
        (created) or NodeExists; ControllerMoved if the epoch check fails."""
        results: list[NodeExists | None] = []
        for start in range(0, len(states), PIPELINE_CHUNK):
            chunk = states[start : start + PIPELINE_CHUNK]
            results.extend(self._call(self._create_states, chunk, controller_epoch_version))
        return results

    def _create_states(
        self, states: list[tuple[str, int, PartitionState]], controller_epoch_version: int | None
    ) -> list[NodeExists | None]:
        parents = [
            self._zk.create_async(paths.topic_partition(topic, partition), makepath=True)
            for topic, partition, _ in states
        ]
        for pending in parents:
            try:
                pending.get()
            except NodeExistsError:
                pass  # written by the topic's creation or an earlier attempt
        commits = []
        for topic, partition, state in states:
            txn = self._zk.transaction()
            if controller_epoch_version is not None:
                txn.check(paths.CONTROLLER_EPOCH, controller_epoch_version)
            txn.create(paths.partition_state(topic, partition), state.encode())
            commits.append(txn.commit_async())
        outcomes: list[NodeExists | None] = []
        for (topic, partition, _), pending in zip(states, commits, strict=True):
            results = pending.get()
            if controller_epoch_version is not None:
                check, results = results[0], results[1:]
                if isinstance(check, Exception) and not isinstance(check, RolledBackError):
                    raise ControllerMoved(
                        f"controller epoch znode is no longer at version "
                        f"{controller_epoch_version}"
                    )
            if isinstance(results[-1], NodeExistsError):
                outcomes.append(NodeExists(paths.partition_state(topic, partition)))
            elif isinstance(results[-1], Exception):
                raise results[-1]
            else:
                outcomes.append(None)
        return outcomes

    def get_partition_state(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        """The partition's state and its znode version, the version to compare-and-set."""
        path = paths.partition_state(topic, partition)
        found = self._get(path)
        if found is None:
            return None
        return PartitionState.decode(found[0], f"partition state {path}"), found[1].version

    def update_partition_state(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        controller_epoch_version: int | None = None,
    ) -> int:
        """Compare-and-set the partition state; return the new znode version.

        The only way partition state changes: a writer that read an older version gets
        StaleVersion and must re-read, so a leader's ISR change and the controller's
        leader election can never silently overwrite each other."""
        return self._conditional_set(
            paths.partition_state(topic, partition),
            state.encode(),
            expected_version,
            controller_epoch_version,
        )

    def request_topic_deletion(self, topic: str) -> None:
        """Mark ``topic`` for deletion (``/admin/delete_topics/<topic>``), as Kafka's admin does."""
        try:
            self._call(self._zk.create, paths.delete_topic(topic), b"", makepath=True)
        except NodeExistsError:
            pass  # already marked

    def get_topic_deletions(self) -> list[str]:
        return sorted(self._children(paths.DELETE_TOPICS))

    def delete_topic_znodes(self, topic: str, controller_epoch_version: int) -> None:
        """The controller's last step of a topic deletion (Kafka's TopicDeletionManager):
        the assignment with its partition states, the config, then the deletion request.
        Each removal is fenced by the controller epoch."""
        for path in (paths.topic(topic), paths.topic_config(topic), paths.delete_topic(topic)):
            self._delete_fenced(path, controller_epoch_version, recursive=True)

    def delete_topic_deletion(self, topic: str, controller_epoch_version: int) -> None:
        """Drop a deletion request the controller will not act on (the topic is unknown)."""
        self._delete_fenced(paths.delete_topic(topic), controller_epoch_version)

    def _delete_fenced(
        self, path: str, controller_epoch_version: int, recursive: bool = False
    ) -> None:
        children = self._children(path) if recursive else []
        for child in children:
            self._delete_fenced(f"{path}/{child}", controller_epoch_version, recursive=True)
        results = self._multi(controller_epoch_version, lambda txn: txn.delete(path))
        if isinstance(results[-1], Exception) and not isinstance(results[-1], NoNodeError):
            raise results[-1]

    # --- controller ---------------------------------------------------------------

    def get_controller(self) -> ControllerRegistration | None:
        found = self._get(paths.CONTROLLER)
        return None if found is None else ControllerRegistration.decode(found[0])

    def get_controller_epoch(self) -> ControllerEpoch | None:
        found = self._get(paths.CONTROLLER_EPOCH)
        if found is None:
            return None
        return ControllerEpoch(decode_controller_epoch(found[0]), found[1].version)

    def register_controller(self, broker_id: int) -> ControllerEpoch:
        """Try to become controller: in one transaction create the ephemeral
        ``/controller`` and bump ``/controller_epoch`` by compare-and-set (created at 0
        first if absent, so the first controller's epoch is 1). Return the new epoch and
        its znode version; raise ControllerMoved if another broker got there first."""
        current = self.get_controller_epoch()
        if current is None:
            try:
                self._call(
                    self._zk.create,
                    paths.CONTROLLER_EPOCH,
                    encode_controller_epoch(INITIAL_CONTROLLER_EPOCH),
                    makepath=True,
                )
                current = ControllerEpoch(INITIAL_CONTROLLER_EPOCH, 0)
            except NodeExistsError:
                current = self.get_controller_epoch()
                if current is None:
                    raise ControllerMoved("/controller_epoch vanished during election") from None
        new_epoch = current.epoch + 1
        registration = ControllerRegistration(broker_id, int(time.time() * 1000))

        def ops(txn: Any) -> None:
            txn.create(paths.CONTROLLER, registration.encode(), ephemeral=True)
            txn.set_data(
                paths.CONTROLLER_EPOCH, encode_controller_epoch(new_epoch), current.zk_version
            )

        results = self._multi(None, ops)
        if not any(isinstance(r, Exception) for r in results):
            return ControllerEpoch(new_epoch, results[1].version)
        # The transaction may have got through before a connection loss and been retried:
        # it is ours if /controller names us and the epoch is the one we wrote.
        holder = self.get_controller()
        epoch = self.get_controller_epoch()
        if (
            holder is not None
            and holder.broker_id == broker_id
            and epoch is not None
            and epoch.epoch == new_epoch
        ):
            return epoch
        raise ControllerMoved(
            f"broker {broker_id} lost the controller election "
            f"(controller: {holder.broker_id if holder else 'none'})"
        )

    def resign_controller(self, controller_epoch_version: int) -> None:
        """Delete ``/controller`` if this epoch still holds it (Kafka's deleteController);
        ControllerMoved if another controller has been elected since."""
        results = self._multi(controller_epoch_version, lambda txn: txn.delete(paths.CONTROLLER))
        outcome = results[-1]
        if isinstance(outcome, Exception) and not isinstance(outcome, NoNodeError):
            raise outcome  # already gone (NoNode) is what resigning wants

    def watch_controller(
        self, callback: Callable[[ControllerRegistration | None], None]
    ) -> Callable[[], None]:
        """Call ``callback(registration or None)`` now and on every change of
        ``/controller`` (kazoo keeps the watch across reconnects and new sessions).
        Returns a function that stops the watch."""
        stopped = threading.Event()

        def changed(data: bytes | None, _stat: ZnodeStat | None) -> bool | None:
            if stopped.is_set():
                return False
            registration = None
            if data is not None:
                try:
                    registration = ControllerRegistration.decode(data)
                except ZNodeDecodeError as exc:
                    log.error("%s", exc)
            callback(registration)
            return None

        self._watch(self._zk.DataWatch, paths.CONTROLLER, changed)
        return stopped.set

    # --- configs and notifications ------------------------------------------------

    def get_entity_config(self, entity_type: str, entity_name: str) -> dict[str, str]:
        """The overrides of one entity (``{}`` when it has none, as Kafka)."""
        path = paths.config_entity(entity_type, entity_name)
        found = self._get(path)
        return {} if found is None else decode_config_entity(found[0], f"config {path}")

    def set_entity_config(
        self, entity_type: str, entity_name: str, config: Mapping[str, str]
    ) -> None:
        path = paths.config_entity(entity_type, entity_name)
        data = encode_config_entity(config)
        try:
            self._call(self._zk.set, path, data, -1)
        except NoNodeError:
            try:
                self._call(self._zk.create, path, data, makepath=True)
            except NodeExistsError:
                self._call(self._zk.set, path, data, -1)

    def change_entity_config(
        self, entity_type: str, entity_name: str, config: Mapping[str, str]
    ) -> str:
        """Write the overrides, then announce them to every broker with a sequential
        ``/config/changes/config_change_<seq>`` (Kafka's AdminZkClient.changeConfigs).
        Returns the notification's path."""
        self.set_entity_config(entity_type, entity_name, config)
        return self.create_config_change_notification(f"{entity_type}/{entity_name}")

    def create_config_change_notification(self, entity_path: str) -> str:
        created = self._call(
            self._zk.create,
            paths.config_change_prefix(),
            encode_config_change(entity_path),
            sequence=True,
            makepath=True,
        )
        return str(created)

    def get_config_changes(self) -> list[tuple[int, str]]:
        """Pending notifications as ``(sequence, entity_path)``, oldest first."""
        out = []
        for name in self._children(paths.CONFIG_CHANGES):
            if not name.startswith(paths.CONFIG_CHANGE_PREFIX):
                continue
            found = self._get(f"{paths.CONFIG_CHANGES}/{name}")
            if found is not None:
                sequence = paths.sequence_number(name, paths.CONFIG_CHANGE_PREFIX)
                out.append((sequence, decode_config_change(found[0])))
        return sorted(out)

    def watch_config_changes(self, callback: Callable[[list[str]], None]) -> Callable[[], None]:
        """``callback(child names)`` now and whenever ``/config/changes`` gains or loses one."""
        self._call(self._zk.ensure_path, paths.CONFIG_CHANGES)
        stopped = threading.Event()

        def changed(children: list[str]) -> bool | None:
            if stopped.is_set():
                return False
            callback(sorted(children))
            return None

        self._watch(self._zk.ChildrenWatch, paths.CONFIG_CHANGES, changed)
        return stopped.set

    def create_isr_change_notification(self, partitions: set[TopicPartition]) -> str:
        """Tell the controller that these partitions' ISR changed (a leader's write)."""
        created = self._call(
            self._zk.create,
            paths.isr_change_prefix(),
            encode_isr_change(partitions),
            sequence=True,
            makepath=True,
        )
        return str(created)

    def delete_isr_change_notifications(
        self, sequences: list[int], controller_epoch_version: int
    ) -> None:
        for sequence in sequences:
            self._delete_fenced(paths.isr_change(sequence), controller_epoch_version)

    def get_preferred_replica_election(self) -> set[TopicPartition]:
        found = self._get(paths.PREFERRED_REPLICA_ELECTION)
        return set() if found is None else decode_preferred_replica_election(found[0])

    def request_preferred_replica_election(self, partitions: set[TopicPartition]) -> None:
        """What Kafka's old ``kafka-preferred-replica-election`` tool writes."""
        self._call(
            self._zk.create,
            paths.PREFERRED_REPLICA_ELECTION,
            encode_preferred_replica_election(partitions),
            makepath=True,
        )

    def delete_preferred_replica_election(self, controller_epoch_version: int) -> None:
        self._delete_fenced(paths.PREFERRED_REPLICA_ELECTION, controller_epoch_version)

    def watch_children(
        self, path: str, callback: Callable[[list[str]], None]
    ) -> Callable[[], None]:
        """``callback(child names)`` now and on every change of ``path``'s children
        (the path is created if missing). Runs on kazoo's thread: return quickly."""
        self._call(self._zk.ensure_path, path)
        stopped = threading.Event()

        def changed(children: list[str]) -> bool | None:
            if stopped.is_set():
                return False
            callback(sorted(children))
            return None

        self._watch(self._zk.ChildrenWatch, path, changed)
        return stopped.set

    def watch_exists(self, path: str, callback: Callable[[bool], None]) -> Callable[[], None]:
        """``callback(exists)`` now and whenever ``path`` is created, changed or deleted."""
        stopped = threading.Event()

        def changed(data: bytes | None, _stat: ZnodeStat | None) -> bool | None:
            if stopped.is_set():
                return False
            callback(data is not None)
            return None

        self._watch(self._zk.DataWatch, path, changed)
        return stopped.set

    # --- partition reassignment -------------------------------------------------------

    def write_topic_assignment(
        self, topic: str, assignment: TopicAssignment, controller_epoch_version: int
    ) -> None:
        """The controller's unconditional write of a topic's full assignment (Kafka's
        setTopicAssignment with MatchAnyVersion), fenced by the controller epoch."""
        results = self._multi(
            controller_epoch_version,
            lambda txn: txn.set_data(paths.topic(topic), assignment.encode(), -1),
        )
        if isinstance(results[0], NoNodeError):
            raise NoNode(paths.topic(topic))
        if isinstance(results[0], Exception):
            raise results[0]

    def get_partition_reassignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        """``/admin/reassign_partitions`` (the legacy tool's request); empty when absent."""
        found = self._get(paths.REASSIGN_PARTITIONS)
        return {} if found is None else decode_reassignment(found[0])

    def create_partition_reassignment(
        self, reassignment: Mapping[TopicPartition, tuple[int, ...]]
    ) -> None:
        """What Kafka's old ``kafka-reassign-partitions --zookeeper`` wrote; NodeExists
        while an earlier one is still in progress."""
        try:
            self._call(
                self._zk.create,
                paths.REASSIGN_PARTITIONS,
                encode_reassignment(reassignment),
                makepath=True,
            )
        except NodeExistsError:
            raise NodeExists(paths.REASSIGN_PARTITIONS) from None

    def set_partition_reassignment(
        self,
        reassignment: Mapping[TopicPartition, tuple[int, ...]],
        controller_epoch_version: int,
    ) -> None:
        """The controller rewrites the znode with the partitions still to do."""
        data = encode_reassignment(reassignment)
        results = self._multi(
            controller_epoch_version,
            lambda txn: txn.set_data(paths.REASSIGN_PARTITIONS, data, -1),
        )
        if isinstance(results[0], NoNodeError):
            self._multi(
                controller_epoch_version,
                lambda txn: txn.create(paths.REASSIGN_PARTITIONS, data),
            )
        elif isinstance(results[0], Exception):
            raise results[0]

    def delete_partition_reassignment(self, controller_epoch_version: int) -> None:
        self._delete_fenced(paths.REASSIGN_PARTITIONS, controller_epoch_version)

    def get_isr_change_notifications(self) -> list[tuple[int, set[TopicPartition]]]:
        out = []
        for name in self._children(paths.ISR_CHANGE_NOTIFICATION):
            if not name.startswith(paths.ISR_CHANGE_PREFIX):
                continue
            found = self._get(f"{paths.ISR_CHANGE_NOTIFICATION}/{name}")
            if found is not None:
                sequence = paths.sequence_number(name, paths.ISR_CHANGE_PREFIX)
                out.append((sequence, decode_isr_change(found[0])))
        return sorted(out, key=lambda item: item[0])

    # --- producer id blocks -------------------------------------------------------

    def get_producer_id_block(self) -> tuple[ProducerIdBlock | None, int]:
        """The last block handed out (None before the first) and the znode version to
        compare-and-set; the znode is created empty if missing (Kafka creates it at
        startup among the persistent paths)."""
        found = self._get(paths.LATEST_PRODUCER_ID_BLOCK)
        if found is None:
            self._call(self._zk.ensure_path, paths.LATEST_PRODUCER_ID_BLOCK)
            found = self._get(paths.LATEST_PRODUCER_ID_BLOCK)
            if found is None:
                raise NoNode(paths.LATEST_PRODUCER_ID_BLOCK)
        data, stat = found
        return (ProducerIdBlock.decode(data) if data else None), stat.version

    def set_producer_id_block(self, block: ProducerIdBlock, expected_version: int) -> int:
        """Claim ``block`` if nobody claimed another since ``expected_version`` was read
        (StaleVersion otherwise); the new znode version."""
        return self._conditional_set(
            paths.LATEST_PRODUCER_ID_BLOCK, block.encode(), expected_version, None
        )
