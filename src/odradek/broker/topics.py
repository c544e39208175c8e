"""Topic lifecycle on this broker: create, delete, add partitions, change configs.

Every change goes to the :class:`MetadataStore` first (the durable truth) and then to
the :class:`ReplicaManager` (the partitions hosted here). Topic configs are validated by
:class:`odradek.storage.config.LogConfig`, layered over the broker's ``log.*`` defaults as
Kafka layers them; a bad key or value is refused with INVALID_CONFIG before anything is
written.

A topic's logs are created in one batch (LogManager.create_logs: one fsync of the data
directory however many partitions). The ``*_async`` variants, used by the admin handlers,
do the disk work (the metadata file, the logs) on a thread so that a 10,000-partition
CreateTopics does not stall other clients; ``changes`` serialises them with each other.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable, Mapping

from odradek.broker.config import KEYS, BrokerConfig, ConfigError, parse_value
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.replication_quota import DYNAMIC_THROTTLE_KEYS
from odradek.cluster.metadata import MetadataError, MetadataStore, TopicMetadata
from odradek.storage.config import LogConfig

log = logging.getLogger(__name__)

# A partition in use keeps a few files open (the active segment and its two indexes, more
# while reads are in flight); an idle one keeps none: new logs are created closed, logs
# open lazily, and above the budget the flush job closes the descriptors of partitions
# unused for a round (Log.release_idle_handles). So the open-file limit bounds the
# partitions in use at once, not the partitions hosted; a create is refused only beyond
# one descriptor per partition. The rest of the budget is for connections.
FILES_PER_PARTITION = 3
RESERVED_FILES = 1024


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (Kafka asks operators for a high
    ulimit; a broker should not fail on a default of 1024) and return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def broker_log_defaults(config: BrokerConfig, dynamic: Mapping[str, str]) -> LogConfig:
    """Topic defaults: the broker's static ``log.*`` keys, then its dynamic ones."""
    props = config.topic_defaults()
    for key, value in dynamic.items():
        if key in DYNAMIC_THROTTLE_KEYS:
            continue  # replication throttles: broker quotas, not log defaults
        spec = KEYS.get(key)
        if spec is None or spec.topic_key is None:
            raise MetadataError("INVALID_CONFIG", f"{key} is not a dynamic broker config")
        try:
            parse_value(spec, value)
        except ConfigError as exc:
            raise MetadataError("INVALID_CONFIG", str(exc)) from None
        props[spec.topic_key] = value
    try:
        return LogConfig.from_properties(props)
    except ValueError as exc:
        raise MetadataError("INVALID_CONFIG", f"broker log defaults: {exc}") from None


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


