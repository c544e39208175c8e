"""The sending side of one broker connection: answers go out in request order.

A :class:`ResponseWriter` belongs to one :class:`~odradek.broker.connection.Connection`
and owns everything about writing to its transport: the queue of answers (encoded bytes,
lists of bytes and file regions, futures of deferred answers, a :class:`Close` marker),
the writer task that sends them strictly in request order (waiting for a deferred one
before anything after it), the transport's write-buffer flow control, and file regions.
Kept apart from the connection, which reads, decodes and handles requests, because the
two halves share only the queue and the request-done count.

An answer is written at once by :meth:`ResponseWriter.deliver` when nothing is queued
before it and the transport is not paused; else it is queued and the writer task wakes.
Encoded answers ready together are joined into one write (one send() for a burst of
pipelined small answers). The writer honours the transport's write-buffer flow control,
so a client that does not read cannot make the broker buffer without bound.

File regions (objects with ``fd``, ``position``, ``length``) inside a ``ChunkedResponse``
go out with ``os.sendfile`` on the socket once everything before them has left the
transport's buffer; while the socket is full the writer waits for writability on a
duplicate of the socket descriptor (the loop will not watch the transport's own). If
sendfile is unavailable for the descriptor (or ``use_sendfile=False``), regions are copied
with ``pread`` through the transport. A response whose regions hold at most
``_INLINE_REGIONS`` bytes in all is read with ``pread`` and written whole instead: one
send() and one TCP segment rather than a write, a wait for the transport's buffer and a
sendfile per region (the consumer of a tailed partition gets such answers a thousand
times a second). A region whose file got shorter than promised closes the connection:
the frame size already sent cannot be honoured.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odradek.broker.connection import Connection
    from odradek.broker.network import NetworkServer

__all__ = ["Close", "Outgoing", "ResponseWriter", "TruncatedRegionError"]

# Bytes read with pread per write when file regions are copied instead of sendfile'd.
_COPY_CHUNK = 256 * 1024
# Responses whose file regions hold at most this many bytes in all are copied and
# written whole, not sent with sendfile (see the module docstring).
_INLINE_REGIONS = 32 * 1024
# Ready responses are joined into one write up to this size (fewer send() calls).
_COALESCE_LIMIT = 256 * 1024
# errno values meaning "sendfile cannot be used for this pair of descriptors".
_SENDFILE_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK}


class TruncatedRegionError(Exception):
    """A file region ended before its promised length."""


class Close:
    """Queued instead of a response: close the connection once earlier ones are sent."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


# One handled request's answer as the writer takes it.
Outgoing = bytes | list[Any] | Close


