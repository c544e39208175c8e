"""Dynamic configs in cluster mode: held in ZooKeeper, applied on change notifications.

As Kafka's ZooKeeper-mode DynamicConfigManager / ZkConfigChangeListener: topic overrides
live in ``/config/topics/<t>``, dynamic broker configs in ``/config/brokers/<default>``
(every broker) and ``/config/brokers/<id>`` (one broker, winning over the default). A
change writes the znode and then a sequential ``/config/changes/config_change_<seq>``
naming the entity; every broker watches ``/config/changes`` and, for each notification
newer than the last it processed (all of them at start-up), re-reads that entity and
applies it: a topic's new config to the logs of its partitions this broker hosts, new
broker defaults to every hosted log (each with its topic's overrides on top).

ZooKeeper calls block: they run in a thread; logs are changed on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from odradek.broker.config import KEYS, BrokerConfig
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.topics import broker_log_defaults
from odradek.cluster.metadata import MetadataError
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.errors import ZooKeeperError
from odradek.cluster.zk.paths import (
    CONFIG_TYPE_BROKER,
    CONFIG_TYPE_CLIENT,
    CONFIG_TYPE_TOPIC,
    CONFIG_TYPE_USER,
)
from odradek.storage.config import LogConfig

log = logging.getLogger(__name__)

DEFAULT_ENTITY = "<default>"  # Kafka's ZooKeeper name of the cluster-wide broker entity
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3


class ClusterConfigs:
    def __init__(
        self,
        broker_id: int,
        zk: ZkClient,
        config: BrokerConfig,
        replica_manager: ReplicaManager,
    ) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.config = config
        self.replica_manager = replica_manager
        self.defaults = broker_log_defaults(config, {})
        self.last_change = -1  # the sequence of the last notification processed
        self._stop_watch: object = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        # Called with the dynamic broker configs on every reload (replication throttles).
        self.on_broker_configs: list[Callable[[Mapping[str, str]], None]] = []
        # Called when a user or client entity changed (client quotas, SCRAM credentials).
        self.on_user_configs: list[Callable[[], Awaitable[None]]] = []

    # --- reading (blocking) -----------------------------------------------------------

    def dynamic_broker_configs(self) -> tuple[dict[str, str], dict[str, int]]:
        """This broker's dynamic configs and each one's DescribeConfigs source: its own
        entity wins over ``<default>``."""
        default = self.zk.get_entity_config(CONFIG_TYPE_BROKER, DEFAULT_ENTITY)
        own = self.zk.get_entity_config(CONFIG_TYPE_BROKER, str(self.broker_id))
        sources = {key: DYNAMIC_DEFAULT_BROKER_CONFIG for key in default}
        sources.update({key: DYNAMIC_BROKER_CONFIG for key in own})
        return {**default, **own}, sources

    def log_config(
        self, overrides: Mapping[str, str], defaults: LogConfig | None = None
    ) -> LogConfig:
        """A topic's effective config (raises INVALID_CONFIG for bad overrides)."""
        try:
            return LogConfig.from_properties(dict(overrides), base=defaults or self.defaults)
        except ValueError as exc:
            raise MetadataError("INVALID_CONFIG", str(exc)) from None

    def broker_set_keys(self, dynamic: Mapping[str, str]) -> set[str]:
        """Topic keys whose broker default was configured (statically or dynamically)."""
        keys = {
            spec.topic_key
            for spec in KEYS.values()
            if spec.topic_key and not self.config.is_default(spec.name)
        }
        return keys | {KEYS[k].topic_key for k in dynamic if k in KEYS and KEYS[k].topic_key}

    async def topic_log_config(self, topic: str) -> LogConfig:
        """For LeaderAndIsr creating a log: the topic's config as ZooKeeper holds it."""
        overrides = await asyncio.to_thread(self.zk.get_entity_config, CONFIG_TYPE_TOPIC, topic)
        return self.log_config(overrides)

    # --- the change listener ----------------------------------------------------------

    def start(self) -> None:
        """Load the broker's dynamic configs, then watch ``/config/changes``; in the
        background, so that joining the cluster does not wait for it."""
        task = asyncio.get_running_loop().create_task(self._start())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._reload_broker_configs()

            def changed(_children: list[str]) -> None:  # kazoo's thread
                loop.call_soon_threadsafe(self._schedule)

            self._stop_watch = await asyncio.to_thread(self.zk.watch_config_changes, changed)
        except ZooKeeperError as exc:
            log.error("watching /config/changes failed: %s", exc)

    def stop(self) -> None:
        if callable(self._stop_watch):
            self._stop_watch()
        for task in list(self._tasks):
            task.cancel()

    def _schedule(self) -> None:
        task = asyncio.get_running_loop().create_task(self.process_changes())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def process_changes(self) -> None:
        async with self._lock:  # one pass at a time, in sequence order
            try:
                changes = await asyncio.to_thread(self.zk.get_config_changes)
            except ZooKeeperError as exc:
                log.warning("reading config change notifications failed: %s", exc)
                return
            for sequence, entity_path in changes:
                if sequence <= self.last_change:
                    continue
                try:
                    await self._apply(entity_path)
                except (ZooKeeperError, MetadataError) as exc:
                    log.error("applying config change %s failed: %s", entity_path, exc)
                self.last_change = sequence

    async def _apply(self, entity_path: str) -> None:
        entity_type, _, name = entity_path.partition("/")
        if entity_type == CONFIG_TYPE_TOPIC:
            overrides = await asyncio.to_thread(self.zk.get_entity_config, entity_type, name)
            log.info(
                "Processing override for entityPath: %s with config: %s", entity_path, overrides
            )
            self.replica_manager.update_config(name, self.log_config(overrides))
        elif entity_type == CONFIG_TYPE_BROKER and name in (DEFAULT_ENTITY, str(self.broker_id)):
            log.info("Processing override for entityPath: %s", entity_path)
            await self._reload_broker_configs()
            await self._apply_to_every_log()
        elif entity_type in (CONFIG_TYPE_USER, CONFIG_TYPE_CLIENT):
            log.info("Processing override for entityPath: %s", entity_path)
            for reload in self.on_user_configs:
                await reload()

    async def _reload_broker_configs(self) -> None:
        dynamic, _sources = await asyncio.to_thread(self.dynamic_broker_configs)
        for listener in self.on_broker_configs:
            listener(dynamic)
        try:
            self.defaults = broker_log_defaults(self.config, dynamic)
        except MetadataError as exc:
            log.error("dynamic broker configs in ZooKeeper are invalid, not applied: %s", exc)

    async def _apply_to_every_log(self) -> None:
        topics = sorted({p.topic for p in self.replica_manager.partitions()})
        for topic in topics:
            overrides = await asyncio.to_thread(self.zk.get_entity_config, CONFIG_TYPE_TOPIC, topic)
            try:
                self.replica_manager.update_config(topic, self.log_config(overrides))
            except MetadataError as exc:
                log.error("topic %s: %s", topic, exc)
