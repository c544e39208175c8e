"""odradek's Kafka-protocol client: async core, producer, consumer, admin, blocking wrappers.

Modules (import from them directly; this package re-exports the main names):

* :mod:`~odradek.client.core` — :class:`KafkaClient`: connections and the metadata cache
* :mod:`~odradek.client.connection` — one pipelined, version-negotiated broker connection
* :mod:`~odradek.client.producer` — :class:`Producer` (batching, idempotence, retries)
  built from :mod:`~odradek.client.accumulator` (batches, buffer memory),
  :mod:`~odradek.client.sender` (Produce requests, retries),
  :mod:`~odradek.client.idempotence` (producer id, sequences) and
  :mod:`~odradek.client.producer_batch`
* :mod:`~odradek.client.fetcher` — :class:`Consumer` (assign, poll, fetch_raw, read_committed)
* :mod:`~odradek.client.admin` — :class:`Admin` (topics, configs, offsets, records)
* :mod:`~odradek.client.group_admin` — :class:`GroupAdmin` (consumer groups and their offsets)
* :mod:`~odradek.client.group_consumer` — :class:`GroupConsumer` (subscribe, rebalances,
  commits; the wire side is :mod:`~odradek.client.consumer_coordinator`) and
  :class:`~odradek.client.group_consumer_sync.SyncGroupConsumer`
* :mod:`~odradek.client.sync` — :class:`SyncProducer`, :class:`SyncConsumer`, :class:`SyncAdmin`
  (and :class:`~odradek.client.group_admin.SyncGroupAdmin`)
* :mod:`~odradek.client.partitioner` — murmur2 and partition choice, as the Java client
* :mod:`~odradek.client.errors` — :class:`KafkaError` (broker error codes), :class:`ClientError`
* :mod:`~odradek.client.assignors` — consumer-group partition assignors (range, roundrobin,
  sticky, cooperative-sticky) and the consumer protocol bytes
"""

from odradek.client.admin import Admin, ConfigEntry, ConfigResource, NewTopic
from odradek.client.consumer_coordinator import CommitFailedError
from odradek.client.core import KafkaClient
from odradek.client.errors import (
    ClientError,
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionError,
    TransactionFatalError,
    TransactionStateError,
)
from odradek.client.fetcher import Consumer, ConsumerRecord, FetchedPartition
from odradek.client.group_admin import GroupAdmin, OffsetAndMetadata, ResetSpec, SyncGroupAdmin
from odradek.client.group_consumer import (
    GroupConsumer,
    NoOffsetForPartitionError,
    RebalanceListener,
)
from odradek.client.group_consumer_sync import SyncGroupConsumer
from odradek.client.metadata import BrokerInfo, ClusterMetadata, PartitionInfo, TopicInfo
from odradek.client.producer import Producer, RecordMetadata
from odradek.client.sync import SyncAdmin, SyncConsumer, SyncProducer

__all__ = [
    "Admin",
    "BrokerInfo",
    "ClientError",
    "ClusterMetadata",
    "CommitFailedError",
    "ConfigEntry",
    "ConfigResource",
    "Consumer",
    "ConsumerRecord",
    "FetchedPartition",
    "GroupAdmin",
    "GroupConsumer",
    "InvalidProducerEpochError",
    "KafkaClient",
    "KafkaError",
    "KafkaTimeoutError",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "PartitionInfo",
    "Producer",
    "ProducerFencedError",
    "RebalanceListener",
    "RecordMetadata",
    "ResetSpec",
    "SyncAdmin",
    "SyncConsumer",
    "SyncGroupAdmin",
    "SyncGroupConsumer",
    "SyncProducer",
    "TopicInfo",
    "TransactionAbortableError",
    "TransactionError",
    "TransactionFatalError",
    "TransactionStateError",
]
