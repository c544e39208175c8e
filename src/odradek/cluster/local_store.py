"""The embedded default's metadata store: one JSON file in the data directory.

``<data_dir>/odradek-metadata.json`` holds the cluster id and every topic with its id,
partition count and config overrides. It is rewritten atomically (temp file, fsync,
rename, fsync of the directory) on every change, so a crash leaves either the old or the
new version. With a single broker, that broker leads every partition.

Topic changes may run on a thread (the broker creates big topics off its event loop):
they are serialised by a lock, and replace the topic dict (and a grown topic's partition
dict) instead of changing it in place, so a reader iterating over them on another thread
never sees one change half done. ``generation`` grows with every change: the Metadata
handler keeps encoded answers until it moves.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from pathlib import Path

from odradek.cluster.metadata import (
    BrokerInfo,
    MetadataError,
    MetadataStore,
    PartitionAssignment,
    TopicMetadata,
    validate_topic_name,
)
from odradek.storage.checkpoint import atomic_write

FILE_NAME = "odradek-metadata.json"
FORMAT_VERSION = 1


class LocalMetadataStore(MetadataStore):
    def __init__(self, data_dir: Path, broker: BrokerInfo, cluster_id: str | None = None) -> None:
        self._path = data_dir / FILE_NAME
        self._broker = broker
        self._topics: dict[str, TopicMetadata] = {}
        self._cluster_id = cluster_id or ""
        self._broker_configs: dict[str, str] = {}
        # user -> {SCRAM mechanism: "salt=...,stored_key=...,server_key=...,iterations=n"}
        self._users: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self.generation = 0
        # Client quotas: [({"user": name|None, "client-id": ...}, {quota key: value})]
        self._quotas: list[tuple[dict[str, str | None], dict[str, float]]] = []
        data_dir.mkdir(parents=True, exist_ok=True)
        if self._path.exists():
            self._load()
        if not self._cluster_id:
            # Kafka uses 22-character base64 UUIDs; clients accept any stable string.
            self._cluster_id = uuid.uuid4().hex[:22]
            self._save()

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def brokers(self) -> list[BrokerInfo]:
        return [self._broker]

    def controller_id(self) -> int:
        return self._broker.node_id

    def topics(self) -> dict[str, TopicMetadata]:
        return self._topics

    def create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicMetadata:
        with self._lock:
            return self._create_topic(name, num_partitions, replication_factor, configs)

    def _create_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicMetadata:
        validate_topic_name(name)
        if name in self._topics:
            raise MetadataError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists")
        if num_partitions < 1:
            raise MetadataError("INVALID_PARTITIONS", "number of partitions must be at least 1")
        if replication_factor < 1:
            raise MetadataError(
                "INVALID_REPLICATION_FACTOR", "replication factor must be at least 1"
            )
        if replication_factor > 1:
            raise MetadataError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor {replication_factor} is larger than the 1 available broker",
            )
        node = self._broker.node_id
        topic = TopicMetadata(
            name=name,
            topic_id=uuid.uuid4(),
            partitions={
                i: PartitionAssignment(replicas=[node], leader=node, isr=[node])
                for i in range(num_partitions)
            },
            configs=dict(configs),
        )
        self._replace_topics({**self._topics, name: topic})
        return topic

    def delete_topic(self, name: str) -> None:
        with self._lock:
            if name not in self._topics:
                raise MetadataError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist"
                )
            self._replace_topics({k: v for k, v in self._topics.items() if k != name})

    def add_partitions(self, name: str, total: int) -> TopicMetadata:
        with self._lock:
            return self._add_partitions(name, total)

    def _add_partitions(self, name: str, total: int) -> TopicMetadata:
        topic = self._topics.get(name)
        if topic is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if total <= current:
            raise MetadataError(
                "INVALID_PARTITIONS",
                f"topic {name!r} has {current} partitions; the new count must be larger",
            )
        node = self._broker.node_id
        partitions = dict(topic.partitions)
        for i in range(current, total):
            partitions[i] = PartitionAssignment(replicas=[node], leader=node, isr=[node])
        grown = dataclasses.replace(topic, partitions=partitions)
        self._replace_topics({**self._topics, name: grown})
        return grown

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        with self._lock:
            topic = self._topics.get(name)
            if topic is None:
                raise MetadataError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist"
                )
            topic.configs = dict(configs)
            self._save()

    def broker_configs(self) -> dict[str, str]:
        return dict(self._broker_configs)

    def set_broker_configs(self, configs: dict[str, str]) -> None:
        with self._lock:
            self._broker_configs = dict(configs)
            self._save()

    def _replace_topics(self, topics: dict[str, TopicMetadata]) -> None:
        """Persist ``topics``, then publish them (readers never see an unsaved topic)."""
        self._save(topics)
        self._topics = topics
        self.generation += 1

    def user_scram_credentials(self) -> dict[str, dict[str, str]]:
        """SCRAM credentials as Kafka stores them in /config/users (salted, hashed)."""
        return {user: dict(mechanisms) for user, mechanisms in self._users.items()}

    def set_user_scram_credentials(self, user: str, mechanisms: dict[str, str]) -> None:
        with self._lock:
            if mechanisms:
                self._users[user] = dict(mechanisms)
            else:
                self._users.pop(user, None)
            self._save()

    def client_quotas(self) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """Client quota entities (a None name is <default>) and their values."""
        return [(dict(entity), dict(values)) for entity, values in self._quotas]

    def set_client_quota(self, entity: dict[str, str | None], values: dict[str, float]) -> None:
        """Replace the entity's quotas; no values removes the entity."""
        with self._lock:
            self._quotas = [(e, v) for e, v in self._quotas if e != entity]
            if values:
                self._quotas.append((dict(entity), dict(values)))
            self._save()

    # Persistence ------------------------------------------------------------------

    def _load(self) -> None:
        try:
            doc = json.loads(self._path.read_text(encoding="utf-8"))
            if doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported format version {doc.get('version')!r}")
            self._cluster_id = self._cluster_id or doc["cluster_id"]
            node = self._broker.node_id
            self._broker_configs = {
                str(k): str(v) for k, v in doc.get("broker_configs", {}).items()
            }
            self._users = {
                str(user): {str(k): str(v) for k, v in mechanisms.items()}
                for user, mechanisms in doc.get("users", {}).items()
            }
            self._quotas = [
                (
                    {str(k): None if v is None else str(v) for k, v in q["entity"].items()},
                    {str(k): float(v) for k, v in q["quotas"].items()},
                )
                for q in doc.get("client_quotas", [])
            ]
            for entry in doc["topics"]:
                self._topics[entry["name"]] = TopicMetadata(
                    name=entry["name"],
                    topic_id=uuid.UUID(entry["topic_id"]),
                    partitions={
                        i: PartitionAssignment(replicas=[node], leader=node, isr=[node])
                        for i in range(int(entry["partitions"]))
                    },
                    configs={str(k): str(v) for k, v in entry.get("configs", {}).items()},
                )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MetadataError(
                "UNKNOWN_SERVER_ERROR", f"cannot read {self._path}: {exc}"
            ) from None

    def _save(self, topics: dict[str, TopicMetadata] | None = None) -> None:
        if topics is None:
            topics = self._topics
        doc = {
            "version": FORMAT_VERSION,
            "cluster_id": self._cluster_id,
            "broker_configs": self._broker_configs,
            "users": self._users,
            "client_quotas": [{"entity": e, "quotas": v} for e, v in self._quotas],
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "partitions": len(t.partitions),
                    "configs": t.configs,
                }
                for t in sorted(topics.values(), key=lambda t: t.name)
            ],
        }
        atomic_write(self._path, json.dumps(doc, indent=1).encode())
