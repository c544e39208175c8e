"""``__transaction_state`` as the transaction coordinator sees it.

Like ``__consumer_offsets`` for groups, this compacted topic is the coordinator's whole
durable state: one TransactionLogKey/Value record per transition, a tombstone when an id
expires. The coordinator reads and writes it only through this class, so it can be
rebuilt on whichever broker leads a partition (load on becoming leader, unload on losing it).

Created on first use with ``transaction.state.log.num.partitions`` partitions,
``cleanup.policy=compact``, ``transaction.state.log.segment.bytes`` segments and
``min.insync.replicas`` = ``transaction.state.log.min.isr`` (both capped by the brokers
there are, as Kafka caps the replication factor when it creates the topic).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

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
    def __init__(self, server: KafkaServer) -> None:
        self._server = server
        self.num_partitions: int = server.config.get("transaction.state.log.num.partitions")

    def exists(self) -> bool:
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
        return result.base_offset + len(records) - 1

    def read(self, partition: int) -> Iterator[tuple[int, bytes, bytes | None]]:
        """Every (offset, key, value) from the log start to the high watermark."""
        hosted = self._server.replica_manager.partition(TRANSACTION_STATE_TOPIC, partition)
        if hosted is None:
            return
        log_ = hosted.log
        offset = log_.log_start_offset
        end = hosted.high_watermark
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
