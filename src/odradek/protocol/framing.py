"""Size-delimited framing of the Kafka protocol, without I/O.

Wire format: every request and response is ``int32 size`` (big-endian, counting the bytes
that follow) followed by ``size`` bytes. The broker refuses a size above
``socket.request.max.bytes`` (default 104857600) or below zero before buffering anything,
as Kafka's ``NetworkReceive`` does, so a stray TLS hello or HTTP request cannot make it
allocate gigabytes.

``FrameDecoder.feed`` returns complete frames without their size prefix. Frames that lie
entirely inside one ``feed`` argument are returned as ``memoryview`` slices of it (no
copy); a frame assembled from several reads is returned as ``bytes``.
"""

from __future__ import annotations

import struct
import sys

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "BufferPool",
    "FrameDecoder",
    "FrameReader",
    "FrameTooLargeError",
    "frame",
]

DEFAULT_MAX_FRAME_SIZE = 104_857_600  # socket.request.max.bytes
SIZE_PREFIX = 4
# Frames up to this size get their buffer in one allocation (see FrameDecoder._begin_body).
PREALLOCATE_LIMIT = 64 * 1024

_SIZE = struct.Struct(">i")


class FrameTooLargeError(ValueError):
    """A size prefix outside ``0..max_frame_size`` (too large, or negative).

    ``size`` is the offending value. The connection that sent it must be closed: the
    stream cannot be resynchronised.
    """

    def __init__(self, size: int, max_frame_size: int) -> None:
        if size < 0:
            message = f"invalid negative frame size {size}"
        else:
            message = f"frame size {size} exceeds the maximum of {max_frame_size} bytes"
        super().__init__(message)
        self.size = size
        self.max_frame_size = max_frame_size


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return _SIZE.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Splits a byte stream into frames; bounded by ``max_frame_size`` per frame.

    After a ``FrameTooLargeError`` the decoder is poisoned: every later ``feed`` raises
    the same error, because the stream position is lost. A ``feed`` that completed frames
    before reaching the bad size prefix returns those frames instead of raising (the
    caller answers them, as Kafka does, then sees :attr:`error` and closes).
    """

    __slots__ = ("_buffer", "_error", "_expected", "_filled", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        # Size of the frame being assembled in _buffer (prefix already consumed), or -1
        # while the size prefix itself is incomplete.
        self._expected = -1
        self._filled = 0  # bytes of the frame body received so far
        self._error: FrameTooLargeError | None = None

    @property
    def error(self) -> FrameTooLargeError | None:
        """The error that poisoned the stream, if any."""
        return self._error

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (including a partial size prefix)."""
        return self._filled if self._expected >= 0 else len(self._buffer)

    @property
    def pending_frame_size(self) -> int | None:
        """Size of the frame being assembled, once its prefix has arrived."""
        return self._expected if self._expected >= 0 else None

    def _check(self, size: int) -> None:
        if size < 0 or size > self.max_frame_size:
            self._error = FrameTooLargeError(size, self.max_frame_size)
            raise self._error

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview | bytes]:
        """Consume ``data``; return the frames it completes, in order."""
        if self._error is not None:
            raise self._error
        frames: list[memoryview | bytes] = []
        try:
            return self._feed(data, frames)
        except FrameTooLargeError:
            if frames:
                return frames  # error stays set: the next feed raises it
            raise

    def _feed(
        self, data: bytes | bytearray | memoryview, frames: list[memoryview | bytes]
    ) -> list[memoryview | bytes]:
        if not data:
            return frames
        view = memoryview(data)
        position = 0
        end = len(view)

        if self._buffer or self._expected >= 0:
            # Finish the frame (or size prefix) that earlier reads started.
            if self._expected < 0:
                need = SIZE_PREFIX - len(self._buffer)
                self._buffer += view[:need]
                position = min(need, end)
                if len(self._buffer) < SIZE_PREFIX:
                    return frames
                (size,) = _SIZE.unpack_from(self._buffer)
                self._check(size)
                self._begin_body(size)
            take = min(self._expected - self._filled, end - position)
            # Within the preallocated part this is one copy with no reallocation; past it
            # (frames over PREALLOCATE_LIMIT) the slice assignment grows the buffer.
            self._buffer[self._filled : self._filled + take] = view[position : position + take]
            self._filled += take
            position += take
            if self._filled < self._expected:
                return frames
            # Hand the buffer itself over (the handler may rewrite it in place) and start
            # a new one, rather than copying it out and clearing it.
            frames.append(self._buffer)
            self._buffer = bytearray()
            self._filled = 0
            self._expected = -1

        # Fast path: whole frames that lie inside this read are sliced, not copied.
        while end - position >= SIZE_PREFIX:
            (size,) = _SIZE.unpack_from(view, position)
            self._check(size)
            start = position + SIZE_PREFIX
            if end - start < size:
                self._begin_body(size)
                take = end - start
                self._buffer[:take] = view[start:end]
                self._filled = take
                return frames
            frames.append(view[start : start + size])
            position = start + size
        if position < end:
            self._buffer += view[position:end]  # a partial size prefix
        return frames

    def _begin_body(self, size: int) -> None:
        """Start assembling a frame of ``size`` bytes (its prefix already consumed).

        Frames up to PREALLOCATE_LIMIT get their whole buffer at once, so the body is
        copied exactly once; larger ones grow as bytes arrive, so a peer cannot make us
        reserve up to socket.request.max.bytes per connection with four bytes. The limit
        is small because ``bytearray(n)`` is zero-filled, so every preallocated byte is
        resident at once: at 4 MiB, a hundred peers that sent only a size prefix each
        cost 400 MB; at 64 KiB they cost 6.4 MB.
        """
        self._expected = size
        self._filled = 0
        self._buffer = bytearray(min(size, PREALLOCATE_LIMIT))


