"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and the broker.

Topic configs are per-topic overrides over the broker's ``log.*`` defaults. Broker
configs come from server.properties and ``--override``; of those, the ``log.*`` topic
defaults can also be changed at runtime (Kafka's dynamic broker configs), which applies
them to every topic without an override of its own and persists them in the metadata store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.config import KEYS, ConfigError
from odradek.broker.config_synonyms import add_synonyms
from odradek.broker.handlers.common import Ticker, error_code, respond_many
from odradek.broker.replication_quota import DYNAMIC_THROTTLE_KEYS, check_rate
from odradek.cluster.metadata import MetadataError

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer

TOPIC = 2
BROKER = 4

# DescribeConfigs config_source values.
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

# DescribeConfigs v3+ config_type values.
_TYPE_CODES = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7, "password": 8}
_LIST_KEYS = {"cleanup.policy"}


def _topic_config_type(name: str, value: str) -> int:
    if name in _LIST_KEYS:
        return 7
    if value in ("true", "false"):
        return 1
    try:
        int(value)
        return 5
    except ValueError:
        pass
    try:
        float(value)
        return 6
    except ValueError:
        return 2


def _wanted(keys: Any) -> Callable[[str], bool]:
    if not keys:
        return lambda _name: True
    allowed = set(keys)
    return lambda name: name in allowed


def _describe_topic(server: KafkaServer, name: str, keys: Any) -> dict[str, Any]:
    topic = server.metadata.topic(name)
    if topic is None:
        raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
    effective = server.topics.log_config(topic.configs).to_properties()
    return topic_config_entries(effective, topic.configs, server.broker_topic_overrides(), keys)


def topic_config_entries(
    effective: dict[str, str], overrides: Any, broker_set: set[str], keys: Any
) -> dict[str, Any]:
    """DescribeConfigs entries of a topic: its effective config, each key's source being
    the topic's override, a broker setting, or Kafka's default."""
    wanted = _wanted(keys)
    configs = []
    for key, value in sorted(effective.items()):
        if not wanted(key):
            continue
        if key in overrides:
            source = DYNAMIC_TOPIC_CONFIG
        elif key in broker_set:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        configs.append(
            {
                "name": key,
                "value": value,
                "read_only": False,
                "config_source": source,
                "is_sensitive": False,
                "config_type": _topic_config_type(key, value),
            }
        )
    return {"configs": configs}


def _describe_broker(server: KafkaServer, name: str, keys: Any) -> dict[str, Any]:
    if name not in ("", str(server.broker_id)):
        raise MetadataError("INVALID_REQUEST", f"this is broker {server.broker_id}, not {name!r}")
    dynamic = server.metadata.broker_configs()
    sources = {key: DYNAMIC_DEFAULT_BROKER_CONFIG for key in dynamic}
    return broker_config_entries(server.config, dynamic, sources, keys)


def broker_config_entries(
    config: Any, dynamic: dict[str, str], sources: dict[str, int], keys: Any
) -> dict[str, Any]:
    """DescribeConfigs entries of a broker: ``dynamic`` values (with their ``sources``)
    over the static config."""
    wanted = _wanted(keys)
    configs = []
    for key, value in config.describe():
        if not wanted(key.name):
            continue
        if key.name in dynamic:
            value, source = dynamic[key.name], sources[key.name]
        elif config.is_default(key.name):
            source = DEFAULT_CONFIG
        else:
            source = STATIC_BROKER_CONFIG
        configs.append(
            {
                "name": key.name,
                "value": value,
                "read_only": key.topic_key is None,
                "config_source": source,
                "is_sensitive": key.type == "password",
                "config_type": _TYPE_CODES.get(key.type, 2),
                "documentation": key.doc,
            }
        )
    # Kafka's dynamic-only broker configs (no static value): listed when set.
    for name in sorted(DYNAMIC_THROTTLE_KEYS):
        if name in dynamic and wanted(name):
            configs.append(
                {
                    "name": name,
                    "value": dynamic[name],
                    "read_only": False,
                    "config_source": sources[name],
                    "is_sensitive": False,
                    "config_type": _TYPE_CODES["long"],
                    "documentation": "Replication throttle, bytes/s (KIP-73).",
                }
            )
    return {"configs": configs}


