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

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameDecoder", "FrameTooLargeError", "frame"]

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
