"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs in cluster mode.

As Kafka's ZooKeeper-mode brokers (ZkAdminManager, ZkConfigRepository): topic configs
are read from and written to ``/config/topics/<t>`` on whichever broker gets the
request; a write is followed by a change notification that every broker applies (see
:mod:`odradek.broker.config_changes`). Broker resources are this broker's dynamic
configs: ``/config/brokers/<id>`` for its own id, ``/config/brokers/<default>`` for the
empty name (cluster-wide); as on the embedded broker only the ``log.*`` topic defaults
change at runtime. The entries and their sources are those of the embedded broker
(:mod:`odradek.broker.handlers.configs`), with DYNAMIC_BROKER_CONFIG for a broker's own
entity and DYNAMIC_DEFAULT_BROKER_CONFIG for ``<default>``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.config import ConfigError
from odradek.broker.config_changes import DEFAULT_ENTITY, ClusterConfigs
from odradek.broker.config_synonyms import add_synonyms
from odradek.broker.handlers.common import error_code, respond_many
from odradek.broker.handlers.configs import (
    BROKER,
    TOPIC,
    apply_incremental,
    broker_config_entries,
    check_dynamic_broker_keys,
    topic_config_entries,
)
from odradek.broker.topics import broker_log_defaults
from odradek.cluster.metadata import MetadataError
from odradek.cluster.zk.errors import ZooKeeperError
from odradek.cluster.zk.paths import CONFIG_TYPE_BROKER, CONFIG_TYPE_TOPIC

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext


@dataclass
class ClusterConfigHandlers:
    configs: ClusterConfigs

    def handlers(self) -> dict[int, Callable[[Any, Any], Awaitable[Any]]]:
        return {
            32: self.handle_describe_configs,
            33: self.handle_alter_configs,
            44: self.handle_incremental_alter_configs,
        }

    # --- DescribeConfigs ----------------------------------------------------------------

    async def handle_describe_configs(self, ctx: RequestContext, request: Any) -> Any:
        results = []
        items = 0
        for resource in request.resources:
            entry: dict[str, Any] = {
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "error_code": ErrorCode.none,
                "error_message": None,
                "configs": [],
            }
            try:
                entry.update(
                    await asyncio.to_thread(
                        self._describe, resource, bool(getattr(request, "include_synonyms", False))
                    )
                )
            except MetadataError as exc:
                entry.update(error_code=error_code(exc.error_name), error_message=str(exc))
            except ZooKeeperError as exc:
                entry.update(error_code=ErrorCode.unknown_server_error, error_message=str(exc))
            results.append(entry)
            items += 1 + len(entry["configs"])
        return respond_many(ctx, {"throttle_time": 0, "results": results}, items)

    def _describe(self, resource: Any, synonyms: bool = False) -> dict[str, Any]:
        name, keys = resource.resource_name, resource.configuration_keys
        dynamic, sources = self.configs.dynamic_broker_configs()
        config = self.configs.config
        if resource.resource_type == TOPIC:
            overrides = self._topic_overrides(name)
            defaults = broker_log_defaults(config, dynamic)
            effective = self.configs.log_config(overrides, defaults).to_properties()
            result = topic_config_entries(
                effective, overrides, self.configs.broker_set_keys(dynamic), keys
            )
            if synonyms:
                add_synonyms(
                    result, topic_overrides=overrides, config=config, dynamic=dynamic,
                    sources=sources,
                )  # fmt: skip
            return result
        if resource.resource_type == BROKER:
            self._broker_entity(name)
            result = broker_config_entries(config, dynamic, sources, keys)
            if synonyms:
                add_synonyms(
                    result, topic_overrides=None, config=config, dynamic=dynamic, sources=sources
                )
            return result
        raise MetadataError(
            "INVALID_REQUEST", f"resource type {resource.resource_type} is not supported"
        )

    def _topic_overrides(self, name: str) -> dict[str, str]:
        if self.configs.zk.get_topic_assignment(name) is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        return self.configs.zk.get_entity_config(CONFIG_TYPE_TOPIC, name)

    def _broker_entity(self, name: str) -> str:
        broker_id = self.configs.broker_id
        if name == "":
            return DEFAULT_ENTITY
        if name == str(broker_id):
            return name
        raise MetadataError("INVALID_REQUEST", f"this is broker {broker_id}, not {name!r}")

    # --- AlterConfigs / IncrementalAlterConfigs -----------------------------------------

    async def handle_alter_configs(self, ctx: RequestContext, request: Any) -> Any:
        # Legacy AlterConfigs replaces the whole set of overrides.
        def replace(resource: Any, _current: dict[str, str]) -> dict[str, str]:
            return {c.name: c.value for c in resource.configs if c.value is not None}

        return await self._alter_each(ctx, request, replace)

    async def handle_incremental_alter_configs(self, ctx: RequestContext, request: Any) -> Any:
        def incremental(resource: Any, current: dict[str, str]) -> dict[str, str]:
            defaults = self.configs.defaults.to_properties()
            return apply_incremental(current, resource.configs, defaults)

        return await self._alter_each(ctx, request, incremental)

    async def _alter_each(
        self,
        ctx: RequestContext,
        request: Any,
        new_overrides: Callable[[Any, dict[str, str]], dict[str, str]],
    ) -> Any:
        validate = bool(request.validate_only)
        responses = []
        for resource in request.resources:
            entry: dict[str, Any] = {
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "error_code": ErrorCode.none,
                "error_message": None,
            }
            try:
                await asyncio.to_thread(self._alter, resource, new_overrides, validate)
            except (MetadataError, ConfigError) as exc:
                name = exc.error_name if isinstance(exc, MetadataError) else "INVALID_CONFIG"
                entry.update(error_code=error_code(name), error_message=str(exc))
            except ZooKeeperError as exc:
                entry.update(error_code=ErrorCode.unknown_server_error, error_message=str(exc))
            responses.append(entry)
        return respond_many(ctx, {"throttle_time": 0, "responses": responses}, len(responses))

    def _alter(
        self,
        resource: Any,
        new_overrides: Callable[[Any, dict[str, str]], dict[str, str]],
        validate: bool,
    ) -> None:
        """Blocking: check the new overrides, then write them and notify every broker."""
        zk, name = self.configs.zk, resource.resource_name
        if resource.resource_type == TOPIC:
            configs = new_overrides(resource, self._topic_overrides(name))
            self.configs.log_config(configs)  # INVALID_CONFIG before anything is written
            if not validate:
                zk.change_entity_config(CONFIG_TYPE_TOPIC, name, configs)
        elif resource.resource_type == BROKER:
            entity = self._broker_entity(name)
            configs = new_overrides(resource, zk.get_entity_config(CONFIG_TYPE_BROKER, entity))
            check_dynamic_broker_keys(configs)
            broker_log_defaults(self.configs.config, configs)  # values must parse
            if not validate:
                zk.change_entity_config(CONFIG_TYPE_BROKER, entity, configs)
        else:
            raise MetadataError(
                "INVALID_REQUEST", f"resource type {resource.resource_type} is not supported"
            )
