"""Consumer protocol bytes: byte-exact against kafka-python's and aiokafka's encoders (built
from Kafka's ConsumerProtocol*.json / StickyAssignorUserData.json), round trips, and
bounded, single-error decoding of hostile input."""

from __future__ import annotations

import struct

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment as AioAssignment,
)
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberMetadata as AioMetadata,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KpAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KpSubscription,
)

from odradek.broker.group.consumer_protocol import subscribed_topics
from odradek.client.assignors import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from odradek.client.assignors.base import java_order, partition_order
from odradek.client.assignors.wire import (
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
)

topic_names = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x2FF), min_size=1, max_size=12
)
partitions = st.lists(
    st.builds(TopicPartition, topic_names, st.integers(0, 2**31 - 1)), max_size=8, unique=True
)
subscriptions = st.builds(
    Subscription,
    topics=st.lists(topic_names, max_size=6, unique=True).map(tuple),
    user_data=st.none() | st.binary(max_size=20),
    owned_partitions=partitions.map(tuple),
    generation_id=st.integers(-1, 2**31 - 1),
    rack_id=st.none() | topic_names,
)


def grouped(parts: list[TopicPartition]) -> list[tuple[str, list[int]]]:
    out: dict[str, list[int]] = {}
    for topic, p in parts:
        out.setdefault(topic, []).append(p)
    return list(out.items())


def kafka_python_subscription(sub: Subscription, version: int) -> bytes:
    owned = sorted(sub.owned_partitions, key=partition_order)
    return KpSubscription(
        version=version,
        topics=sorted(sub.topics, key=java_order),  # Java sorts the topics it sends
        user_data=sub.user_data,
        owned_partitions=grouped(owned),
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
    ).encode()


@settings(max_examples=200)
@given(subscriptions, st.integers(0, 3))
def test_subscription_bytes_match_kafka_python(sub: Subscription, version: int) -> None:
    assert encode_subscription(sub, version) == kafka_python_subscription(sub, version)


@settings(max_examples=200)
@given(subscriptions, st.integers(0, 3))
def test_subscription_round_trip(sub: Subscription, version: int) -> None:
    got = decode_subscription(encode_subscription(sub, version))
    assert set(got.topics) == set(sub.topics)
    assert got.user_data == sub.user_data
    if version >= 1:
        assert sorted(got.owned_partitions) == sorted(sub.owned_partitions)
    assert got.generation_id == (sub.generation_id if version >= 2 else -1)
    assert got.rack_id == (sub.rack_id if version >= 3 else None)
    # the broker's own reader agrees on the topics
    assert subscribed_topics(encode_subscription(sub, version)) == set(sub.topics)


@settings(max_examples=200)
@given(partitions, st.none() | st.binary(max_size=20), st.integers(0, 3))
def test_assignment_bytes_match_kafka_python_and_round_trip(
    parts: list[TopicPartition], user_data: bytes | None, version: int
) -> None:
    encoded = encode_assignment(Assignment(parts, user_data), version)
    reference = KpAssignment(
        version=version, assigned_partitions=grouped(parts), user_data=user_data
    ).encode()
    assert encoded == reference
    got = decode_assignment(encoded)
    assert sorted(got.partitions) == sorted(parts) and got.user_data == user_data


def test_v0_bytes_match_aiokafka() -> None:
    sub = Subscription(("orders", "audit"), b"\x01\x02")
    reference = AioMetadata(0, ["audit", "orders"], b"\x01\x02").encode()
    assert encode_subscription(sub, 0) == reference
    parts = [TopicPartition("orders", 0), TopicPartition("orders", 2), TopicPartition("a", 1)]
    reference = AioAssignment(0, [("orders", [0, 2]), ("a", [1])], b"").encode()
    assert encode_assignment(Assignment(parts, b""), 0) == reference
    assert decode_assignment(reference).partitions == parts