async def handle_describe_configs(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    results = []
    ticker = Ticker()
    items = 0
    for resource in request.resources:
        await ticker.tick()
        entry: dict[str, Any] = {
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "error_code": ErrorCode.none,
            "error_message": None,
            "configs": [],
        }
        try:
            if resource.resource_type == TOPIC:
                entry.update(
                    _describe_topic(server, resource.resource_name, resource.configuration_keys)
                )
            elif resource.resource_type == BROKER:
                entry.update(
                    _describe_broker(server, resource.resource_name, resource.configuration_keys)
                )
            else:
                raise MetadataError(
                    "INVALID_REQUEST", f"resource type {resource.resource_type} is not supported"
                )
            if getattr(request, "include_synonyms", False):
                dynamic = server.metadata.broker_configs()
                topic = server.metadata.topic(resource.resource_name)
                overrides = topic.configs if topic is not None else {}
                add_synonyms(
                    entry,
                    topic_overrides=overrides if resource.resource_type == TOPIC else None,
                    config=server.config,
                    dynamic=dynamic,
                    sources=dict.fromkeys(dynamic, DYNAMIC_DEFAULT_BROKER_CONFIG),
                )
        except MetadataError as exc:
            entry.update(error_code=error_code(exc.error_name), error_message=str(exc))
        results.append(entry)
        items += 1 + len(entry["configs"])
    return respond_many(ctx, {"throttle_time": 0, "results": results}, items)


def _apply(
    server: KafkaServer, resource_type: int, name: str, configs: dict[str, str], validate: bool
) -> None:
    """Replace the overrides of one resource with ``configs``."""
    if resource_type == TOPIC:
        server.topics.set_topic_configs(name, configs, validate_only=validate)
    elif resource_type == BROKER:
        if name not in ("", str(server.broker_id)):
            raise MetadataError(
                "INVALID_REQUEST", f"this is broker {server.broker_id}, not {name!r}"
            )
        check_dynamic_broker_keys(configs)
        server.set_dynamic_broker_configs(configs, validate_only=validate)
    else:
        raise MetadataError("INVALID_REQUEST", f"resource type {resource_type} is not supported")


def check_dynamic_broker_keys(configs: dict[str, str]) -> None:
    """Only the broker's topic defaults (``log.*``) change at runtime."""
    for key in configs:
        if key in DYNAMIC_THROTTLE_KEYS:  # Kafka's DynamicConfig.Broker rates
            problem = check_rate(key, configs[key])
            if problem:
                raise MetadataError("INVALID_CONFIG", problem)
            continue
        spec = KEYS.get(key)
        if spec is None:
            raise MetadataError("INVALID_CONFIG", f"unknown broker config {key!r}")
        if spec.topic_key is None:
            raise MetadataError(
                "INVALID_REQUEST", f"broker config {key} cannot be updated dynamically"
            )


def _current_overrides(server: KafkaServer, resource_type: int, name: str) -> dict[str, str]:
    if resource_type == TOPIC:
        topic = server.metadata.topic(name)
        if topic is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        return dict(topic.configs)
    if resource_type == BROKER:
        return dict(server.metadata.broker_configs())
    raise MetadataError("INVALID_REQUEST", f"resource type {resource_type} is not supported")


async def _alter_each(
    server: KafkaServer,
    ctx: RequestContext,
    request: Any,
    new_overrides: Callable[[Any], dict[str, str]],
) -> Any:
    """Answer an (Incremental)AlterConfigs request: each resource's overrides become what
    ``new_overrides(resource)`` says, or the resource gets the error it raised."""
    validate = bool(request.validate_only)
    responses = []
    ticker = Ticker()
    for resource in request.resources:
        await ticker.tick()
        entry: dict[str, Any] = {
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        try:
            configs = new_overrides(resource)
            _apply(server, resource.resource_type, resource.resource_name, configs, validate)
        except (MetadataError, ConfigError) as exc:
            name = exc.error_name if isinstance(exc, MetadataError) else "INVALID_CONFIG"
            entry.update(error_code=error_code(name), error_message=str(exc))
        responses.append(entry)
    return respond_many(ctx, {"throttle_time": 0, "responses": responses}, ticker.count)


async def handle_alter_configs(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    # Legacy AlterConfigs replaces the whole set of overrides.
    return await _alter_each(
        server,
        ctx,
        request,
        lambda resource: {c.name: c.value for c in resource.configs if c.value is not None},
    )


async def handle_incremental_alter_configs(
    server: KafkaServer, ctx: RequestContext, request: Any
) -> Any:
    return await _alter_each(
        server, ctx, request, lambda resource: _incremental_overrides(server, resource)
    )


def _incremental_overrides(server: KafkaServer, resource: Any) -> dict[str, str]:
    """The resource's current overrides with SET/DELETE/APPEND/SUBTRACT applied."""
    configs = _current_overrides(server, resource.resource_type, resource.resource_name)
    return apply_incremental(
        configs, resource.configs, server.topics.default_log_config.to_properties()
    )


def apply_incremental(
    configs: dict[str, str], changes: Any, defaults: dict[str, str]
) -> dict[str, str]:
    """``configs`` with IncrementalAlterConfigs' SET/DELETE/APPEND/SUBTRACT applied; a
    list config without an override starts from ``defaults`` (the topic defaults)."""
    for change in changes:
        op = int(change.config_operation)
        if op == SET:
            if change.value is None:
                raise MetadataError("INVALID_REQUEST", f"SET {change.name} needs a value")
            configs[change.name] = change.value
        elif op == DELETE:
            configs.pop(change.name, None)
        elif op in (APPEND, SUBTRACT):
            if change.name not in _LIST_KEYS and not change.name.endswith("cleanup.policy"):
                raise MetadataError("INVALID_CONFIG", f"{change.name} is not a list config")
            current = configs.get(change.name)
            if current is None:
                current = defaults.get(change.name.removeprefix("log."), "")
            items = [v for v in current.split(",") if v]
            values = [v for v in (change.value or "").split(",") if v]
            if op == APPEND:
                items += [v for v in values if v not in items]
            else:
                items = [v for v in items if v not in values]
            configs[change.name] = ",".join(items)
        else:
            raise MetadataError("INVALID_REQUEST", f"unknown config operation {op}")
    return configs
