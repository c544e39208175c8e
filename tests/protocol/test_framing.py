"""FrameDecoder: any split of a stream yields the same frames; bad sizes are refused early."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.framing import FrameDecoder, FrameTooLargeError, frame


def feed_in_pieces(decoder: FrameDecoder, stream: bytes, cuts: list[int]) -> list[bytes]:
    frames: list[bytes] = []
    start = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        frames.extend(bytes(f) for f in decoder.feed(stream[start:cut]))
        start = cut
    return frames


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    data=st.data(),
)
def test_any_split_yields_the_same_frames(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frame(p) for p in payloads)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    decoder = FrameDecoder(max_frame_size=1000)
    assert feed_in_pieces(decoder, stream, cuts) == payloads
    assert decoder.buffered == 0 and decoder.pending_frame_size is None


def test_byte_by_byte() -> None:
    payloads = [b"", b"a", b"hello world", b"", bytes(range(256))]
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder()
    got = feed_in_pieces(decoder, stream, list(range(len(stream))))
    assert got == payloads


def test_frames_inside_one_read_are_not_copied() -> None:
    stream = frame(b"abc") + frame(b"defg")
    frames = FrameDecoder().feed(stream)
    assert all(isinstance(f, memoryview) for f in frames)
    assert [bytes(f) for f in frames] == [b"abc", b"defg"]


def test_partial_frame_is_held_and_reported() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(struct.pack(">i", 10) + b"abc") == []
    assert decoder.pending_frame_size == 10
    assert decoder.buffered == 3
    assert [bytes(f) for f in decoder.feed(b"defghij" + b"\x00\x00")] == [b"abcdefghij"]
    assert decoder.buffered == 2 and decoder.pending_frame_size is None


def test_oversized_frame_is_refused_before_buffering() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(struct.pack(">i", 101))
    assert info.value.size == 101 and "exceeds" in str(info.value)
    # The stream position is lost: the decoder stays failed.
    with pytest.raises(FrameTooLargeError):
        decoder.feed(frame(b"ok"))


def test_exact_limit_is_allowed() -> None:
    decoder = FrameDecoder(max_frame_size=5)
    assert [bytes(f) for f in decoder.feed(frame(b"12345"))] == [b"12345"]


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_negative_size_is_refused(size: int) -> None:
    with pytest.raises(FrameTooLargeError, match="negative"):
        FrameDecoder().feed(struct.pack(">i", size))


def test_huge_size_from_a_split_prefix_is_refused() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"\x7f\xff")
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"\xff\xff")


def test_tls_or_http_garbage_is_refused() -> None:
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed(b"GET / HTTP/1.1\r\n")
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed(b"\x16\x03\x01\x02\x00")


def test_frame_prefixes_length() -> None:
    assert frame(b"xyz") == b"\x00\x00\x00\x03xyz"
    assert frame(memoryview(b"")) == b"\x00\x00\x00\x00"


def test_frames_before_a_bad_size_in_the_same_read_are_returned_then_the_error() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    frames = decoder.feed(frame(b"one") + frame(b"two") + b"\xff\xff\xff\xf9")
    assert [bytes(f) for f in frames] == [b"one", b"two"]
    assert isinstance(decoder.error, FrameTooLargeError)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"more")


@pytest.mark.parametrize("size", [0, 1, 3 * 1024 * 1024, 5 * 1024 * 1024])
def test_large_frames_in_small_reads_arrive_whole_and_writable(size: int) -> None:
    """Below the preallocation limit the body is copied once into its own buffer; above it
    the buffer grows with the bytes that arrive. Either way the frame is handed over as a
    writable buffer, so the broker can rewrite batch offsets in it without another copy."""
    payload = bytes(i % 251 for i in range(size))
    stream = frame(payload) * 2
    decoder = FrameDecoder(max_frame_size=8 * 1024 * 1024)
    frames = []
    for start in range(0, len(stream), 65_537):
        frames += decoder.feed(stream[start : start + 65_537])
        assert decoder.buffered <= size + 4
    assert [bytes(f) for f in frames] == [payload, payload]
    assert decoder.buffered == 0 and decoder.pending_frame_size is None


def test_a_claimed_size_is_not_reserved_up_front() -> None:
    decoder = FrameDecoder(max_frame_size=100 * 1024 * 1024)
    decoder.feed(struct.pack(">i", 90 * 1024 * 1024) + b"abc")
    assert decoder.pending_frame_size == 90 * 1024 * 1024
    assert decoder.buffered == 3
    assert len(decoder._buffer) <= 4 * 1024 * 1024  # bounded by the preallocation limit
