"""Cluster metadata as the broker sees it: brokers, topics, partition assignments, configs.

A :class:`MetadataStore` is where that metadata lives. The embedded default keeps it in a
local file (:mod:`odradek.cluster.local_store`); a cluster keeps it in ZooKeeper. The broker
only talks to this interface, so a single broker and a cluster run the same handlers.
"""

from __future__ import annotations

import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

# Kafka's legal topic names: ASCII letters, digits, '.', '_' and '-', at most 249 chars.
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class MetadataError(Exception):
    """A metadata change was refused; ``error_name`` is the Kafka error code's name."""

    def __init__(self, error_name: str, message: str) -> None:
        super().__init__(message)
        self.error_name = error_name


def validate_topic_name(name: str) -> None:
    """Raise MetadataError(INVALID_TOPIC_EXCEPTION) unless Kafka would accept ``name``."""
    if not name:
        raise MetadataError("INVALID_TOPIC_EXCEPTION", "topic name is empty")
    if name in (".", ".."):
        raise MetadataError("INVALID_TOPIC_EXCEPTION", f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise MetadataError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}",
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise MetadataError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'",
        )


@dataclass
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class PartitionAssignment:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionAssignment]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class MetadataStore(ABC):
    """Durable cluster metadata. Methods raise MetadataError with Kafka error names."""

    # Grows with every change a Metadata answer could show (topics, partitions, leaders):
    # the broker keeps encoded Metadata answers while it stays the same.
    generation: int = 0

    @property
    @abstractmethod
    def cluster_id(self) -> str: ...

    @abstractmethod
    def brokers(self) -> list[BrokerInfo]: ...

    @abstractmethod
    def controller_id(self) -> int: ...

    @abstractmethod
    def topics(self) -> dict[str, TopicMetadata]: ...

    @abstractmethod
    def create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicMetadata: ...

    @abstractmethod
    def delete_topic(self, name: str) -> None: ...

    @abstractmethod
    def add_partitions(self, name: str, total: int) -> TopicMetadata: ...

    @abstractmethod
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...

    @abstractmethod
    def broker_configs(self) -> dict[str, str]:
        """Dynamic broker config overrides (Kafka's cluster-wide default broker configs)."""

    @abstractmethod
    def set_broker_configs(self, configs: dict[str, str]) -> None: ...

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics().get(name)
