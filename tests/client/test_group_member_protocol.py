"""The consumer-protocol pieces GroupMember writes: Kafka's RangeAssignor and encodings."""

from __future__ import annotations

import pytest

from odradek.client.group_admin import decode_consumer_assignment
from odradek.client.group_member import (
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)


def test_range_gives_the_first_members_the_extra_partitions() -> None:
    got = range_assign({"b": ["t"], "a": ["t"], "c": ["t"]}, {"t": 7})
    assert got == {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4)],
                   "c": [("t", 5), ("t", 6)]}  # fmt: skip


def test_range_is_per_topic_and_leaves_extra_members_empty() -> None:
    got = range_assign({"m1": ["x", "y"], "m2": ["y"], "m3": ["y"]}, {"x": 2, "y": 1})
    assert got == {"m1": [("x", 0), ("x", 1), ("y", 0)], "m2": [], "m3": []}


def test_encodings_round_trip() -> None:
    assert decode_subscription(encode_subscription(["a", "bé"])) == ["a", "bé"]
    data = encode_assignment([("t", 2), ("t", 0), ("u", 1)])
    assert decode_consumer_assignment(data).partitions == (("t", 0), ("t", 2), ("u", 1))


@pytest.mark.parametrize(
    "data", [b"", b"\x00\x00\x00\x00\x00\x05", b"\x00\x00\x00\x00\x00\x01\x00\x09ab"]
)
def test_a_malformed_subscription_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_subscription(data)
