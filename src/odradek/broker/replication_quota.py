"""Replication throttles, as Kafka's ReplicationQuotaManager (KIP-73).

Two per broker: the *leader* quota bounds the bytes this broker sends to throttled
followers, the *follower* quota the bytes it fetches for throttled replicas it follows.
Their rates are the dynamic broker configs ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` (bytes/s; unset = unlimited). Which replicas are
throttled is per topic: ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas``, each ``"*"`` or a list
``partition:broker,...``; a broker throttles the partitions listed with its own id.

A replica is throttled only while it is out of the ISR (Kafka's shouldLeaderThrottle /
shouldFollowerThrottle), and only once the measured rate exceeds the limit: the leader
then leaves the partition out of its answer, the follower leaves it out of its request.
The rate is Kafka's windowed Rate: the bytes of the last ``replication.quota.window.num``
windows of ``replication.quota.window.size.seconds`` over the time they span, which is
counted as at least ``window.num - 1`` whole windows (so a copy may start with a burst of
about that many seconds' worth, as in Kafka).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Mapping

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
# Kafka's DynamicConfig.Broker keys that are not log defaults (KafkaConfig does not have
# them: they exist only as dynamic configs).
DYNAMIC_THROTTLE_KEYS = frozenset({LEADER_RATE, FOLLOWER_RATE})
ALL_REPLICAS = "*"
_ENTRY = re.compile(r"^\s*\d+\s*:\s*\d+\s*$")


def check_rate(name: str, value: str) -> str | None:
    try:
        if int(value.strip()) >= 0:
            return None
    except ValueError:
        pass
    return f"Invalid value {value} for configuration {name}: must be a long of at least 0"


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions ``value`` throttles on ``broker_id``; None means every partition."""
    text = value.strip()
    if text == ALL_REPLICAS:
        return None
    found = set()
    for entry in text.split(","):
        if _ENTRY.match(entry):
            partition, broker = (int(x) for x in entry.split(":"))
            if broker == broker_id:
                found.add(partition)
    return frozenset(found)


class ReplicationQuota:
    def __init__(
        self,
        broker_id: int,
        replicas_key: str,
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_id = broker_id
        self.replicas_key = replicas_key
        self.samples = max(1, samples)
        self.window_s = window_s
        self.clock = clock
        self.limit: float | None = None  # bytes/s; None: not throttled
        self._windows: deque[list[float]] = deque()  # [start, bytes]
        self._parsed: dict[str, frozenset[int] | None] = {}

    def set_rate(self, bytes_per_second: float | None) -> None:
        self.limit = bytes_per_second

    # --- which partitions ---------------------------------------------------------

    def is_throttled(self, partition: int, topic_configs: Mapping[str, str] | str) -> bool:
        """Is ``partition`` listed for this broker? ``topic_configs`` is the topic's
        throttled-replicas value (or its config mapping)."""
        if self.limit is None:
            return False
        value = (
            topic_configs
            if isinstance(topic_configs, str)
            else topic_configs.get(self.replicas_key, "")
        )
        if not value:
            return False
        parsed = self._parsed.get(value, frozenset({-1}))
        if parsed == frozenset({-1}):
            parsed = self._parsed[value] = throttled_partitions(value, self.broker_id)
        return parsed is None or partition in parsed

    # --- the rate -------------------------------------------------------------------

    def record(self, nbytes: int) -> None:
        if nbytes <= 0:
            return
        now = self.clock()
        self._expire(now)
        if not self._windows or now - self._windows[-1][0] >= self.window_s:
            self._windows.append([now, 0.0])
        self._windows[-1][1] += nbytes

    def rate(self) -> float:
        now = self.clock()
        self._expire(now)
        if not self._windows:
            return 0.0
        elapsed = now - self._windows[0][0]
        # Kafka's Rate: at least samples - 1 full windows, so the first seconds of a
        # copy are not measured as a huge rate.
        elapsed = max(elapsed, (self.samples - 1) * self.window_s, self.window_s)
        return sum(w[1] for w in self._windows) / elapsed

    def is_quota_exceeded(self) -> bool:
        return self.limit is not None and self.rate() > self.limit

    def _expire(self, now: float) -> None:
        horizon = now - self.samples * self.window_s
        while self._windows and self._windows[0][0] < horizon:
            self._windows.popleft()


class ReplicationQuotas:
    """The leader and follower quotas of one broker, fed by its dynamic configs."""

    def __init__(self, broker_id: int, samples: int = 11, window_s: float = 1.0) -> None:
        self.leader = ReplicationQuota(broker_id, LEADER_REPLICAS, samples, window_s)
        self.follower = ReplicationQuota(broker_id, FOLLOWER_REPLICAS, samples, window_s)

    def apply_broker_configs(self, dynamic: Mapping[str, str]) -> None:
        for quota, key in ((self.leader, LEADER_RATE), (self.follower, FOLLOWER_RATE)):
            raw = dynamic.get(key)
            try:
                quota.set_rate(None if raw is None else float(int(raw)))
            except ValueError:
                quota.set_rate(None)
