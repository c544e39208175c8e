"""murmur2 and partition choice, checked against the Java client's known values."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from odradek.client.partitioner import Partitioner, murmur2, partition_for_key

# Kafka's UtilsTest.testMurmur2 (the Java client's own expected outputs).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS.items())
def test_murmur2_matches_the_java_client(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_partition_for_key_uses_the_sign_bit_mask_not_abs() -> None:
    # toPositive(-973932308) = 1173551340 (Java masks the sign bit; abs would give 973932308)
    assert partition_for_key(b"21", 1000) == 1173551340 % 1000
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7
    with pytest.raises(ValueError):
        partition_for_key(b"x", 0)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(data: bytes) -> None:
    # kafka-python's independent implementation returns the unsigned 32-bit pattern.
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_keyed_records_ignore_availability_and_strategy() -> None:
    for strategy in ("sticky", "murmur2_random", "round_robin", "random"):
        p = Partitioner(strategy)
        assert p.partition("t", b"foobar", [0, 1, 2, 3, 4, 5, 6], [0]) == partition_for_key(
            b"foobar", 7
        )


def test_sticky_stays_until_the_batch_closes_then_moves() -> None:
    p = Partitioner("sticky", rng=random.Random(1))
    all_parts, available = [0, 1, 2, 3], [0, 1, 2, 3]
    first = p.partition("t", None, all_parts, available)
    assert all(p.partition("t", None, all_parts, available) == first for _ in range(20))
    p.batch_closed("t", first, available)
    second = p.partition("t", None, all_parts, available)
    assert second != first
    p.batch_closed("t", first, available)  # an old partition's batch: no effect
    assert p.partition("t", None, all_parts, available) == second


def test_sticky_avoids_partitions_without_a_leader() -> None:
    p = Partitioner("sticky", rng=random.Random(2))
    for _ in range(20):
        p.batch_closed("t", p.partition("t", None, [0, 1, 2], [2]), [2])
        assert p.partition("t", None, [0, 1, 2], [2]) == 2


def test_round_robin_and_murmur2_null_keys() -> None:
    p = Partitioner("round_robin", rng=random.Random(3))
    seen = [p.partition("t", None, [0, 1, 2], [0, 1, 2]) for _ in range(6)]
    assert sorted(seen) == [0, 0, 1, 1, 2, 2] and seen[:3] == seen[3:]
    m = Partitioner("murmur2")
    assert {m.partition("t", None, [0, 1, 2], [0, 1, 2]) for _ in range(5)} == {
        partition_for_key(b"", 3)
    }


def test_custom_partitioner_is_called_and_checked() -> None:
    p = Partitioner(lambda topic, key, all_parts, available: len(key or b"") % len(all_parts))
    assert p.partition("t", b"abcd", [0, 1, 2], [0, 1, 2]) == 1
    bad = Partitioner(lambda topic, key, all_parts, available: 99)
    with pytest.raises(ValueError, match="returned 99"):
        bad.partition("t", b"k", [0, 1], [0, 1])
    with pytest.raises(ValueError, match="unknown partitioner"):
        Partitioner("consistent")
