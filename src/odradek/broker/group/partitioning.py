"""Which ``__consumer_offsets`` partition (and so which coordinator) owns a group.

Kafka maps a group id to ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``.
Both halves are Java-specific and must be copied exactly, or clients that compute nothing but
still compare notes with Kafka tooling (and the seeds' worked example: "test" -> partition 48
of 50) would disagree:

* ``String.hashCode`` is ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 *code units* (a
  character outside the BMP counts as its two surrogates) in wrapping 32-bit arithmetic.
* ``Utils.abs`` is ``n & 0x7fffffff``, not ``Math.abs``: ``Integer.MIN_VALUE`` maps to 0 rather
  than staying negative.

The transaction coordinator maps ``transactional.id`` the same way over
``__transaction_state``.
"""

from __future__ import annotations

__all__ = ["java_string_hashcode", "kafka_abs", "partition_for"]


def java_string_hashcode(value: str) -> int:
    """Java's ``String.hashCode()`` as a signed 32-bit int."""
    h = 0
    data = value.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: clears the sign bit (so -2**31 -> 0)."""
    return n & 0x7FFFFFFF


def partition_for(key: str, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return kafka_abs(java_string_hashcode(key)) % num_partitions