class ResponseWriter:
    """Writes one connection's answers, in request order; see the module docstring.

    ``request_done`` is called once per answer that has left (or per dropped one), so the
    connection can count requests in flight. The connection sets ``transport`` and
    ``socket_fd`` when it is made, ``closed`` whenever it closes (both flags change
    together, so neither side asks the other on its per-request path), and forwards the
    transport's pause/resume calls.
    """

    def __init__(
        self, connection: Connection, server: NetworkServer, request_done: Callable[[], None]
    ) -> None:
        self._connection = connection
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._log = server.logger
        self._request_done = request_done
        self.transport: asyncio.Transport | None = None
        self.responses: deque[Outgoing | asyncio.Future[Outgoing | None]] = deque()
        self._wakeup = asyncio.Event()
        self._idle = False  # the writer task waits for responses, none queued
        self._paused = False
        self._resumed: asyncio.Future[None] | None = None
        self.closed = False
        self.socket_fd = -1  # -1: not a socket we may sendfile to (TLS owns it)
        self._poll_fd = -1  # a dup of the socket, only while a region waits for the socket
        self._sendfile_usable = server.use_sendfile

    def deliver(self, outgoing: Outgoing | asyncio.Future[Outgoing | None]) -> bool:
        """Answer a handled request: written now when nothing is queued before it (rather
        than waking the writer, which would wait for its turn behind every other ready
        connection), else queued for the writer. False when the answer closes the
        connection."""
        if (
            isinstance(outgoing, bytes)
            and self._idle
            and not self.responses
            and not self._paused
            and self.transport is not None
        ):
            self.transport.write(outgoing)
            self._request_done()
            return True
        self.responses.append(outgoing)
        self._wakeup.set()
        return not isinstance(outgoing, Close)

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)

    def connection_lost(self) -> None:
        """The transport is gone: give back the poll descriptor, wake every wait."""
        self.closed = True
        if self._poll_fd >= 0:
            with contextlib.suppress(Exception):
                self._loop.remove_writer(self._poll_fd)
            self._close_poll_fd()
        self._wakeup.set()
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)

    async def run(self) -> None:
        """The writer task: send queued answers in order until the connection closes."""
        try:
            while True:
                while not self.responses:
                    if self.closed:
                        return
                    self._wakeup.clear()
                    self._idle = True
                    try:
                        await self._wakeup.wait()
                    finally:
                        self._idle = False
                item = self.responses.popleft()
                if isinstance(item, asyncio.Future):
                    try:
                        resolved = await item
                    except asyncio.CancelledError:
                        if self.closed:
                            return
                        raise
                    if resolved is None:
                        self._request_done()
                        continue
                    item = resolved
                if isinstance(item, Close):
                    connection = self._connection
                    self._log.warning(
                        "closing connection %s from %s:%d: %s",
                        connection.connection_id,
                        connection.client_host,
                        connection.client_port,
                        item.reason,
                    )
                    connection.close()
                    return
                if self.closed:
                    return
                if isinstance(item, bytes):
                    # Coalesce responses that are already encoded into one write: one
                    # send() for a burst of pipelined small responses.
                    batch = [item]
                    size = len(item)
                    while (
                        size < _COALESCE_LIMIT
                        and self.responses
                        and isinstance(self.responses[0], bytes)
                    ):
                        following: bytes = self.responses.popleft()  # type: ignore[assignment]
                        batch.append(following)
                        size += len(following)
                    if len(batch) > 1:
                        item = b"".join(batch)
                    await self._send(item)
                    for _ in batch:
                        self._request_done()
                    continue
                await self._send(item)
                self._request_done()
        except Exception as exc:
            # Half a response may be on the wire: the stream cannot be continued.
            if not self.closed:
                self._log.warning(
                    "closing connection %s: sending a response failed: %s",
                    self._connection.connection_id,
                    exc,
                )
                self._connection.abort()

    async def _send(self, item: bytes | list[Any]) -> None:
        transport = self.transport
        assert transport is not None
        if isinstance(item, list):
            item = self.inline(item)
        if isinstance(item, bytes):
            transport.write(item)
        else:
            for chunk in item:
                if isinstance(chunk, bytes | bytearray | memoryview):
                    transport.write(chunk)
                else:
                    await self._send_region(chunk)
                if self.closed:
                    return
        await self._drain()

    def inline(self, chunks: list[Any]) -> bytes | list[Any]:
        """A small response as one bytes object (its regions read with pread); larger ones
        (or anything not a plain region) as they are."""
        regions = 0
        for chunk in chunks:
            if not isinstance(chunk, bytes | bytearray | memoryview):
                length = getattr(chunk, "length", None)
                position = getattr(chunk, "position", None)
                if not isinstance(length, int) or not isinstance(position, int):
                    return chunks
                if getattr(chunk, "fd", None) is None:
                    return chunks
                regions += length
                if regions > _INLINE_REGIONS:
                    return chunks
        parts: list[bytes | bytearray | memoryview] = []
        for chunk in chunks:
            if isinstance(chunk, bytes | bytearray | memoryview):
                parts.append(chunk)
            elif chunk.length > 0:
                data = os.pread(chunk.fd, chunk.length, chunk.position)
                while len(data) < chunk.length:  # a short read: ask for the rest
                    more = os.pread(
                        chunk.fd, chunk.length - len(data), chunk.position + len(data)
                    )
                    if not more:
                        raise TruncatedRegionError(
                            f"file region ended {chunk.length - len(data)} bytes early "
                            "(file truncated?)"
                        )
                    data += more
                parts.append(data)
                self._server.bytes_copied_from_regions += chunk.length
        return b"".join(parts)

    async def _drain(self) -> None:
        while self._paused and not self.closed:
            self._resumed = self._loop.create_future()
            await self._resumed

    async def _wait_write_buffer_empty(self) -> None:
        transport = self.transport
        assert transport is not None
        if transport.get_write_buffer_size() == 0 or self.closed:
            return
        high, low = self._server.write_buffer_limits
        # With both limits at 0 the transport pauses us now and resumes us exactly when
        # its buffer is empty, which is when the socket is ours for sendfile.
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            await self._drain()
        finally:
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=high, low=low)

    async def _send_region(self, region: Any) -> None:
        fd = getattr(region, "fd", None)
        length = getattr(region, "length", None)
        position = getattr(region, "position", None)
        if fd is None or length is None or position is None:
            raise TypeError(f"response chunk {region!r} is neither bytes nor a file region")
        if length <= 0:
            return
        sent = 0
        transport = self.transport
        assert transport is not None
        if self._sendfile_usable and self.socket_fd >= 0:
            await self._wait_write_buffer_empty()
        # Bytes still queued in the transport would go out after the region: never let
        # that happen (a loop whose flow control differs falls back to copying).
        if (
            self._sendfile_usable
            and self.socket_fd >= 0
            and transport.get_write_buffer_size() == 0
        ):
            try:
                while sent < length and not self.closed:
                    try:
                        count = os.sendfile(self.socket_fd, fd, position + sent, length - sent)
                    except BlockingIOError:
                        await self._wait_socket_writable()
                        continue
                    except OSError as exc:
                        if exc.errno not in _SENDFILE_UNSUPPORTED or sent:
                            raise
                        self._log.info("sendfile unavailable (%s); copying file regions", exc)
                        self._sendfile_usable = False
                        break
                    if count == 0:
                        raise TruncatedRegionError(
                            f"file region ended {length - sent} bytes early (file truncated?)"
                        )
                    sent += count
                    self._server.bytes_sent_with_sendfile += count
            finally:
                self._close_poll_fd()
        while sent < length and not self.closed:
            piece = os.pread(fd, min(_COPY_CHUNK, length - sent), position + sent)
            if not piece:
                raise TruncatedRegionError(
                    f"file region ended {length - sent} bytes early (file truncated?)"
                )
            transport.write(piece)
            sent += len(piece)
            self._server.bytes_copied_from_regions += len(piece)
            await self._drain()

    async def _wait_socket_writable(self) -> None:
        # The transport owns the socket's descriptor in the event loop, and loops refuse a
        # second watcher on it; a duplicate descriptor of the same socket is accepted and
        # becomes writable at the same moment.
        if self._poll_fd < 0:
            self._poll_fd = os.dup(self.socket_fd)
        writable = self._loop.create_future()
        self._loop.add_writer(self._poll_fd, _resolve, writable)
        try:
            await writable
        finally:
            self._loop.remove_writer(self._poll_fd)

    def _close_poll_fd(self) -> None:
        # Closed as soon as a region is sent: an open duplicate would keep the socket
        # alive (no FIN) after the transport closes it.
        if self._poll_fd >= 0:
            os.close(self._poll_fd)
            self._poll_fd = -1


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