# -- Reading straight into reusable buffers (asyncio.BufferedProtocol) ----------------

# Frames larger than this get a buffer of their own that the socket reads into directly;
# smaller ones are read into the connection's receive buffer and copied out once.
DEDICATED_FRAME = 32 * 1024
# The receive buffer starts small (an idle connection costs little) and doubles, up to
# this, whenever a read fills it.
RECEIVE_BUFFER_MIN = 8 * 1024
RECEIVE_BUFFER_MAX = 64 * 1024
# A dedicated buffer that the pool cannot supply starts at most this large and doubles
# as bytes arrive: four bytes claiming 100 MB do not make us allocate 100 MB.
GROW_FROM = 1024 * 1024
# Most buffers a BufferPool keeps (whatever their total size).
_POOL_ENTRIES = 64


class BufferPool:
    """Frame buffers handed back after their request, reused for later large frames.

    A reused buffer is already allocated and touched: no zero-fill and no page faults,
    which cost more than the copy itself on these machines. A buffer is reused only once
    nothing refers to it any more (no memoryview slice of it kept by a handler, a
    deferred response or a cache), which its reference count tells: a slice keeps its
    exporter alive. At most ``max_bytes`` are kept; one buffer serves frames from half
    its size to its size.
    """

    __slots__ = ("_free", "allocated", "max_bytes", "reused")

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._free: list[bytearray] = []
        self.reused = 0  # frames that got a pooled buffer (for tests and benches)
        self.allocated = 0  # frames that needed a new one

    @property
    def held_bytes(self) -> int:
        return sum(len(b) for b in self._free)

    def take(self, size: int) -> bytearray | None:
        """A free buffer of ``size`` to ``2 * size`` bytes, or None."""
        free = self._free
        for i in range(len(free) - 1, -1, -1):
            buf = free[i]
            # 3 references: the list, ``buf`` and getrefcount's argument. More means a
            # slice of an earlier frame is still alive somewhere.
            if size <= len(buf) <= 2 * size and sys.getrefcount(buf) <= 3:
                del free[i]
                self.reused += 1
                return buf
        return None

    def give_back(self, buf: bytearray) -> None:
        """Offer ``buf`` for reuse (it may still be referenced; ``take`` checks)."""
        free = self._free
        if len(buf) > self.max_bytes:
            return
        free.append(buf)
        total = sum(len(b) for b in free)
        # The oldest go first; the count is bounded too, since ``take`` scans the list.
        while free and (total > self.max_bytes or len(free) > _POOL_ENTRIES):
            total -= len(free.pop(0))


