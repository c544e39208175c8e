"""Client quotas (KIP-13, KIP-55, KIP-124): byte rates per user / client id, Kafka's way.

A quota entity is a combination of a user and a client id, either of which may be absent
or ``<default>`` (``None`` here, as on the wire). For a request of (user, client-id) the
quota of a kind comes from the first of these entities that sets it (Kafka's
``DefaultQuotaCallback`` order)::

    users/<user>/clients/<client>     users/<user>/clients/<default>     users/<user>
    users/<default>/clients/<client>  users/<default>/clients/<default>  users/<default>
    clients/<client>                  clients/<default>

Usage is counted per matched entity as Kafka tags its sensors: a ``users/<user>`` quota is
shared by every client id of that user, a ``<default>`` match still counts each real user
or client id on its own. The rate is Kafka's sampled rate: ``quota.window.num`` samples of
``quota.window.size.seconds`` each; a request that takes the rate over the quota gets a
throttle time ``(rate - quota) / quota * window`` (not bounded, as Kafka's byte-rate
quotas), and the network layer then stops reading from the
connection for that long (KIP-219).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "ClientQuotaManager",
    "LocalQuotaStore",
    "Entity",
    "SampledRate",
    "entity_key",
    "validate_value",
]

USER = "user"
CLIENT_ID = "client-id"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
# Key -> whether Kafka declares it a LONG (whole numbers only) rather than a DOUBLE.
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}

# (user, client id): each ``None`` for <default>, "" absent from the entity. Kept as
# ((type, name), ...) so it maps straight to the wire's entity lists.
Entity = tuple[tuple[str, str | None], ...]


def entity_key(parts: Mapping[str, str | None]) -> Entity:
    """The canonical entity for ``{"user": ..., "client-id": ...}`` (user first)."""
    return tuple(sorted(parts.items(), key=lambda item: item[0] != USER))


def validate_value(key: str, value: float) -> str | None:
    """Why ``value`` is not acceptable for ``key`` (None if it is)."""
    if key not in QUOTA_KEYS:
        return f"Invalid configuration key {key}"
    if value != value or value <= 0 or value == float("inf"):
        return f"Quota {key} must be a positive number, not {value}"
    if QUOTA_KEYS[key] and value != int(value):
        return f"Quota {key} must be a whole number, not {value}"
    return None


class SampledRate:
    """Kafka's ``Rate`` over ``SampledStat``: the total of the live samples divided by the
    time they span, never less than ``samples - 1`` whole windows (so one burst right
    after an idle spell does not look like an enormous rate)."""

    def __init__(self, samples: int, window_s: float) -> None:
        self.samples = samples
        self.window_s = window_s
        self._starts: list[float] = []
        self._totals: list[float] = []

    def _purge(self, now: float) -> None:
        horizon = now - self.samples * self.window_s
        while self._starts and self._starts[0] + self.window_s <= horizon:
            self._starts.pop(0)
            self._totals.pop(0)

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self._starts or now >= self._starts[-1] + self.window_s:
            self._starts.append(now)
            self._totals.append(0.0)
            if len(self._starts) > self.samples:
                self._starts.pop(0)
                self._totals.pop(0)
        self._totals[-1] += value

    def rate(self, now: float) -> float:
        self._purge(now)
        if not self._starts:
            return 0.0
        elapsed = max(now - self._starts[0], (self.samples - 1) * self.window_s)
        return sum(self._totals) / elapsed if elapsed > 0 else 0.0

    def elapsed(self, now: float) -> float:
        if not self._starts:
            return (self.samples - 1) * self.window_s
        return max(now - self._starts[0], (self.samples - 1) * self.window_s)


@dataclass(slots=True)
class _Sensor:
    rate: SampledRate
    last_used: float


class ClientQuotaManager:
    """Quotas as configured (``update``) and the usage of every quota kind per entity."""

    def __init__(
        self,
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.samples = samples
        self.window_s = window_s
        self._clock = clock
        self._quotas: dict[Entity, dict[str, float]] = {}
        self._sensors: dict[tuple[str, str, str], _Sensor] = {}
        self._keys: frozenset[str] = frozenset()  # the kinds some entity sets (cheap checks)
        # quota_for's answers, asked on every request of a client: dropped on any change.
        self._resolved: dict[tuple[str, str, str], tuple[float, str, str] | None] = {}
        self.throttled = 0  # requests answered with a throttle time, for tests and metrics

    @property
    def quotas(self) -> dict[Entity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def replace(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        self._quotas = {entity: dict(v) for entity, v in quotas.items() if v}
        self._refresh_keys()

    def update(self, entity: Entity, values: Mapping[str, float]) -> None:
        if values:
            self._quotas[entity] = dict(values)
        else:
            self._quotas.pop(entity, None)
        self._refresh_keys()

    def _refresh_keys(self) -> None:
        self._resolved = {}
        self._keys = frozenset(key for values in self._quotas.values() for key in values)

    def enabled(self, key: str) -> bool:
        """Whether any entity sets ``key`` (a set lookup: asked on every request)."""
        return key in self._keys

    def quota_for(self, key: str, user: str, client_id: str) -> tuple[float, str, str] | None:
        """The quota of ``key`` for this client and the (user, client id) tags its usage
        is counted under; None when no entity sets it."""
        asked = (key, user, client_id)
        try:
            return self._resolved[asked]
        except KeyError:
            pass
        if len(self._resolved) >= 10_000:  # many short-lived client ids: start over
            self._resolved = {}
        found = self._resolved[asked] = self._resolve(key, user, client_id)
        return found

    def _resolve(self, key: str, user: str, client_id: str) -> tuple[float, str, str] | None:
        candidates: list[tuple[Entity, str, str]] = []
        if user:
            candidates += [
                (((USER, user), (CLIENT_ID, client_id)), user, client_id),
                (((USER, user), (CLIENT_ID, None)), user, client_id),
                (((USER, user),), user, ""),
                (((USER, None), (CLIENT_ID, client_id)), user, client_id),
                (((USER, None), (CLIENT_ID, None)), user, client_id),
                (((USER, None),), user, ""),
            ]
        candidates += [
            (((CLIENT_ID, client_id),), "", client_id),
            (((CLIENT_ID, None),), "", client_id),
        ]
        for entity, user_tag, client_tag in candidates:
            value = self._quotas.get(entity, {}).get(key)
            if value is not None:
                return value, user_tag, client_tag
        return None

    def record(
        self,
        key: str,
        principal: str,
        client_id: str,
        value: float,
        *,
        bound_ms: int | None = None,
        throttle: bool = True,
    ) -> int:
        """Count ``value`` (bytes, or percent-seconds of request time) against the client's
        ``key`` quota; the throttle time in ms the response must carry (0 while within the
        quota), at most ``bound_ms`` when given. ``throttle=False`` only counts (Kafka's
        recordNoThrottle) and returns 0."""
        if not self._quotas:
            return 0
        user = principal.partition(":")[2] if principal.startswith("User:") else principal
        found = self.quota_for(key, user, client_id)
        if found is None:
            return 0
        quota, user_tag, client_tag = found
        now = self._clock()
        sensor_key = (key, user_tag, client_tag)
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            sensor = _Sensor(SampledRate(self.samples, self.window_s), now)
            self._sensors[sensor_key] = sensor
            self._expire(now)
        sensor.last_used = now
        sensor.rate.record(value, now)
        if not throttle:
            return 0
        rate = sensor.rate.rate(now)
        if rate <= quota:
            return 0
        self.throttled += 1
        # Kafka's QuotaUtils.throttleTime: the delay that brings the observed rate over the
        # rate's own window back to the quota. Unbounded for byte rates, as in Kafka's
        # ClientQuotaManager; request-time quotas cap it at one window (boundedThrottleTime).
        delay = round((rate - quota) / quota * sensor.rate.elapsed(now) * 1000)
        return delay if bound_ms is None else min(delay, bound_ms)

    def _expire(self, now: float) -> None:
        """Forget sensors idle for an hour (Kafka's inactive sensor expiry)."""
        if len(self._sensors) < 1024:
            return
        stale = [k for k, s in self._sensors.items() if now - s.last_used > 3600]
        for k in stale:
            del self._sensors[k]


class LocalQuotaStore:
    """The embedded broker's quotas: kept in the metadata store's file, applied to the
    manager at start-up and on every change."""

    def __init__(self, metadata: Any, manager: ClientQuotaManager) -> None:
        self._metadata = metadata
        self.manager = manager
        manager.replace({entity_key(e): v for e, v in metadata.client_quotas()})

    async def entities(self) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        return self._metadata.client_quotas()

    async def set(self, entity: dict[str, str | None], values: dict[str, float]) -> None:
        self._metadata.set_client_quota(entity, values)
        self.manager.update(entity_key(entity), values)
