"""FrameReader (the BufferedProtocol read path): the socket reads into its buffers; any
split of the stream yields the same frames; large frames get their own exact-size
buffers, reused through the BufferPool only once nothing refers to them."""

from __future__ import annotations

import struct

import pytest

from odradek.protocol.framing import (
    DEDICATED_FRAME,
    GROW_FROM,
    RECEIVE_BUFFER_MAX,
    BufferPool,
    FrameReader,
    FrameTooLargeError,
    frame,
)


def read(reader: FrameReader, data: bytes, limit: int | None = None) -> list[bytes]:
    """Feed ``data`` as a socket would: each read fills at most the offered buffer (and at
    most ``limit`` bytes)."""
    out: list[bytes] = []
    view = memoryview(data)
    while view:
        target = reader.get_buffer()
        assert len(target) > 0
        take = min(len(target), len(view), limit or len(view))
        target[:take] = view[:take]
        view = view[take:]
        for f in reader.buffer_updated(take):
            assert not isinstance(f, bytes)  # writable: the log rewrites offsets in place
            assert not memoryview(f).readonly
            out.append(bytes(f))
    return out


def payload(size: int, seed: int = 0) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(size))


SIZES = [0, 1, 5, DEDICATED_FRAME, DEDICATED_FRAME + 1, 70_000]


@pytest.mark.parametrize("size", SIZES)
def test_a_frame_split_at_every_byte_boundary_arrives_whole(size: int) -> None:
    body = payload(size)
    stream = frame(body) + frame(b"next")
    cuts = range(len(stream) + 1) if len(stream) < 200 else [*range(0, 9), len(stream) - 3,
                                                               len(stream) // 2, 4, 5]
    for cut in cuts:
        reader = FrameReader(max_frame_size=1 << 20)
        assert read(reader, stream[:cut]) + read(reader, stream[cut:]) == [body, b"next"]
        assert reader.buffered == 0 and reader.pending_frame_size is None


def test_byte_by_byte_with_mixed_sizes() -> None:
    bodies = [payload(s, s) for s in (3, 0, DEDICATED_FRAME + 5, 100, 40_000)]
    stream = b"".join(frame(b) for b in bodies)
    reader = FrameReader(max_frame_size=1 << 20)
    assert read(reader, stream, limit=1) == bodies


def test_many_frames_in_one_read() -> None:
    bodies = [payload(i % 50, i) for i in range(500)]
    stream = b"".join(frame(b) for b in bodies)
    reader = FrameReader(max_frame_size=1 << 20)
    # A socket read fills what get_buffer offers; the receive buffer grows to its maximum.
    assert read(reader, stream) == bodies
    assert reader.capacity <= RECEIVE_BUFFER_MAX


@pytest.mark.parametrize("size", [DEDICATED_FRAME + 1, GROW_FROM, 3 * GROW_FROM + 17])
def test_a_frame_larger_than_the_receive_buffer_gets_an_exact_size_buffer(size: int) -> None:
    body = payload(size)
    reader = FrameReader(max_frame_size=8 << 20)
    target = reader.get_buffer()
    prefix_and_some = frame(body)[: len(target)]
    target[: len(prefix_and_some)] = prefix_and_some
    assert reader.buffer_updated(len(prefix_and_some)) == []
    assert reader.pending_frame_size == size
    frames = []
    sent = len(prefix_and_some) - 4
    reads = 0
    while not frames:
        target = reader.get_buffer()
        # The socket reads the body straight into the frame's own buffer, never past it.
        assert 0 < len(target) <= size - sent
        take = min(len(target), 300_000)
        target[:take] = body[sent : sent + take]
        sent += take
        reads += 1
        frames = reader.buffer_updated(take)
    (got,) = frames
    assert isinstance(got, memoryview) and len(got) == size and bytes(got) == body
    assert reader.buffered == 0


def test_pooled_buffers_are_reused_only_when_nothing_refers_to_them() -> None:
    pool = BufferPool()
    reader = FrameReader(max_frame_size=1 << 20, pool=pool)
    size = 100_000
    (first,) = read_views(reader, frame(payload(size, 1)))
    owner = first.obj
    kept = first[10:20]  # a handler keeps a slice of the first frame
    del first
    pool.give_back(owner)
    del owner
    (second,) = read_views(reader, frame(payload(size, 2)))
    assert bytes(kept) == payload(size, 1)[10:20]  # not overwritten: a new buffer was used
    assert pool.reused == 0
    owner2 = second.obj
    del second
    pool.give_back(owner2)
    del owner2
    (third,) = read_views(reader, frame(payload(size - 5, 3)))
    assert pool.reused == 1 and bytes(third) == payload(size - 5, 3)
    assert bytes(kept) == payload(size, 1)[10:20]


def read_views(reader: FrameReader, data: bytes) -> list[memoryview]:
    frames: list[memoryview] = []
    view = memoryview(data)
    while view:
        target = reader.get_buffer()
        take = min(len(target), len(view))
        target[:take] = view[:take]
        view = view[take:]
        frames += reader.buffer_updated(take)  # type: ignore[arg-type]
    return frames


def test_the_pool_keeps_at_most_its_limit() -> None:
    pool = BufferPool(max_bytes=250_000)
    for _ in range(5):
        pool.give_back(bytearray(100_000))
    assert pool.held_bytes <= 250_000
    assert pool.take(300_000) is None  # no buffer big enough
    assert pool.take(10_000) is None  # none small enough to be worth it (over 2x)
    assert pool.take(60_000) is not None


def test_a_hostile_length_is_refused_before_anything_is_allocated() -> None:
    reader = FrameReader(max_frame_size=1000)
    target = reader.get_buffer()
    target[:4] = struct.pack(">i", 1001)
    with pytest.raises(FrameTooLargeError):
        reader.buffer_updated(4)
    with pytest.raises(FrameTooLargeError):
        reader.buffer_updated(0)
    assert reader.capacity < 64 * 1024


@pytest.mark.parametrize("size", [-1, -(2**31), 2**31 - 1])
def test_negative_or_huge_sizes_split_over_reads_are_refused(size: int) -> None:
    reader = FrameReader(max_frame_size=100 << 20)
    prefix = struct.pack(">i", size)
    with pytest.raises(FrameTooLargeError):
        read(reader, prefix, limit=1)


def test_a_claimed_size_is_not_allocated_up_front() -> None:
    reader = FrameReader(max_frame_size=100 << 20)
    stream = struct.pack(">i", 90 << 20) + b"abc"
    assert read(reader, stream) == []
    assert reader.pending_frame_size == 90 << 20
    assert reader.buffered == 3
    assert reader.capacity <= GROW_FROM + RECEIVE_BUFFER_MAX


def test_frames_before_a_bad_size_in_the_same_read_are_returned_then_the_error() -> None:
    reader = FrameReader(max_frame_size=100)
    stream = frame(b"one") + frame(b"two") + b"\xff\xff\xff\xf9"
    target = reader.get_buffer()
    target[: len(stream)] = stream
    assert [bytes(f) for f in reader.buffer_updated(len(stream))] == [b"one", b"two"]
    assert isinstance(reader.error, FrameTooLargeError)
    with pytest.raises(FrameTooLargeError):
        reader.buffer_updated(0)
