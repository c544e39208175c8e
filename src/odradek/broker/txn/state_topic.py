"""``__transaction_state`` as the transaction coordinator sees it.

Like ``__consumer_offsets`` for groups, this compacted topic is the coordinator's whole
durable state: one TransactionLogKey/Value record per transition, a tombstone when an id
expires. The coordinator reads and writes it only through this class, so it can be
rebuilt on whichever broker leads a partition (load on becoming leader, unload on losing it).

Created on first use with ``transaction.state.log.num.partitions`` partitions,
``cleanup.policy=compact``, ``transaction.state.log.segment.bytes`` segments and
``min.insync.replicas`` = ``transaction.state.log.min.isr`` (both capped by the brokers
there are, as Kafka caps the replication factor when it creates the topic). In a cluster
it is created through ZooKeeper on the first FindCoordinator(TRANSACTION), with
``transaction.state.log.replication.factor`` replicas (not capped: fewer live brokers
than that and the creation waits, as Kafka's does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from odradek.broker.internal_topics import InternalTopicSpec
from odradek.broker.txn.markers import ReplicationWait
from odradek.cluster.metadata import MetadataError
from odradek.records.batch import Record, build_batch, decode_batches
from odradek.records.validation import uncompressed_limit
from odradek.storage.errors import StorageError

if TYPE_CHECKING:
    from odradek.broker.server import KafkaServer

TRANSACTION_STATE_TOPIC = "__transaction_state"
_READ_CHUNK = 1 << 20


class TxnStateAppendError(Exception):
    """An append to the state topic failed; ``error_code`` is the Kafka code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class TxnStateTopic:
    def __init__(
        self,
        server: KafkaServer,
        cluster_count: Callable[[], int | None] | None = None,
        wait_replicated: ReplicationWait | None = None,
    ) -> None:
        self._server = server
        # acks=all: a transition counts once every in-sync replica has it, so the leader
        # that takes over after a crash loads what the clients were told.
        self._wait_replicated = wait_replicated
        self._num_partitions: int = server.config.get("transaction.state.log.num.partitions")
        # Cluster mode: the partition count the metadata cache knows, None before the
        # topic exists; the topic is then created through ZooKeeper (InternalTopicSpec).
        self._cluster_count = cluster_count

    @property
    def num_partitions(self) -> int:
        if self._cluster_count is not None:
            return self._cluster_count() or self._num_partitions
        return self._num_partitions

    @num_partitions.setter
    def num_partitions(self, value: int) -> None:
        self._num_partitions = value

    def spec(self) -> InternalTopicSpec:
        """How a cluster creates the topic (Kafka's TransactionStateManager configs)."""
        config = self._server.config
        return InternalTopicSpec(
            TRANSACTION_STATE_TOPIC,
            config.get("transaction.state.log.num.partitions"),
            config.get("transaction.state.log.replication.factor"),
            "transaction.state.log.replication.factor",
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config.get("transaction.state.log.segment.bytes")),
                "min.insync.replicas": str(config.get("transaction.state.log.min.isr")),
                "unclean.leader.election.enable": "false",
                "compression.type": "uncompressed",
            },
        )

    def exists(self) -> bool:
        if self._cluster_count is not None:
            return bool(self._cluster_count())
        return self._server.metadata.topic(TRANSACTION_STATE_TOPIC) is not None

    def ensure_created(self) -> bool:
        """Create the topic if missing; True if this call created it."""
        topic = self._server.metadata.topic(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            self.num_partitions = len(topic.partitions)
            return False
        config = self._server.config
        brokers = len(self._server.metadata.brokers())
        replication = min(config.get("transaction.state.log.replication.factor"), brokers)
        min_isr = min(config.get("transaction.state.log.min.isr"), replication)
        try:
            self._server.topics.create_topic(
                TRANSACTION_STATE_TOPIC,
                self.num_partitions,
                replication,
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(config.get("transaction.state.log.segment.bytes")),
                    "min.insync.replicas": str(min_isr),
                    "unclean.leader.election.enable": "false",
                    "compression.type": "uncompressed",
                },
            )
        except MetadataError as exc:
            if exc.error_name != "TOPIC_ALREADY_EXISTS":
                raise
            return False
        return True

    def is_local_leader(self, partition: int) -> bool:
        hosted = self._server.replica_manager.partition(TRANSACTION_STATE_TOPIC, partition)
        return hosted is not None and hosted.leader_id == self._server.broker_id

    def leader_epoch(self, partition: int) -> int:
        """The coordinator epoch of this partition (written into every marker)."""
        hosted = self._server.replica_manager.partition(TRANSACTION_STATE_TOPIC, partition)
        return hosted.leader_epoch if hosted is not None else -1

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        batch = build_batch([Record(key=key, value=value) for key, value in records])
        result = self._server.replica_manager.append(
            TRANSACTION_STATE_TOPIC, partition, batch, required_acks=-1
        )
        if result.error_code != 0:
            raise TxnStateAppendError(
                result.error_code,
                result.error_message or f"append to {TRANSACTION_STATE_TOPIC}-{partition} failed",
            )
        if self._wait_replicated is not None:
            code = await self._wait_replicated(
                TRANSACTION_STATE_TOPIC, partition, result.last_offset + 1
            )
            if code != 0:
                raise TxnStateAppendError(
                    code, f"{TRANSACTION_STATE_TOPIC}-{partition}: not replicated ({code})"
                )
        return result.base_offset + len(records) - 1

    def read(self, partition: int) -> Iterator[tuple[int, bytes, bytes | None]]:
        """Every (offset, key, value) from the log start to the log end.

        To the log end, not the high watermark (as Kafka's loading): a new leader's high
        watermark lags until its followers fetch again, and the last transition written
        with acks=all (a PrepareCommit the client was told about) may lie above it."""
        hosted = self._server.replica_manager.partition(TRANSACTION_STATE_TOPIC, partition)
        if hosted is None:
            return
        log_ = hosted.log
        offset = log_.log_start_offset
        end = log_.log_end_offset
        limit = uncompressed_limit(log_.config.max_message_bytes)
        while offset < end:
            try:
                data = log_.read(offset, _READ_CHUNK, max_offset=end, min_one_batch=True)
            except StorageError:
                return
            raw = data.read_bytes()
            if not raw:
                return
            last = offset
            for batch in decode_batches(raw, max_uncompressed=limit):
                last = batch.next_offset
                if batch.is_control:
                    continue
                for record in batch.records:
                    if record.offset >= offset and record.key is not None:
                        yield record.offset, record.key, record.value
            if last <= offset:
                return
            offset = last
