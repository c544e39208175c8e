"""Choosing a partition for a record, the way Kafka's clients do.

* Explicit partition: used as given.
* Keyed record: ``(murmur2(key) & 0x7fffffff) % num_partitions`` over *all* partitions, exactly
  as the Java client's ``BuiltInPartitioner.partitionForKey`` (and librdkafka's ``murmur2``
  partitioners) do, so keyed records land where a Java producer would put them.
* Null key: sticky (KIP-480 / KIP-794): stay on one partition, chosen at random among those with
  a leader, until the batch being filled there is closed, then switch. This fills batches faster
  than round-robin. ``"murmur2_random"`` (librdkafka's default name) picks a random available
  partition for every null-keyed record instead; ``"round_robin"`` cycles through them.
* A custom partitioner is any callable ``(topic, key, all_partitions, available_partitions) ->
  partition``.

murmur2 here is Kafka's variant (seed 0x9747b28c, little-endian 4-byte blocks, tail mixed in the
order Java's switch falls through), computed on signed 32-bit arithmetic emulated with masks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

PartitionerFn = Callable[[str, bytes | None, Sequence[int], Sequence[int]], int]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit int, identical to the Java client's."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    full = length & ~3
    for i in range(0, full, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= data[full + 2] << 16
    if tail >= 2:
        h ^= data[full + 1] << 8
    if tail >= 1:
        h ^= data[full]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not abs: abs(MIN_VALUE) overflows)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java client's default partitioner gives a non-null key."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class Partitioner:
    """Stateful partition chooser for one producer (keeps the sticky choice per topic)."""

    NAMES = ("sticky", "default", "murmur2_random", "murmur2", "random", "round_robin")

    def __init__(
        self, strategy: str | PartitionerFn = "sticky", *, rng: random.Random | None = None
    ):
        if isinstance(strategy, str):
            if strategy not in self.NAMES:
                raise ValueError(
                    f"unknown partitioner {strategy!r}; use one of {', '.join(self.NAMES)} "
                    "or a callable"
                )
            self.strategy: str | None = "sticky" if strategy == "default" else strategy
            self.custom: PartitionerFn | None = None
        elif callable(strategy):
            self.strategy = None
            self.custom = strategy
        else:
            raise TypeError(f"partitioner must be a name or a callable, not {strategy!r}")
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        self._round_robin: dict[str, int] = {}

    @property
    def is_sticky(self) -> bool:
        return self.strategy == "sticky"

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        """Pick a partition for a record without an explicit one."""
        if not all_partitions:
            raise ValueError(f"topic {topic!r} has no partitions")
        if self.custom is not None:
            chosen = self.custom(topic, key, all_partitions, available_partitions)
            if chosen not in all_partitions:
                raise ValueError(
                    f"custom partitioner returned {chosen!r} for topic {topic!r}, which has "
                    f"partitions {min(all_partitions)}..{max(all_partitions)}"
                )
            return chosen
        if key is not None:
            return partition_for_key(key, len(all_partitions))
        if self.strategy == "murmur2":
            # librdkafka's "murmur2": null keys hash like an empty key, always one partition.
            return partition_for_key(b"", len(all_partitions))
        candidates = available_partitions or all_partitions
        if self.strategy == "round_robin":
            index = self._round_robin.get(topic, self._rng.randrange(len(candidates)))
            self._round_robin[topic] = index + 1
            return candidates[index % len(candidates)]
        if self.strategy == "sticky":
            current = self._sticky.get(topic)
            if current is not None and current in candidates:
                return current
            return self._switch(topic, candidates, current)
        return candidates[self._rng.randrange(len(candidates))]

    def batch_closed(self, topic: str, partition: int, available_partitions: Sequence[int]) -> None:
        """The batch being filled on (topic, partition) closed: a sticky choice moves on."""
        if self.strategy == "sticky" and self._sticky.get(topic) == partition:
            self._switch(topic, available_partitions, partition)

    def _switch(self, topic: str, candidates: Sequence[int], previous: int | None) -> int:
        if not candidates:
            self._sticky.pop(topic, None)
            return previous if previous is not None else 0
        choices = [p for p in candidates if p != previous] or list(candidates)
        chosen = choices[self._rng.randrange(len(choices))]
        self._sticky[topic] = chosen
        return chosen
