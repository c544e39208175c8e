"""The replica manager: the partitions this broker hosts, and appends and reads on them.

Handlers call down into this layer; it calls down into :mod:`odradek.storage`. It owns
what the storage layer does not know about: which partitions are led here, the leader
epoch, the high watermark (what consumers may read), the ISR and ``min.insync.replicas``,
and waking delayed fetches in the purgatory when data arrives.

With one broker the ISR is just the leader, so the high watermark follows the log end
offset on every append; the follower bookkeeping is kept general for replication.

An I/O error while appending or reading takes the partition's log directory offline
(storage/log_dir_failure.py); while it is offline every partition in it answers
KAFKA_STORAGE_ERROR to produce and fetch, as Kafka's offline partitions do.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.broker.partition import FollowerTracker
from odradek.storage.cleaner import LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    DuplicateSequenceError,
    InconsistentTopicIdError,
    OffsetOutOfRangeError,
    StorageError,
)
from odradek.storage.file_region import FileRegion
from odradek.storage.log import Log
from odradek.storage.log_dir_failure import is_io_failure
from odradek.storage.log_manager import LogManager
from odradek.storage.producer_state import ORIGIN_CLIENT

log = logging.getLogger(__name__)

# Kafka error codes used here (names as in the protocol guide).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
KAFKA_STORAGE_ERROR = 56
UNKNOWN_SERVER_ERROR = -1

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@dataclass
class AppendResult:
    error_code: int = NONE
    base_offset: int = -1
    last_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


@dataclass
class ReadResult:
    error_code: int = NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    regions: list[FileRegion] = field(default_factory=list)
    size: int = 0
    aborted_transactions: list[tuple[int, int]] | None = None  # (producer id, first offset)


class Partition:
    """One partition led (or followed) by this broker."""

    def __init__(
        self,
        topic: str,
        index: int,
        log: Log,
        *,
        leader_epoch: int = 0,
        broker_id: int = -1,
        clock_ms: Callable[[], float] = lambda: time.time() * 1000,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch
        self.isr: set[int] = set()
        self.replicas: list[int] = []
        self.leader_id: int = -1
        # The leader's view of its followers (empty on a follower and on the single broker).
        self.followers = FollowerTracker(broker_id, clock_ms)
        # Where this broker's leader epoch began: a follower joins the ISR only once it
        # has reached it (Kafka's leaderEpochStartOffsetOpt).
        self.epoch_start_offset = log.log_end_offset
        # An ISR change being written to ZooKeeper: no second one until it is settled.
        self.isr_update_pending = False
        self._high_watermark = -1
        self._set_high_watermark(log.log_end_offset)

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def advance_high_watermark(self) -> bool:
        """Leader: move the HW to the smallest LEO in the ISR, only ever forward; returns
        True if it moved."""
        new_hw = self.followers.high_watermark(self.isr, self.log.log_end_offset)
        if new_hw > self._high_watermark:
            self._set_high_watermark(new_hw)
            return True
        return False

    def set_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """Follower: the leader's HW from a fetch answer, capped at the local LEO."""
        self._set_high_watermark(min(leader_high_watermark, self.log.log_end_offset))

    def _set_high_watermark(self, value: int) -> None:
        self._high_watermark = value
        # The log bounds retention, DeleteRecords and compaction by it.
        self.log.high_watermark = value

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.log.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return min(first_unstable, self._high_watermark)


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        *,
        on_data_appended: Callable[[str, int], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._on_data_appended = on_data_appended
        self._clock = clock
        # Set by the server when compaction runs: partitions leaving this broker must be
        # taken away from the cleaner before their files go.
        self.cleaner: LogCleaner | None = None
        # Cluster mode: "does the metadata cache know this partition?" A partition known
        # to the cluster but not hosted here answers NOT_LEADER_OR_FOLLOWER, so clients
        # refresh metadata (Kafka's getPartitionOrError); None for the single broker.
        self.known_in_cluster: Callable[[str, int], bool] | None = None
        # Cluster mode: writes an ISR change to ZooKeeper (partition, new ISR, reason) and
        # calls apply_isr_change once it is there; None on the single broker.
        self.isr_writer: Callable[[Partition, set[int], str], None] | None = None

    # Partition lifecycle ------------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def become_leader(
        self,
        topic: str,
        index: int,
        config: LogConfig,
        *,
        leader_epoch: int = 0,
        topic_id: uuid.UUID | None = None,
        isr: list[int] | None = None,
        replicas: list[int] | None = None,
    ) -> Partition:
        """Lead the partition. ``isr``/``replicas`` come from LeaderAndIsr in cluster
        mode; the single broker is alone in both. The high watermark is kept (a new
        leader never moves it back); followers start unknown (Kafka's makeLeader)."""
        partition = self._host(topic, index, config, leader_epoch, topic_id)
        partition.leader_id = self.broker_id
        partition.isr = set(isr) if isr is not None else {self.broker_id}
        partition.replicas = list(replicas) if replicas is not None else [self.broker_id]
        partition.epoch_start_offset = partition.log.log_end_offset
        partition.isr_update_pending = False
        partition.followers.reset(partition.replicas, partition.log.log_end_offset)
        partition.advance_high_watermark()
        return partition

    def become_follower(
        self,
        topic: str,
        index: int,
        config: LogConfig,
        *,
        leader: int,
        leader_epoch: int,
        topic_id: uuid.UUID | None = None,
        replicas: list[int] | None = None,
    ) -> Partition:
        """Host the partition's log as a follower of ``leader`` (cluster mode): appends and
        client reads answer NOT_LEADER_OR_FOLLOWER; the replica fetcher fills the log."""
        partition = self._host(topic, index, config, leader_epoch, topic_id)
        partition.leader_id = leader
        partition.isr = set()
        partition.replicas = list(replicas or [])
        partition.followers.reset([], partition.log.log_end_offset)
        partition.isr_update_pending = False
        if self._on_data_appended is not None:
            # acks=all produces waiting on the former leadership answer NOT_LEADER_OR_FOLLOWER.
            self._on_data_appended(topic, index)
        return partition

    def _host(
        self,
        topic: str,
        index: int,
        config: LogConfig,
        leader_epoch: int,
        topic_id: uuid.UUID | None,
    ) -> Partition:
        existing = self._partitions.get((topic, index))
        if existing is not None:
            existing.leader_epoch = leader_epoch
            return existing
        log_ = self.log_manager.get_or_create_log(topic, index, config)
        log_.update_config(config)
        if topic_id is not None:
            try:
                log_.assign_topic_id(topic_id)
            except InconsistentTopicIdError:
                # Left behind by an earlier topic of the same name (deleted while this
                # broker was down): its data is not this topic's.
                log.warning("%s-%d belongs to a deleted topic; starting it afresh", topic, index)
                self.log_manager.delete_log(topic, index)
                log_ = self.log_manager.get_or_create_log(topic, index, config)
                log_.assign_topic_id(topic_id)
        partition = Partition(
            topic,
            index,
            log_,
            leader_epoch=leader_epoch,
            broker_id=self.broker_id,
            clock_ms=lambda: self._clock() * 1000,
        )
        self._partitions[(topic, index)] = partition
        return partition

    def missing_partition_error(self, topic: str, index: int) -> int:
        """The error for a partition this broker does not host."""
        known = self.known_in_cluster
        if known is not None and known(topic, index):
            return NOT_LEADER_OR_FOLLOWER
        return UNKNOWN_TOPIC_OR_PARTITION

    def remove_partition(self, topic: str, index: int, *, delete: bool) -> None:
        self._partitions.pop((topic, index), None)
        if self.cleaner is not None:
            self.cleaner.abort_and_pause(topic, index)
        try:
            if delete:
                self.log_manager.delete_log(topic, index)
            # Without delete the log stays open in the log manager, as Kafka's stopReplicas
            # leaves it: a later LeaderAndIsr takes the same Log object back from
            # get_or_create_log, and a closed one would refuse every append for good (the
            # fault campaign found a restarted follower stuck on "log ... is closed").
        finally:
            if self.cleaner is not None:
                self.cleaner.remove_partition(topic, index)

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (name, _), partition in self._partitions.items():
            if name == topic:
                partition.log.update_config(config)

    # Produce ---------------------------------------------------------------------

    def append(
        self,
        topic: str,
        index: int,
        records: bytes | bytearray | memoryview,
        *,
        required_acks: int,
        origin: str = ORIGIN_CLIENT,
    ) -> AppendResult:
        partition = self._partitions.get((topic, index))
        if partition is None:
            return AppendResult(error_code=self.missing_partition_error(topic, index))
        offline = self._offline_message()
        if offline is not None:
            return AppendResult(error_code=KAFKA_STORAGE_ERROR, error_message=offline)
        if partition.leader_id != self.broker_id:
            return AppendResult(error_code=NOT_LEADER_OR_FOLLOWER)
        min_insync_replicas = partition.log.config.min_insync_replicas
        if required_acks == -1 and len(partition.isr) < min_insync_replicas:
            return AppendResult(
                error_code=NOT_ENOUGH_REPLICAS,
                error_message=(
                    f"{len(partition.isr)} in-sync replicas, min.insync.replicas is "
                    f"{min_insync_replicas}"
                ),
            )
        log_ = partition.log
        try:
            # The log rewrites base offsets in place. A request's records arrive as a
            # writable slice of the request buffer (nobody reads it after us): use it as
            # it is; anything else gets a mutable copy.
            if not (isinstance(records, memoryview) and not records.readonly):
                records = bytearray(records)
            info = log_.append_as_leader(
                records, leader_epoch=partition.leader_epoch, origin=origin
            )
        except DuplicateSequenceError as dup:
            # Already written: acks=all waits for what the log holds now.
            return AppendResult(
                base_offset=dup.first_offset,
                last_offset=log_.log_end_offset - 1,
                log_append_time_ms=dup.log_append_time_ms,
                log_start_offset=log_.log_start_offset,
            )
        except (StorageError, OSError) as exc:
            if is_io_failure(exc):
                self.log_manager.dir_failure.mark_offline(exc)
                return AppendResult(
                    error_code=KAFKA_STORAGE_ERROR,
                    log_start_offset=log_.log_start_offset,
                    error_message=self._offline_message(),
                )
            if not isinstance(exc, StorageError):
                raise
            return AppendResult(
                error_code=exc.error_code,
                log_start_offset=log_.log_start_offset,
                error_message=str(exc),
            )
        if info.duplicate:
            return AppendResult(
                base_offset=info.first_offset,
                last_offset=info.last_offset,
                log_append_time_ms=info.log_append_time_ms,
                log_start_offset=info.log_start_offset,
            )
        partition.advance_high_watermark()
        if self._on_data_appended is not None:
            self._on_data_appended(topic, index)
        return AppendResult(
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=info.log_start_offset,
        )

    # Fetch -----------------------------------------------------------------------

    def read(
        self,
        topic: str,
        index: int,
        fetch_offset: int,
        max_bytes: int,
        *,
        isolation_level: int = READ_UNCOMMITTED,
        min_one_batch: bool = True,
        replica_id: int = -1,
    ) -> ReadResult:
        """Consumers read up to the high watermark (or LSO); a follower (``replica_id``
        >= 0) reads up to the log end, to replicate what is not yet committed."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return ReadResult(error_code=self.missing_partition_error(topic, index))
        if self.log_manager.dir_failure.offline:
            return ReadResult(error_code=KAFKA_STORAGE_ERROR)
        if partition.leader_id != self.broker_id:
            # A follower (cluster mode) serves no client reads.
            return ReadResult(error_code=NOT_LEADER_OR_FOLLOWER)
        log_ = partition.log
        high_watermark = partition.high_watermark
        last_stable = partition.last_stable_offset
        result = ReadResult(
            high_watermark=high_watermark,
            last_stable_offset=last_stable,
            log_start_offset=log_.log_start_offset,
        )
        upper = last_stable if isolation_level == READ_COMMITTED else high_watermark
        if replica_id >= 0:
            upper = log_.log_end_offset
        if fetch_offset == upper and fetch_offset <= log_.log_end_offset:
            return result  # caught up: nothing to send, not an error
        try:
            info = log_.read(fetch_offset, max_bytes, max_offset=upper, min_one_batch=min_one_batch)
        except OffsetOutOfRangeError:
            result.error_code = OFFSET_OUT_OF_RANGE
            return result
        except (StorageError, OSError) as exc:
            if is_io_failure(exc):
                self.log_manager.dir_failure.mark_offline(exc)
                result.error_code = KAFKA_STORAGE_ERROR
                return result
            if not isinstance(exc, StorageError):
                raise
            result.error_code = exc.error_code
            return result
        result.regions = info.regions
        result.size = info.size
        if isolation_level == READ_COMMITTED and info.size:
            aborted = log_.collect_aborted_transactions(fetch_offset, upper)
            result.aborted_transactions = [(a.producer_id, a.first_offset) for a in aborted]
        elif isolation_level == READ_COMMITTED:
            result.aborted_transactions = []
        return result

    def _offline_message(self) -> str | None:
        failure = self.log_manager.dir_failure
        if not failure.offline:
            return None
        return f"log directory {failure.directory} is offline: {failure.cause}"

    def bytes_available(
        self,
        topic: str,
        index: int,
        fetch_offset: int,
        isolation_level: int,
        *,
        limit: int,
        replica_id: int = -1,
    ) -> int | None:
        """Rough count of readable bytes past fetch_offset; None if the partition is gone.

        Used by delayed fetches to decide whether min_bytes is reached; reading the index
        and segment positions is cheap, and no data is copied.
        """
        partition = self._partitions.get((topic, index))
        if partition is None or self.log_manager.dir_failure.offline:
            return None
        upper = (
            partition.last_stable_offset
            if isolation_level == READ_COMMITTED
            else partition.high_watermark
        )
        if replica_id >= 0:
            upper = partition.log.log_end_offset
        if fetch_offset >= upper:
            return 0
        try:
            info = partition.log.read(
                fetch_offset, max(limit, 1), max_offset=upper, min_one_batch=True
            )
        except StorageError:
            return None  # let the real read report the error
        return info.size

    # Replication: the leader's side ------------------------------------------------

    def record_follower_fetch(
        self, topic: str, index: int, replica_id: int, fetch_offset: int, current_epoch: int
    ) -> int:
        """A follower fetches from ``fetch_offset``: that is its log end offset. Update
        its state, the high watermark and maybe the ISR; returns an error code (Kafka's
        updateFollowerFetchState, with the leader epoch fencing of KIP-320)."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return self.missing_partition_error(topic, index)
        if partition.leader_id != self.broker_id:
            return NOT_LEADER_OR_FOLLOWER
        if current_epoch >= 0 and current_epoch < partition.leader_epoch:
            return FENCED_LEADER_EPOCH
        if current_epoch > partition.leader_epoch:
            return UNKNOWN_LEADER_EPOCH
        if partition.replicas and replica_id not in partition.replicas:
            return NOT_LEADER_OR_FOLLOWER  # Kafka: "not a replica of this partition"
        leo = partition.log.log_end_offset
        partition.followers.record_fetch(replica_id, min(fetch_offset, leo), leo)
        if replica_id not in partition.isr and partition.followers.can_join_isr(
            replica_id, partition.high_watermark, partition.epoch_start_offset
        ):
            self._request_isr_change(
                partition,
                partition.isr | {replica_id},
                f"replica {replica_id} caught up to offset {fetch_offset}",
            )
        self.maybe_advance_high_watermark(partition)
        return NONE

    def maybe_advance_high_watermark(self, partition: Partition) -> None:
        if partition.advance_high_watermark() and self._on_data_appended is not None:
            # Consumers waiting at the old HW and acks=all produces can now complete.
            self._on_data_appended(partition.topic, partition.index)

    def shrink_isrs(self, lag_time_ms: int) -> None:
        """Drop from every led partition's ISR the followers not caught up within
        ``replica.lag.time.max.ms`` (Kafka's maybeShrinkIsr, run every lag/2)."""
        for partition in list(self._partitions.values()):
            if partition.leader_id != self.broker_id or partition.isr_update_pending:
                continue
            stale = partition.followers.out_of_sync(partition.isr, lag_time_ms)
            if stale:
                self._request_isr_change(
                    partition,
                    partition.isr - stale,
                    f"replicas {sorted(stale)} not caught up within {lag_time_ms} ms "
                    f"(HW {partition.high_watermark}, leader LEO {partition.log.log_end_offset})",
                )

    def _request_isr_change(self, partition: Partition, new_isr: set[int], reason: str) -> None:
        writer = self.isr_writer
        if writer is None or partition.isr_update_pending:
            return
        partition.isr_update_pending = True
        writer(partition, new_isr, reason)

    def apply_isr_change(self, partition: Partition, new_isr: set[int]) -> None:
        """The ISR change is in ZooKeeper: use it (a shrink may let the HW move on)."""
        partition.isr = set(new_isr)
        partition.isr_update_pending = False
        self.maybe_advance_high_watermark(partition)
        if self._on_data_appended is not None:
            # acks=all produces waiting may now fail with NOT_ENOUGH_REPLICAS_AFTER_APPEND.
            self._on_data_appended(partition.topic, partition.index)

    def produce_status(self, topic: str, index: int, required_offset: int) -> int | None:
        """acks=all: None while the HW is below ``required_offset``; else the error code
        of the produce (Kafka's Partition.checkEnoughReplicasReachOffset)."""
        partition = self._partitions.get((topic, index))
        if partition is None or partition.leader_id != self.broker_id:
            return NOT_LEADER_OR_FOLLOWER
        if partition.high_watermark < required_offset:
            return None
        if len(partition.isr) < partition.log.config.min_insync_replicas:
            return NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return NONE