def test_known_v3_subscription_bytes() -> None:
    sub = Subscription(("b", "a"), b"xy", (TopicPartition("a", 1), TopicPartition("a", 0)), 5, "r1")
    assert encode_subscription(sub) == (
        b"\x00\x03"  # version
        b"\x00\x00\x00\x02\x00\x01a\x00\x01b"  # topics, sorted
        b"\x00\x00\x00\x02xy"  # user data
        b"\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01"  # owned
        b"\x00\x00\x00\x05"  # generation
        b"\x00\x02r1"  # rack
    )


def test_version_above_three_is_read_and_written_as_three() -> None:
    sub = Subscription(("t",), None, (TopicPartition("t", 0),), 7, "rack")
    v3 = encode_subscription(sub, 3)
    assert encode_subscription(sub, 9) == v3
    newer = b"\x00\x09" + v3[2:] + b"future fields"
    assert decode_subscription(newer) == decode_subscription(v3)


def test_empty_rack_means_none_and_missing_generation_is_minus_one() -> None:
    sub = decode_subscription(encode_subscription(Subscription(("t",), rack_id=""), 3))
    assert sub.rack_id is None and sub.generation_id == -1 and sub.generation is None


@settings(max_examples=100)
@given(partitions, st.integers(-1, 2**31 - 1))
def test_sticky_user_data_matches_kafka_python(
    parts: list[TopicPartition], generation: int
) -> None:
    v1 = encode_sticky_user_data(parts, generation)
    reference = StickyAssignorUserData(
        version=1, previous_assignment=grouped(parts), generation=generation
    ).encode(header=False)
    assert v1 == reference
    assert decode_sticky_user_data(v1) == (
        [tp for t, ps in grouped(parts) for tp in (TopicPartition(t, p) for p in ps)],
        generation,
    )
    v0 = encode_sticky_user_data(parts)
    assert v0 == StickyAssignorUserData(version=0, previous_assignment=grouped(parts)).encode(
        header=False
    )
    assert decode_sticky_user_data(v0)[1] is None


def test_cooperative_user_data() -> None:
    assert encode_cooperative_user_data(10) == b"\x00\x00\x00\x0a"
    assert decode_cooperative_user_data(b"\xff\xff\xff\xff") == -1
    with pytest.raises(ConsumerProtocolError):
        decode_cooperative_user_data(b"\x00\x00")


# ------------------------------------------------------------------ hostile input


def test_every_truncation_raises_the_one_error() -> None:
    sub = Subscription(("orders", "t"), b"data", (TopicPartition("orders", 3),), 4, "rack-a")
    data = encode_subscription(sub)
    for cut in range(len(data)):
        with pytest.raises(ConsumerProtocolError):
            decode_subscription(data[:cut])
    data = encode_assignment(Assignment([TopicPartition("orders", 3)], b"u"))
    for cut in range(len(data)):
        with pytest.raises(ConsumerProtocolError):
            decode_assignment(data[:cut])


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\x00\x00\x00\x00",  # negative version
        b"\x00\x00\x7f\xff\xff\xff",  # 2**31-1 topics in 0 bytes
        b"\x00\x00\xff\xff\xff\xff",  # null topic array
        b"\x00\x00\x00\x00\x00\x01\xff\xff",  # null topic name
        b"\x00\x00\x00\x00\x00\x00\x7f\xff\xff\xff",  # user data longer than the buffer
        b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff\x10\x00\x00\x00",  # huge owned count
    ],
)
def test_impossible_sizes_raise_without_allocating(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)


def test_huge_partition_count_is_refused_before_allocation() -> None:
    data = b"\x00\x00" + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">i", 2**30)
    with pytest.raises(ConsumerProtocolError, match="elements"):
        decode_assignment(data)


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_the_one_error(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment, decode_sticky_user_data):
        try:
            decode(data)
        except ConsumerProtocolError:
            pass


def test_decoding_accepts_memoryview_and_bytearray() -> None:
    data = encode_subscription(Subscription(("t",), b"x"))
    assert decode_subscription(memoryview(data)) == decode_subscription(bytearray(data))
