"""Config synonyms for DescribeConfigs (v1+ with ``include_synonyms``), as Kafka reports them.

Each config entry lists the settings its value could come from, highest precedence first,
each with its source and value: for a topic config its own override
(DYNAMIC_TOPIC_CONFIG), then the broker configs it falls back on; for a broker config its
dynamic value for this broker or the cluster default, its ``server.properties`` value
(STATIC_BROKER_CONFIG) and Kafka's default (DEFAULT_CONFIG). Settings without a value
(``log.retention.ms`` unset) are left out, as Kafka leaves them out, so a default
retention reads ``DEFAULT_CONFIG:log.retention.hours=168``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odradek.broker.config import KEYS

DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Topic configs whose broker default has several names (Kafka's LogConfig synonyms,
# most precise first); the others have the one broker key whose topic_key names them.
_MULTI = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
}
_BROKER_KEYS: dict[str, tuple[str, ...]] = {
    spec.topic_key: (name,) for name, spec in KEYS.items() if spec.topic_key
} | {topic: tuple(k for k in keys if k in KEYS) for topic, keys in _MULTI.items()}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def broker_synonyms(
    config: Any, name: str, dynamic: Mapping[str, str], sources: Mapping[str, int]
) -> list[dict[str, Any]]:
    """The settings of broker config ``name``, highest precedence first."""
    chain: list[dict[str, Any]] = []
    if name in dynamic:
        chain.append({"name": name, "value": dynamic[name], "source": sources[name]})
    if not config.is_default(name):
        static = _text(config.get(name))
        chain.append({"name": name, "value": static, "source": STATIC_BROKER_CONFIG})
    default = _text(KEYS[name].default) if name in KEYS else None
    if default is not None:
        chain.append({"name": name, "value": default, "source": DEFAULT_CONFIG})
    if name in KEYS and KEYS[name].type == "password":
        for synonym in chain:
            synonym["value"] = None  # sensitive: never sent, as the entry's own value
    return chain


def add_synonyms(
    result: dict[str, Any],
    *,
    topic_overrides: Mapping[str, str] | None,
    config: Any,
    dynamic: Mapping[str, str],
    sources: Mapping[str, int],
) -> None:
    """Fill ``synonyms`` of each entry in a DescribeConfigs result; ``topic_overrides`` is
    None for a broker resource."""
    for entry in result.get("configs", ()):
        name = entry["name"]
        if topic_overrides is None:
            entry["synonyms"] = broker_synonyms(config, name, dynamic, sources)
            continue
        chain = []
        if name in topic_overrides:
            chain.append(
                {"name": name, "value": topic_overrides[name], "source": DYNAMIC_TOPIC_CONFIG}
            )
        for broker_key in _BROKER_KEYS.get(name, ()):
            chain += broker_synonyms(config, broker_key, dynamic, sources)
        entry["synonyms"] = chain