class TopicManager:
    def __init__(
        self, config: BrokerConfig, metadata: MetadataStore, replica_manager: ReplicaManager
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.replica_manager = replica_manager
        self._defaults = broker_log_defaults(config, metadata.broker_configs())
        # Told (topic, partitions) after a topic is deleted; the server uses it to drop
        # the committed offsets of the deleted partitions.
        self.on_topic_deleted: Callable[[str, list[int]], None] | None = None
        budget = max(1, raise_open_file_limit() - RESERVED_FILES)
        self.max_partitions = budget
        replica_manager.log_manager.release_idle_above = max(1, budget // FILES_PER_PARTITION)
        # Held by the async topic changes across their thread hop, so that a delete or a
        # second create of the same topic cannot slip in between its steps.
        self.changes = asyncio.Lock()

    def set_broker_overrides(self, dynamic: Mapping[str, str], *, validate_only: bool) -> None:
        """Change the broker's dynamic topic defaults and apply them to every topic."""
        defaults = broker_log_defaults(self.config, dynamic)
        if validate_only:
            return
        self.metadata.set_broker_configs(dict(dynamic))
        self._defaults = defaults
        for topic in self.metadata.topics().values():
            self.replica_manager.update_config(topic.name, self.log_config(topic.configs))

    @property
    def default_log_config(self) -> LogConfig:
        return self._defaults

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """The effective config of a topic with these overrides (raises INVALID_CONFIG)."""
        try:
            return LogConfig.from_properties(dict(overrides), base=self._defaults)
        except ValueError as exc:
            raise MetadataError("INVALID_CONFIG", str(exc)) from None

    # Startup -----------------------------------------------------------------------

    def load_all(self) -> None:
        """Host every partition the metadata store assigns to this broker."""
        for topic in self.metadata.topics().values():
            self._host(topic)

    def _create_logs(self, topic: TopicMetadata) -> None:
        """Create the absent logs of the partitions this broker leads, in one batch.
        Storage only: safe on a thread; ``_host`` then finds them."""
        config = self.log_config(topic.configs)
        rm = self.replica_manager
        rm.log_manager.create_logs(
            [
                (topic.name, index, config, topic.topic_id)
                for index, assignment in topic.partitions.items()
                if assignment.leader == rm.broker_id and rm.partition(topic.name, index) is None
            ]
        )

    def _host(self, topic: TopicMetadata, *, logs_created: bool = False) -> None:
        if not logs_created:
            self._create_logs(topic)
        config = self.log_config(topic.configs)
        for index, assignment in topic.partitions.items():
            if assignment.leader == self.replica_manager.broker_id:
                self.replica_manager.become_leader(
                    topic.name,
                    index,
                    config,
                    leader_epoch=assignment.leader_epoch,
                    topic_id=topic.topic_id,
                )

    # Changes -----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicMetadata | None:
        request = self._check_create(name, num_partitions, replication_factor, configs,
                                     validate_only)  # fmt: skip
        if request is None:
            return None
        topic = self.metadata.create_topic(name, *request)
        self._host(topic)
        log.info("created topic %s with %d partitions", name, request[0])
        return topic

    async def create_topic_async(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicMetadata | None:
        """``create_topic`` with the metadata write and the logs' creation on a thread."""
        async with self.changes:
            request = self._check_create(name, num_partitions, replication_factor, configs,
                                         validate_only)  # fmt: skip
            if request is None:
                return None

            stamps: list[float] = []

            def durable() -> TopicMetadata:
                stamps.append(time.monotonic())
                topic = self.metadata.create_topic(name, *request)
                stamps.append(time.monotonic())
                self._create_logs(topic)
                stamps.append(time.monotonic())
                return topic

            started = time.monotonic()
            topic = await asyncio.to_thread(durable)
            self._host(topic, logs_created=True)  # in memory now: every log exists
            log.info(
                "created topic %s with %d partitions in %.3f s (metadata %.3f s, logs %.3f s)",
                name, request[0], time.monotonic() - started, stamps[1] - stamps[0],
                stamps[2] - stamps[1],
            )  # fmt: skip
            return topic

    def _check_create(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str] | None,
        validate_only: bool,
    ) -> tuple[int, int, dict[str, str]] | None:
        """Validate a create; its (partitions, replication factor, overrides) to write, or
        None when only validating."""
        if num_partitions == -1:
            num_partitions = self.config.get("num.partitions")
        if replication_factor == -1:
            replication_factor = self.config.get("default.replication.factor")
        overrides = dict(configs or {})
        self.log_config(overrides)  # validate before writing anything
        self._check_capacity(num_partitions)
        if validate_only:
            self._validate_create(name, num_partitions, replication_factor)
            return None
        self._check_collision(name)
        return num_partitions, replication_factor, overrides

    def _check_capacity(self, new_partitions: int) -> None:
        """Refuse, before writing anything, partitions this process could not keep open."""
        hosted = len(self.replica_manager.partitions())
        if hosted + new_partitions > self.max_partitions:
            raise MetadataError(
                "INVALID_PARTITIONS",
                f"{new_partitions} more partitions would make {hosted + new_partitions} on "
                f"this broker; its open-file limit allows about {self.max_partitions}",
            )

    def _validate_create(self, name: str, num_partitions: int, replication_factor: int) -> None:
        from odradek.cluster.metadata import validate_topic_name

        validate_topic_name(name)
        if name in self.metadata.topics():
            raise MetadataError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists")
        self._check_collision(name)
        if num_partitions < 1:
            raise MetadataError("INVALID_PARTITIONS", "number of partitions must be at least 1")
        brokers = len(self.metadata.brokers())
        if replication_factor < 1 or replication_factor > brokers:
            raise MetadataError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor {replication_factor} must be between 1 and {brokers}",
            )

    def _check_collision(self, name: str) -> None:
        """Refuse ``a.b`` next to ``a_b`` (Kafka's Topic.hasCollision): metric names turn
        '.' into '_', so the two topics' metrics would be indistinguishable."""
        existing = self.metadata.topics()
        if name in existing:
            return  # the store reports TOPIC_ALREADY_EXISTS, as Kafka checks that first
        normalized = _collision_key(name)
        colliding = sorted(other for other in existing if _collision_key(other) == normalized)
        if colliding:
            raise MetadataError(
                "INVALID_TOPIC_EXCEPTION",
                f"Topic '{name}' collides with existing topic: {colliding[0]}",
            )

    def delete_topic(self, name: str) -> None:
        if not self.config.get("delete.topic.enable"):
            raise MetadataError("TOPIC_DELETION_DISABLED", "delete.topic.enable is false")
        topic = self.metadata.topic(name)
        if topic is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        self.metadata.delete_topic(name)
        for index in topic.partitions:
            self.replica_manager.remove_partition(name, index, delete=True)
        log.info("deleted topic %s", name)
        if self.on_topic_deleted is not None:
            self.on_topic_deleted(name, sorted(topic.partitions))

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        topic = self.metadata.topic(name)
        if topic is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        if total <= len(topic.partitions):
            raise MetadataError(
                "INVALID_PARTITIONS",
                f"topic {name!r} has {len(topic.partitions)} partitions; "
                f"the new count {total} must be larger",
            )
        self._check_capacity(total - len(topic.partitions))
        if validate_only:
            return
        topic = self.metadata.add_partitions(name, total)
        self._host(topic)

    async def add_partitions_async(self, name: str, total: int, *, validate_only: bool = False
                                   ) -> None:  # fmt: skip
        """``add_partitions`` with the disk work on a thread."""
        async with self.changes:
            topic = self.metadata.topic(name)
            if topic is None or total <= len(topic.partitions) or validate_only:
                self.add_partitions(name, total, validate_only=validate_only)  # checks only
                return
            self._check_capacity(total - len(topic.partitions))

            def durable() -> TopicMetadata:
                grown = self.metadata.add_partitions(name, total)
                self._create_logs(grown)
                return grown

            self._host(await asyncio.to_thread(durable), logs_created=True)

    async def delete_topic_async(self, name: str) -> None:
        """``delete_topic``, ordered after any topic change in flight."""
        async with self.changes:
            self.delete_topic(name)

    def set_topic_configs(
        self, name: str, overrides: Mapping[str, str], *, validate_only: bool = False
    ) -> None:
        topic = self.metadata.topic(name)
        if topic is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        config = self.log_config(overrides)
        if validate_only:
            return
        self.metadata.set_topic_configs(name, dict(overrides))
        self.replica_manager.update_config(name, config)
