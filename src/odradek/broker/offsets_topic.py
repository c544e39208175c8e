"""The ``__consumer_offsets`` topic as the group coordinator sees it.

The coordinator keeps its whole state as records in this compacted topic: committed
offsets and group metadata keyed by group (and topic-partition), tombstones on deletion.
This module is the coordinator's only window on it — append records to one partition,
read a partition back from its start — so the coordinator never touches storage itself
and can be rebuilt on whichever broker leads a partition.

Appends are acks=all, as Kafka's GroupMetadataManager writes them
(``offsets.commit.required.acks=-1``): :meth:`OffsetsTopic.append` returns only once every
ISR member has the records (the partition's high watermark passed them), so a commit or a
group's metadata acknowledged to a client survives the coordinator's death. It fails with
NOT_ENOUGH_REPLICAS when the ISR is below ``min.insync.replicas`` before the append,
NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank below it while waiting,
NOT_LEADER_OR_FOLLOWER when this broker stopped leading the partition meanwhile and
REQUEST_TIMED_OUT after ``offsets.commit.timeout.ms``; the coordinator maps these to the
group errors clients act on (``group.offsets_log.APPEND_ERROR_MAP``).

The topic is created on first use, as Kafka does: with ``offsets.topic.num.partitions``
partitions, ``cleanup.policy=compact`` and ``offsets.topic.segment.bytes`` segments. In
cluster mode it is created through ZooKeeper instead (:mod:`odradek.broker.internal_topics`)
and its partition count is the one the cluster knows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from odradek.cluster.metadata import MetadataError
from odradek.records.batch import Record, build_batch, decode_batches
from odradek.records.control import ControlType, peek_control_type
from odradek.records.validation import uncompressed_limit
from odradek.storage.errors import StorageError
from odradek.storage.producer_state import ORIGIN_COORDINATOR

if TYPE_CHECKING:
    from odradek.broker.replica_manager import AppendResult
    from odradek.broker.server import KafkaServer

OFFSETS_TOPIC = "__consumer_offsets"
_READ_CHUNK = 1 << 20
REQUEST_TIMED_OUT = 7


class OffsetsAppendError(Exception):
    """An append to the offsets topic failed; ``error_code`` is the Kafka code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class OffsetsTopic:
    def __init__(
        self, server: KafkaServer, cluster_count: Callable[[], int | None] | None = None
    ) -> None:
        self._server = server
        self._num_partitions: int = server.config.get("offsets.topic.num.partitions")
        # Cluster mode: the partition count from the metadata cache, None before the
        # topic exists (Kafka's groupMetadataTopicPartitionCount from ZooKeeper).
        self._cluster_count = cluster_count
        self.open_transactions: dict[int, dict[int, list[tuple[int, bytes, bytes | None]]]] = {}

    @property
    def num_partitions(self) -> int:
        if self._cluster_count is not None:
            count = self._cluster_count()
            if count:
                return count
        return self._num_partitions

    @num_partitions.setter
    def num_partitions(self, value: int) -> None:
        self._num_partitions = value

    def topic_configs(self) -> dict[str, str]:
        """Kafka's GroupMetadataManager topic configs."""
        return {
            "cleanup.policy": "compact",
            "segment.bytes": str(self._server.config.get("offsets.topic.segment.bytes")),
            "compression.type": "producer",
        }

    def exists(self) -> bool:
        return self._server.metadata.topic(OFFSETS_TOPIC) is not None

    def ensure_created(self) -> bool:
        """Create the topic if missing; True if this call created it."""
        if self.exists():
            topic = self._server.metadata.topic(OFFSETS_TOPIC)
            assert topic is not None
            self.num_partitions = len(topic.partitions)
            return False
        brokers = len(self._server.metadata.brokers())
        replication = min(self._server.config.get("offsets.topic.replication.factor"), brokers)
        try:
            self._server.topics.create_topic(
                OFFSETS_TOPIC,
                self.num_partitions,
                replication,
                self.topic_configs(),
            )
        except MetadataError as exc:
            if exc.error_name != "TOPIC_ALREADY_EXISTS":
                raise
            return False
        return True

    def is_local_leader(self, partition: int) -> bool:
        hosted = self._server.replica_manager.partition(OFFSETS_TOPIC, partition)
        return hosted is not None and hosted.leader_id == self._server.broker_id

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        batch = build_batch([Record(key=key, value=value) for key, value in records])
        result = self._server.replica_manager.append(
            OFFSETS_TOPIC, partition, batch, required_acks=-1
        )
        return await self._replicated(partition, result, len(records))

    async def append_transactional(
        self,
        partition: int,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        producer_id: int,
        producer_epoch: int,
    ) -> int:
        """Write a transactional offset commit (TxnOffsetCommit) as a batch of the producer's
        transaction; it counts only once a COMMIT marker follows it."""
        batch = build_batch(
            [Record(key=key, value=value) for key, value in records],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=True,
        )
        result = self._server.replica_manager.append(
            OFFSETS_TOPIC, partition, batch, required_acks=-1, origin=ORIGIN_COORDINATOR
        )
        return await self._replicated(partition, result, len(records))

    async def _replicated(self, partition: int, result: AppendResult, count: int) -> int:
        """Kafka's DelayedProduce for the coordinator's own append: wait until the high
        watermark passes the batch; return its last offset or raise with the error."""
        if result.error_code != 0:
            raise OffsetsAppendError(
                result.error_code,
                result.error_message or f"append to {OFFSETS_TOPIC}-{partition} failed",
            )
        replica_manager = self._server.replica_manager
        required = result.last_offset + 1

        def status() -> int | None:
            return replica_manager.produce_status(OFFSETS_TOPIC, partition, required)

        if status() is None:
            await self._server.wait_for_data(
                [(OFFSETS_TOPIC, partition)],
                self._server.config.get("offsets.commit.timeout.ms"),
                lambda: status() is not None,
                "Produce",
            )
        code = status()
        if code is None:
            raise OffsetsAppendError(
                REQUEST_TIMED_OUT,
                f"{OFFSETS_TOPIC}-{partition}: the ISR did not reach offset {required} within "
                "offsets.commit.timeout.ms",
            )
        if code != 0:
            raise OffsetsAppendError(
                code, f"{OFFSETS_TOPIC}-{partition}: replication failed with error {code}"
            )
        return result.base_offset + count - 1

    def read(self, partition: int) -> Iterator[tuple[int, bytes, bytes | None]]:
        """Every (offset, key, value) from the log start to the log end.

        To the log end, not the high watermark, as Kafka's GroupMetadataManager loads
        (FetchLogEnd): a follower learns the high watermark one fetch late, so a leader
        just elected may hold acknowledged commits above its high watermark, and they
        must be served.

        Records of a transactional batch are held back until their transaction's marker:
        yielded then if it committed, dropped if it aborted. Those of transactions still
        open at the end are left in ``open_transactions[partition]`` (producer id ->
        records) for the transactional offset commits to restore.
        """
        open_txns: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        self.open_transactions[partition] = open_txns
        hosted = self._server.replica_manager.partition(OFFSETS_TOPIC, partition)
        if hosted is None:
            return
        log_ = hosted.log
        offset = log_.log_start_offset
        end = log_.log_end_offset
        while offset < end:
            try:
                info = log_.read(offset, _READ_CHUNK, max_offset=end, min_one_batch=True)
            except StorageError:
                return
            data = info.read_bytes()
            if not data:
                return
            last = offset
            limit = uncompressed_limit(log_.config.max_message_bytes)
            for batch in decode_batches(data, max_uncompressed=limit):
                last = batch.next_offset
                if batch.is_control:
                    held = open_txns.pop(batch.producer_id, [])
                    if batch.records and _is_commit(batch.records[0].key):
                        yield from held
                    continue
                for record in batch.records:
                    if record.offset >= offset and record.key is not None:
                        if batch.is_transactional:
                            open_txns.setdefault(batch.producer_id, []).append(
                                (record.offset, record.key, record.value)
                            )
                        else:
                            yield record.offset, record.key, record.value
            if last <= offset:
                return
            offset = last

    def log_end_offset(self, partition: int) -> int:
        hosted = self._server.replica_manager.partition(OFFSETS_TOPIC, partition)
        return hosted.log.log_end_offset if hosted is not None else 0


def _is_commit(key: bytes | None) -> bool:
    try:
        return peek_control_type(key) == ControlType.COMMIT
    except ValueError:
        return False
