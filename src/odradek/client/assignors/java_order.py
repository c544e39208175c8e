"""Java's iteration order of ``HashMap``/``HashSet``, where an assignor's result depends on it.

Java's sticky assignor walks members in the order of a ``HashMap<String, ...>`` (for
example, who keeps ``maxQuota`` partitions when several members could). To give the same
assignment as a Java leader for the same group, that order is reproduced here: buckets in
ascending ``(h ^ (h >>> 16)) & (capacity - 1)`` with ``h`` Java's ``hashCode``, capacity 16
doubled each time the size passes 3/4 of it, entries of one bucket in insertion order.
(Buckets of 8+ entries are turned into trees by Java; their order is not reproduced.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from odradek.client.assignors.base import TopicPartition

__all__ = ["JavaHashSet", "hashmap_order", "partition_hash", "string_hash"]

K = TypeVar("K")

_DEFAULT_CAPACITY = 16


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def partition_hash(tp: TopicPartition) -> int:
    """Java's ``TopicPartition.hashCode``."""
    return _int32(31 * (31 + tp.partition) + string_hash(tp.topic))


def _bucket(h: int, capacity: int) -> int:
    h &= 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)


def capacity_for(size: int, capacity: int = _DEFAULT_CAPACITY) -> int:
    while size > capacity * 3 // 4:
        capacity *= 2
    return capacity


def hashmap_order(keys: Iterable[K], hash_fn: Callable[[K], int]) -> list[K]:
    """Keys in the order a default ``new HashMap<>()`` filled with them in the given order
    iterates them."""
    ordered = list(keys)
    capacity = capacity_for(len(ordered))
    position = {key: i for i, key in enumerate(ordered)}
    return sorted(ordered, key=lambda k: (_bucket(hash_fn(k), capacity), position[k]))


class JavaHashSet:
    """A set of partitions that knows which one Java's ``iterator().next()`` returns.

    The capacity only grows (as in Java, removals never shrink the table), so it is tracked
    across adds and removes.
    """

    __slots__ = ("_capacity", "_items")

    def __init__(self) -> None:
        self._items: dict[TopicPartition, None] = {}  # insertion-ordered
        self._capacity = _DEFAULT_CAPACITY

    def add(self, tp: TopicPartition) -> None:
        if tp not in self._items:
            self._items[tp] = None
            self._capacity = capacity_for(len(self._items), self._capacity)

    def discard(self, tp: TopicPartition) -> None:
        self._items.pop(tp, None)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def first(self) -> TopicPartition:
        capacity = self._capacity
        return min(
            enumerate(self._items),
            key=lambda item: (_bucket(partition_hash(item[1]), capacity), item[0]),
        )[1]
