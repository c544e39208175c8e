"""Group id -> offsets partition, bit-for-bit as Kafka (Java String.hashCode + Utils.abs)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.group.consumer_protocol import subscribed_topics
from odradek.broker.group.partitioning import java_string_hashcode, kafka_abs, partition_for


@pytest.mark.parametrize(
    ("text", "hashcode"),
    [
        ("", 0),
        ("a", 97),
        ("Aa", 2112),
        ("BB", 2112),
        ("hello", 99162322),
        ("test", 3556498),
        ("polygenelubricants", -(2**31)),  # the classic MIN_VALUE string
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # non-BMP: hashed as its two UTF-16 surrogates
    ],
)
def test_java_string_hashcode(text: str, hashcode: int) -> None:
    assert java_string_hashcode(text) == hashcode


def test_partition_for_matches_kafka() -> None:
    assert partition_for("test", 50) == 48  # the worked example in the seeds
    # Utils.abs maps MIN_VALUE to 0 (Math.abs would stay negative and break the modulo)
    assert kafka_abs(-(2**31)) == 0
    assert partition_for("polygenelubricants", 50) == 0
    assert kafka_abs(-1) == 2**31 - 1
    with pytest.raises(ValueError):
        partition_for("g", 0)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"])))
def test_bmp_strings_hash_like_the_textbook_formula(text: str) -> None:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) % 2**32
    expected = h - 2**32 if h >= 2**31 else h
    assert java_string_hashcode(text) == expected
    assert 0 <= partition_for(text, 50) < 50


def test_subscribed_topics_reads_every_subscription_version() -> None:
    import struct

    def sub(version: int, topics: list[str], tail: bytes) -> bytes:
        out = struct.pack(">hi", version, len(topics))
        for t in topics:
            out += struct.pack(">h", len(t)) + t.encode()
        return out + tail

    assert subscribed_topics(sub(0, ["a", "b"], struct.pack(">i", -1))) == {"a", "b"}
    assert subscribed_topics(sub(3, ["x"], b"\x00" * 20)) == {"x"}
    for bad in (b"", b"\x00\x00\x00\x00\x00\x05", sub(0, ["a"], b"")[:-1], b"\xff\xff" + b"\0" * 4):
        with pytest.raises(ValueError):
            subscribed_topics(bad)