class FrameReader:
    """The reading side of a connection for ``asyncio.BufferedProtocol``.

    ``get_buffer()`` gives the memory the next socket read goes into and
    ``buffer_updated(n)`` returns the frames that read completed (without their size
    prefix), as writable buffers the broker may rewrite in place (batch offsets):

    * frames up to ``DEDICATED_FRAME`` bytes are read into the receive buffer and copied
      out as ``bytearray`` (one small copy; the receive buffer is reused at once);
    * a larger frame gets a buffer of its own (from ``pool`` when one is free, else
      allocated, growing from ``GROW_FROM``): once its size prefix is in, the socket
      reads its body straight into that buffer, and it is handed over as a
      ``memoryview`` of exactly its size. Hand the underlying buffer back with
      :meth:`BufferPool.give_back` (``frame.obj``) once the request is done.

    Size limits and poisoning behave as in :class:`FrameDecoder`.
    """

    __slots__ = (
        "_big",
        "_big_filled",
        "_end",
        "_error",
        "_expected",
        "_pool",
        "_recv",
        "_recv_view",
        "max_frame_size",
    )

    def __init__(
        self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, pool: BufferPool | None = None
    ) -> None:
        if max_frame_size < 0:
            raise ValueError(f"max_frame_size must be >= 0, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._pool = pool if pool is not None else BufferPool(0)
        self._recv = bytearray(RECEIVE_BUFFER_MIN)
        self._recv_view = memoryview(self._recv)
        self._end = 0  # bytes of _recv holding unparsed data (always from offset 0)
        self._big: bytearray | None = None  # the dedicated buffer being filled
        self._big_filled = 0
        self._expected = -1  # size of the dedicated frame being filled
        self._error: FrameTooLargeError | None = None

    @property
    def error(self) -> FrameTooLargeError | None:
        return self._error

    @property
    def pending_frame_size(self) -> int | None:
        """Size of the frame being assembled, once its prefix has arrived."""
        if self._expected >= 0:
            return self._expected
        if self._end >= SIZE_PREFIX:
            return _SIZE.unpack_from(self._recv, 0)[0]
        return None

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (including a partial size prefix)."""
        return self._big_filled if self._expected >= 0 else self._end

    @property
    def capacity(self) -> int:
        """Bytes allocated for reading: the receive buffer and any dedicated buffer."""
        return len(self._recv) + (len(self._big) if self._big is not None else 0)

    def get_buffer(self) -> memoryview:
        big = self._big
        if big is not None:
            if self._big_filled == len(big):  # grown from GROW_FROM: double it
                bigger = bytearray(min(self._expected, 2 * len(big)))
                memoryview(bigger)[: self._big_filled] = big
                self._big = big = bigger
            return memoryview(big)[self._big_filled : self._expected]
        return self._recv_view[self._end :]

    def buffer_updated(self, nbytes: int) -> list[memoryview | bytearray]:
        """``nbytes`` were read into the last ``get_buffer()``; return completed frames."""
        if self._error is not None:
            raise self._error
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled < self._expected:
                return []
            return [self._finish_big()]
        filled_all = self._end + nbytes == len(self._recv)
        self._end += nbytes
        frames: list[memoryview | bytearray] = []
        try:
            self._split(frames)
        except FrameTooLargeError:
            if frames:
                return frames  # error stays set: the next call raises it
            raise
        if filled_all and len(self._recv) < RECEIVE_BUFFER_MAX and self._big is None:
            self._resize_recv(min(2 * len(self._recv), RECEIVE_BUFFER_MAX))
        return frames

    def _split(self, frames: list[memoryview | bytearray]) -> None:
        view = self._recv_view
        end = self._end
        position = 0
        while end - position >= SIZE_PREFIX:
            (size,) = _SIZE.unpack_from(view, position)
            if size < 0 or size > self.max_frame_size:
                self._error = FrameTooLargeError(size, self.max_frame_size)
                self._end = 0  # the stream is lost; nothing after this is read
                raise self._error
            start = position + SIZE_PREFIX
            if size > DEDICATED_FRAME:
                # Move what arrived of the body into the frame's own buffer; the rest is
                # read straight into it.
                have = min(size, end - start)
                self._begin_big(size)
                big = self._big
                assert big is not None
                memoryview(big)[:have] = view[start : start + have]
                self._big_filled = have
                position = start + have
                if have == size:
                    frames.append(self._finish_big())
                    continue
                self._compact(position)
                return
            if end - start < size:
                break
            frames.append(bytearray(view[start : start + size]))
            position = start + size
        self._compact(position)

    def _compact(self, position: int) -> None:
        """Drop the parsed ``position`` bytes: the rest moves to the start."""
        rest = self._end - position
        if rest and position:
            self._recv_view[:rest] = self._recv_view[position : self._end]
        self._end = rest
        if rest >= SIZE_PREFIX:
            # A small frame waits for its body: make sure the receive buffer can hold it.
            (size,) = _SIZE.unpack_from(self._recv, 0)
            if SIZE_PREFIX + size > len(self._recv):
                self._resize_recv(SIZE_PREFIX + size)

    def _resize_recv(self, capacity: int) -> None:
        bigger = bytearray(capacity)
        bigger[: self._end] = self._recv_view[: self._end]
        self._recv = bigger
        self._recv_view = memoryview(bigger)

    def _begin_big(self, size: int) -> None:
        buf = self._pool.take(size)
        if buf is None:
            self._pool.allocated += 1
            buf = bytearray(min(size, GROW_FROM))
        self._big = buf
        self._big_filled = 0
        self._expected = size

    def _finish_big(self) -> memoryview:
        big = self._big
        assert big is not None
        frame = memoryview(big)[: self._expected]
        self._big = None
        self._big_filled = 0
        self._expected = -1
        return frame
