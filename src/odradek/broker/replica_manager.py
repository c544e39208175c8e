"""The replica manager: the partitions this broker hosts, and appends and reads on them.

Handlers call down into this layer; it calls down into :mod:`odradek.storage`. It owns
what the storage layer does not know about: which partitions are led here, the leader
epoch, the high watermark (what consumers may read), the ISR and ``min.insync.replicas``,
and waking delayed fetches in the purgatory when data arrives.

With one broker the ISR is just the leader, so the high watermark follows the log end
offset on every append; the follower bookkeeping is kept general for replication.

High watermarks survive a restart in ``replication-offset-checkpoint`` (Kafka's
ReplicaManager.checkpointHighWatermarks): written every
``replica.high.watermark.checkpoint.interval.ms`` and at shutdown, read at start-up, and a
partition hosted again starts from its checkpointed high watermark (bounded by the log
start and end offsets) instead of trusting its whole log: a restarted leader must not
show consumers records its followers never had.

An I/O error while appending or reading takes the partition's log directory offline
(storage/log_dir_failure.py); while it is offline every partition in it answers
KAFKA_STORAGE_ERROR to produce and fetch, as Kafka's offline partitions do.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from odradek.broker.partition import FollowerTracker
from odradek.broker.replica_selector import RackAwareReplicaSelector, ReplicaView
from odradek.broker.replication_quota import ReplicationQuota
from odradek.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptCheckpointError,
    DuplicateSequenceError,
    InconsistentTopicIdError,
    OffsetOutOfRangeError,
    StorageError,
)
from odradek.storage.file_region import FileRegion
from odradek.storage.log import Log
from odradek.storage.log_append import AppendInfo
from odradek.storage.log_cleaner import LogCleaner
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




class _NotLeaderAnyMore(Exception):
    """Raised on the append thread: leadership moved after the request was checked."""


def _writable(records: bytes | bytearray | memoryview) -> bytearray | memoryview:
    # The log rewrites base offsets in place. A request's records arrive as a writable
    # slice of the request buffer (nobody reads it after us): use it as it is; anything
    # else gets a mutable copy.
    if isinstance(records, memoryview) and not records.readonly:
        return records
    return bytearray(records)


def _log_failure(future: asyncio.Future[AppendResult]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("append on the append thread failed", exc_info=future.exception())


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
    # KIP-392: the replica the consumer should fetch from instead (no records then).
    preferred_read_replica: int = -1


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
        high_watermark: int | None = None,
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
        # A checkpointed high watermark, kept within the log (Kafka's updateHighWatermark);
        # without one the log end (the single broker, where the leader is the whole ISR).
        if high_watermark is None:
            high_watermark = log.log_end_offset
        self._set_high_watermark(
            min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        )

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
        # Cluster mode: the leader's replication throttle (KIP-73); None = unthrottled.
        self.leader_quota: ReplicationQuota | None = None
        # Kafka's IsrShrinksPerSec / IsrExpandsPerSec and ReplicationBytesInPerSec: read
        # by the metrics collector (broker/metrics) at scrape time.
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.replication_bytes_in = 0
        # KIP-392 (cluster mode): replica.selector.class, and each broker's rack from the
        # metadata cache. Without a selector consumers are served by the leader only.
        self.replica_selector: RackAwareReplicaSelector | None = None
        self.broker_rack: Callable[[int], str | None] = lambda _broker_id: None
        # Cluster mode: is a broker alive (in the metadata cache)? DeleteRecords waits only
        # for replicas on live brokers; the single broker counts every replica.
        self.broker_alive: Callable[[int], bool] = lambda _broker_id: True
        # Consumer reads served while following (fetch from follower), per partition.
        self.follower_reads: dict[tuple[str, int], int] = {}
        self._hw_checkpoint = OffsetCheckpointFile(
            log_manager.data_dir / REPLICATION_OFFSET_CHECKPOINT
        )
        self._checkpointed_hw = self._read_hw_checkpoint()
        # Appends of at least this many bytes run on the append thread (append_or_offload,
        # started on first use); None: never. The broker sets it from
        # append.thread.min.bytes, off by default: on the 2-core machines measured the
        # thread hop and the GIL handoffs cost more CPU than they overlap (benchmarks.md).
        self.offload_append_bytes: int | None = None
        self._append_thread: ThreadPoolExecutor | None = None
        # Appends queued on the thread, per partition: later ones queue behind them.
        self._offloaded: dict[tuple[str, int], int] = {}

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
        # Usually the log exists (loaded at startup, or created in a batch just before).
        log_ = self.log_manager.get_log(topic, index)
        if log_ is None:
            log_ = self.log_manager.get_or_create_log(topic, index, config)
        if log_.config is not config:  # identity: comparing every field costs more
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
            # No entry: 0, as Kafka (the leader moves it up, the follower takes its leader's).
            high_watermark=self._checkpointed_hw.pop((topic, index), 0),
        )
        self._partitions[(topic, index)] = partition
        return partition

    # High-watermark checkpoint ------------------------------------------------------

    def _read_hw_checkpoint(self) -> dict[tuple[str, int], int]:
        try:
            return self._hw_checkpoint.read()
        except (CorruptCheckpointError, OSError) as exc:
            # 0 for every partition is safe: leaders move it up from their ISR's log ends.
            log.error("ignoring %s: %s", self._hw_checkpoint.path, exc)
            return {}

    def checkpoint_high_watermarks(self) -> None:
        """Write every hosted partition's high watermark (and keep the checkpointed ones
        of logs not hosted again yet) to ``replication-offset-checkpoint``."""
        if self.log_manager.dir_failure.offline:
            return
        entries = {
            tp: hw
            for tp, hw in list(self._checkpointed_hw.items())
            if self.log_manager.get_log(*tp) is not None
        }
        for (topic, index), partition in list(self._partitions.items()):
            entries[(topic, index)] = max(partition.high_watermark, 0)
        try:
            self._hw_checkpoint.write(entries)
        except OSError as exc:
            self.log_manager.dir_failure.mark_offline(exc)

    def leader_or_error(self, topic: str, index: int) -> Partition | int:
        """The partition if this broker leads it, else the error for a request meant for
        the leader (Kafka's getPartitionOrError then leaderLogIfLocal)."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return self.missing_partition_error(topic, index)
        if partition.leader_id != self.broker_id:
            return NOT_LEADER_OR_FOLLOWER
        return partition

    def missing_partition_error(self, topic: str, index: int) -> int:
        """The error for a partition this broker does not host."""
        known = self.known_in_cluster
        if known is not None and known(topic, index):
            return NOT_LEADER_OR_FOLLOWER
        return UNKNOWN_TOPIC_OR_PARTITION

    def remove_partition(self, topic: str, index: int, *, delete: bool) -> None:
        partition = self._partitions.pop((topic, index), None)
        if partition is not None and gc.get_freeze_count():
            # Loaded at start-up, its objects may be frozen (KafkaServer.start): give them
            # back to the collector, or any reference cycle among them would never go.
            gc.unfreeze()
        if self.cleaner is not None:
            self.cleaner.abort_and_pause(topic, index)
        try:
            if delete:
                self.log_manager.delete_log(topic, index)
            elif partition is not None:
                # Hosted again later: it starts from where it was. The log stays open in
                # the log manager, as Kafka's stopReplicas leaves it: a later LeaderAndIsr
                # takes the same Log object back from get_or_create_log, and a closed one
                # would refuse every append for good (the fault campaign found a restarted
                # follower stuck on "log ... is closed").
                self._checkpointed_hw[(topic, index)] = partition.high_watermark
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
        """Append on the calling thread (the event loop): checks, the log, the HW."""
        checked = self._leader_for_append(topic, index, required_acks)
        if isinstance(checked, AppendResult):
            return checked
        try:
            info = checked.log.append_as_leader(
                _writable(records), leader_epoch=checked.leader_epoch, origin=origin
            )
        except (StorageError, OSError) as exc:
            return self._append_failed(checked, exc)
        return self._appended(checked, info)

    def append_or_offload(
        self,
        topic: str,
        index: int,
        records: bytes | bytearray | memoryview,
        *,
        required_acks: int,
        origin: str = ORIGIN_CLIENT,
    ) -> AppendResult | asyncio.Future[AppendResult]:
        """Append, on the append thread when the batch is large; a future then.

        Records of at least ``offload_append_bytes`` (when set) are validated (CRC, producer state)
        and written on one dedicated thread while the event loop reads the next request
        and serves other connections: the CRC and the copy into the page cache release
        the GIL. Appends to a partition that has one on the thread queue behind it there
        too, whatever their size, so the partition's appends keep their order (the
        thread takes jobs first in, first out). Leadership is checked here and again on
        the thread under the log's lock, so a log that became a follower's meanwhile is
        never appended to as a leader's. The high watermark, the purgatory wake-up and
        any log directory failure are handled back on the loop, in append order.
        """
        key = (topic, index)
        queued = self._offloaded.get(key, 0)
        threshold = self.offload_append_bytes
        if not queued and (threshold is None or len(records) < threshold):
            return self.append(topic, index, records, required_acks=required_acks, origin=origin)
        checked = self._leader_for_append(topic, index, required_acks)
        if isinstance(checked, AppendResult):
            return checked
        loop = asyncio.get_running_loop()
        if self._append_thread is None:
            self._append_thread = ThreadPoolExecutor(1, thread_name_prefix="odradek-append")
        answer: asyncio.Future[AppendResult] = loop.create_future()
        job = loop.run_in_executor(
            self._append_thread,
            self._append_on_thread,
            checked,
            checked.leader_epoch,
            _writable(records),
            origin,
        )
        self._offloaded[key] = queued + 1
        job.add_done_callback(functools.partial(self._offloaded_done, key, checked, answer))
        return answer

    def stop_append_thread(self) -> None:
        """Wait for queued appends to finish (before the logs are closed)."""
        if self._append_thread is not None:
            self._append_thread.shutdown(wait=True)
            self._append_thread = None

    def _append_on_thread(
        self, partition: Partition, epoch: int, records: bytearray | memoryview, origin: str
    ) -> AppendInfo:
        log_ = partition.log
        # Truncation and leadership moves change the log under its lock: checked inside
        # it, a leader that is still the leader appends before any of them.
        with log_.lock:
            if partition.leader_id != self.broker_id or partition.leader_epoch != epoch:
                raise _NotLeaderAnyMore
            return log_.append_as_leader(records, leader_epoch=epoch, origin=origin)

    def _offloaded_done(
        self,
        key: tuple[str, int],
        partition: Partition,
        answer: asyncio.Future[AppendResult],
        job: asyncio.Future[AppendInfo],
    ) -> None:
        left = self._offloaded[key] - 1
        if left:
            self._offloaded[key] = left
        else:
            del self._offloaded[key]
        if answer.done():  # the waiting request is gone; the append happened all the same
            answer = self._loop_future_sink()
        if job.cancelled():
            answer.cancel()
            return
        # The exception is looked at, not raised here: raising it would add this frame
        # (which holds ``job``, which holds the exception) to its traceback, a cycle that
        # keeps the request's buffer out of the pool until the garbage collector runs.
        failure = job.exception()
        try:
            if failure is None:
                result = self._appended(partition, job.result())
            elif isinstance(failure, _NotLeaderAnyMore):
                result = AppendResult(error_code=NOT_LEADER_OR_FOLLOWER)
            elif isinstance(failure, (StorageError, OSError)):
                result = self._append_failed(partition, failure)
            else:  # a bug: the handler answers UNKNOWN_SERVER_ERROR
                answer.set_exception(failure)
                return
        except Exception as exc:  # _append_failed re-raises an OSError it cannot map
            answer.set_exception(exc)
        else:
            answer.set_result(result)
        finally:
            del failure

    @staticmethod
    def _loop_future_sink() -> asyncio.Future[AppendResult]:
        # Stands in for a cancelled caller's future: the HW and the log directory state
        # are still updated, and an exception is retrieved rather than left unlogged.
        sink: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        sink.add_done_callback(_log_failure)
        return sink

    def _leader_for_append(
        self, topic: str, index: int, required_acks: int
    ) -> Partition | AppendResult:
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
        return partition

    def _append_failed(self, partition: Partition, exc: StorageError | OSError) -> AppendResult:
        log_ = partition.log
        if isinstance(exc, DuplicateSequenceError):
            # Already written: acks=all waits for what the log holds now.
            return AppendResult(
                base_offset=exc.first_offset,
                last_offset=log_.log_end_offset - 1,
                log_append_time_ms=exc.log_append_time_ms,
                log_start_offset=log_.log_start_offset,
            )
        if is_io_failure(exc):
            self.log_manager.dir_failure.mark_offline(exc)
            return AppendResult(
                error_code=KAFKA_STORAGE_ERROR,
                log_start_offset=log_.log_start_offset,
                error_message=self._offline_message(),
            )
        if not isinstance(exc, StorageError):
            raise exc
        return AppendResult(
            error_code=exc.error_code,
            log_start_offset=log_.log_start_offset,
            error_message=str(exc),
        )

    def _appended(self, partition: Partition, info: AppendInfo) -> AppendResult:
        if not info.duplicate:
            partition.advance_high_watermark()
            if self._on_data_appended is not None:
                self._on_data_appended(partition.topic, partition.index)
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
        client_rack: str | None = None,
    ) -> ReadResult:
        """Consumers read up to the high watermark (or LSO); a follower (``replica_id``
        >= 0) reads up to the log end, to replicate what is not yet committed.

        ``client_rack`` is set for consumer fetches of v11+ (KIP-392): such a consumer
        may read from a follower (up to the follower's high watermark), and a leader with
        a replica selector may point it at another replica instead of answering."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return ReadResult(error_code=self.missing_partition_error(topic, index))
        if self.log_manager.dir_failure.offline:
            return ReadResult(error_code=KAFKA_STORAGE_ERROR)
        following = partition.leader_id != self.broker_id
        if following and (client_rack is None or replica_id >= 0):
            # Followers and consumers without KIP-392 metadata read from the leader only.
            return ReadResult(error_code=NOT_LEADER_OR_FOLLOWER)
        log_ = partition.log
        high_watermark = partition.high_watermark
        last_stable = partition.last_stable_offset
        result = ReadResult(
            high_watermark=high_watermark,
            last_stable_offset=last_stable,
            log_start_offset=log_.log_start_offset,
        )
        if client_rack is not None and not following:
            preferred = self.preferred_read_replica(topic, index, fetch_offset, client_rack)
            if preferred is not None:
                result.preferred_read_replica = preferred
                return result
        if following:
            reads = self.follower_reads.get((topic, index), 0)
            if reads == 0:
                log.info(
                    "%s-%d: serving consumer fetches as a follower of %d (client rack %r)",
                    topic, index, partition.leader_id, client_rack,
                )  # fmt: skip
            self.follower_reads[(topic, index)] = reads + 1
        upper = last_stable if isolation_level == READ_COMMITTED else high_watermark
        if replica_id >= 0:
            upper = log_.log_end_offset
        if fetch_offset == upper and fetch_offset <= log_.log_end_offset:
            return result  # caught up: nothing to send, not an error
        throttled = replica_id >= 0 and self._leader_throttled(partition, replica_id)
        if throttled and self.leader_quota is not None and self.leader_quota.is_quota_exceeded():
            return result  # over the replication quota: this partition waits (no error)
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
        if throttled and self.leader_quota is not None:
            self.leader_quota.record(info.size)
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
        """Readable bytes from fetch_offset on, counted up to ``limit``; None if the
        partition is gone.

        Used by delayed fetches to decide whether min_bytes is reached: file positions
        from the index and a short header scan, no batch read (``Log.readable_bytes``).
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
            quota = self.leader_quota
            if (
                quota is not None
                and self._leader_throttled(partition, replica_id)
                and quota.is_quota_exceeded()
            ):
                return 0  # throttled bytes do not complete a delayed fetch (as Kafka)
        if fetch_offset >= upper:
            return 0
        try:
            return partition.log.readable_bytes(fetch_offset, max(limit, 1), max_offset=upper)
        except StorageError:
            return None  # let the real read report the error

    def preferred_read_replica(
        self, topic: str, index: int, fetch_offset: int, client_rack: str
    ) -> int | None:
        """The replica a consumer in ``client_rack`` should fetch from, if not this leader
        (Kafka's findPreferredReadReplica): candidates are the ISR followers whose log
        holds ``fetch_offset``, and the leader itself."""
        partition = self._partitions.get((topic, index))
        selector = self.replica_selector
        if selector is None or partition is None or partition.leader_id != self.broker_id:
            return None
        now = self._clock() * 1000
        leader = ReplicaView(self.broker_id, self.broker_rack(self.broker_id), 0, 0.0)
        candidates = [leader]
        for replica, state in partition.followers.followers.items():
            if (
                replica in partition.isr
                and state.log_end_offset >= fetch_offset
                and partition.log.log_start_offset <= fetch_offset
            ):
                candidates.append(
                    ReplicaView(
                        replica,
                        self.broker_rack(replica),
                        state.log_end_offset,
                        now - state.last_caught_up_ms,
                    )
                )
        chosen = selector.select(client_rack, leader, candidates)
        return None if chosen.broker_id == self.broker_id else chosen.broker_id

    def wake_readers(self, partition: Partition) -> None:
        """A follower's high watermark moved: consumers waiting on it may read now."""
        if self._on_data_appended is not None:
            self._on_data_appended(partition.topic, partition.index)

    # Replication: the leader's side ------------------------------------------------

    def _leader_throttled(self, partition: Partition, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle minus the rate check: an out-of-sync follower of a
        partition listed in leader.replication.throttled.replicas for this broker."""
        quota = self.leader_quota
        return (
            quota is not None
            and replica_id not in partition.isr
            and quota.is_throttled(
                partition.index, partition.log.config.leader_replication_throttled_replicas
            )
        )

    def record_follower_fetch(
        self,
        topic: str,
        index: int,
        replica_id: int,
        fetch_offset: int,
        current_epoch: int,
        log_start_offset: int = -1,
    ) -> int:
        """A follower fetches from ``fetch_offset``: that is its log end offset. Update
        its state, the high watermark and maybe the ISR; returns an error code (Kafka's
        updateFollowerFetchState, with the leader epoch fencing of KIP-320)."""
        partition = self.leader_or_error(topic, index)
        if isinstance(partition, int):
            return partition
        if current_epoch >= 0 and current_epoch < partition.leader_epoch:
            return FENCED_LEADER_EPOCH
        if current_epoch > partition.leader_epoch:
            return UNKNOWN_LEADER_EPOCH
        if partition.replicas and replica_id not in partition.replicas:
            return NOT_LEADER_OR_FOLLOWER  # Kafka: "not a replica of this partition"
        leo = partition.log.log_end_offset
        if (
            partition.followers.record_fetch(
                replica_id, min(fetch_offset, leo), leo, log_start_offset
            )
            and self._on_data_appended is not None
        ):
            # A DeleteRecords waiting for this follower's log start may complete.
            self._on_data_appended(topic, index)
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

    def low_watermark(self, partition: Partition) -> int:
        """The leader's low watermark: the smallest log start offset among it and its
        followers on live brokers (Kafka's lowWatermarkIfLeader)."""
        return partition.followers.low_watermark(
            partition.log.log_start_offset, partition.replicas, self.broker_alive
        )

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
        if len(new_isr) < len(partition.isr):
            self.isr_shrinks += 1
        elif len(new_isr) > len(partition.isr):
            self.isr_expands += 1
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
