"""The broker's network layer: accept connections, read frames, dispatch, respond in order.

One ``asyncio.BufferedProtocol`` per connection (works on the default loop and on uvloop,
plain and TLS). The socket reads straight into a :class:`~odradek.protocol.framing.FrameReader`'s
buffers: small frames into a per-connection receive buffer and copied out once, frames
above 32 KiB into a buffer of their own (reused through the listener's ``BufferPool``
once nothing refers to it), handed to the handler without another copy. Per connection
there are two tasks owned by the connection:

* the *processor* decodes queued frames and calls ``handler.handle`` one request at a
  time, in arrival order. Like Kafka (which mutes a channel until its request is done),
  requests of one connection never run concurrently, so an idempotent producer's
  pipelined batches are appended in order. A handler that wants to let later requests
  proceed while it waits (a purgatory) returns ``DeferredResponse(awaitable)``;
* the *writer* sends responses strictly in request order, waiting for a deferred one
  before sending anything after it.

Back-pressure: reading pauses while a connection has ``max_in_flight_per_connection``
requests received but not answered, or ``max_buffered_bytes_per_connection`` bytes of
queued frames (16 MiB by default, less than half the listener's buffer pool; at most
one socket read beyond either bound), and resumes below them.
The writer honours the transport's write-buffer flow control, so a client that does not
read cannot make the broker buffer without bound either.

Errors, as Kafka handles them:

* a size prefix above ``socket.request.max.bytes`` or negative, an undecodable header, an
  unknown API key, a version outside the table (except ApiVersions) or a body that does
  not parse: the connection is closed and one line is logged (no traceback);
* an ApiVersions request of a version we do not know: an UNSUPPORTED_VERSION response in
  the v0 format listing our ranges (clients retry with a version from it);
* a handler exception: an error response with UNKNOWN_SERVER_ERROR for that request
  (logged with its traceback, since it is a bug); for Produce with ``acks=0``, which
  expects no response, the connection is closed instead, as Kafka does;
* connections idle (nothing read or written, nothing in flight) for
  ``connections.max.idle.ms`` are closed (a negative value disables this, as in Kafka).

Fairness and limits (no single request or client may stall the others):

* the server accepts connections itself, so it can honour ``max.connections`` (stop
  accepting until one closes) and ``max.connections.per.ip`` (close at once), counted
  across every listener by a shared :class:`~odradek.broker.quotas.ConnectionQuotas`;
* a shared :class:`~odradek.broker.quotas.MemoryPool` (``queued.max.request.bytes``)
  reserves each frame larger than ``_SMALL_FRAME`` when its size prefix arrives, as
  Kafka's MemoryPool does; a connection whose frame does not fit stops reading until
  answered requests release memory. Small frames are never held back, so a client with
  ordinary requests is served while big ones wait;
* after each request the processor yields to the event loop, so one connection with a
  thousand pipelined requests takes turns with the others;
* frames larger than ``_OFFLOAD_FRAME`` are decoded, and their responses (and any
  ``ResponseValues``) built and encoded, on ``executor`` threads: the loop keeps serving
  other connections while a request listing a million partitions is parsed. Handlers
  that loop over many items yield to the loop as they go (``handlers.common.Ticker``).

File regions (objects with ``fd``, ``position``, ``length``) inside a ``ChunkedResponse``
go out with ``os.sendfile`` on the socket once everything before them has left the
transport's buffer; while the socket is full the connection waits for writability on a
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
import gc
import itertools
import logging
import os
import socket
import sys
import time
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from contextvars import Context, ContextVar, copy_context
from dataclasses import dataclass
from typing import Any, Protocol

from odradek import timeouts
from odradek.broker.quotas import ConnectionQuotas, MemoryPool
from odradek.logformat import current_request
from odradek.protocol.build import build_response
from odradek.protocol.codec import (
    api_versions_unsupported_response,
    decode_request,
    encode_response,
)
from odradek.protocol.error_responses import error_response
from odradek.protocol.errors import DecodeError, ErrorCode
from odradek.protocol.framing import BufferPool, FrameReader, FrameTooLargeError
from odradek.protocol.headers import RequestHeader
from odradek.protocol.versions import API_VERSIONS, PRODUCE, SUPPORTED, api_name

__all__ = [
    "current_listener",
    "ChunkedResponse",
    "DeferredResponse",
    "NetworkServer",
    "RequestContext",
    "RequestHandler",
    "ResponseValues",
]

DEFAULT_MAX_REQUEST_SIZE = 104_857_600  # socket.request.max.bytes
DEFAULT_MAX_IN_FLIGHT = 100
DEFAULT_IDLE_MS = 600_000  # connections.max.idle.ms
# Bytes read with pread per write when file regions are copied instead of sendfile'd.
_COPY_CHUNK = 256 * 1024
# Responses whose file regions hold at most this many bytes in all are copied and
# written whole, not sent with sendfile (see the module docstring).
_INLINE_REGIONS = 32 * 1024
# Ready responses are joined into one write up to this size (fewer send() calls).
_COALESCE_LIMIT = 256 * 1024
# errno values meaning "sendfile cannot be used for this pair of descriptors".
_SENDFILE_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK}
# Frames up to this size never wait for the memory pool: a client with ordinary requests
# keeps being served while big requests wait for memory.
_SMALL_FRAME = 64 * 1024
# Frames above this size are decoded (and answered) on executor threads. Decoding costs
# about 5 us per array element; 64 KiB holds at most ~10k elements, ~50 ms on the loop.
_OFFLOAD_FRAME = 64 * 1024
# Requests up to this size may be handled in the read callback (_handle_inline).
_INLINE_FRAME = 16 * 1024
# Longest time full garbage collections stay suspended by back-to-back large requests.
_MAX_SUSPENSION_S = 10.0
# Frame buffers kept for reuse by a listener (see FrameReader and BufferPool).
_POOLED_BYTES = 32 * 1024 * 1024
# A connection stops reading once this many bytes of whole requests wait for their turn
# (a single larger request is still read). Kept under half the pool, so a client that
# pipelines large Produce requests has every frame read into a pooled buffer: a fresh
# one costs a zero-fill, its page faults and its unmapping when freed, more than the
# copy from the socket itself. Kafka reads one request per connection at a time.
_READ_AHEAD_BYTES = 16 * 1024 * 1024
# Listen backlog: where connections wait while max.connections is reached.
_BACKLOG = 128
# ResponseValues with more items than this are built and encoded on executor threads.
_OFFLOAD_ITEMS = 2000


# The listener of the request being handled, for code that gets no RequestContext (the
# group coordinator asks for its own endpoint, which depends on the listener). Each
# connection's processor task sets it once; tasks copy the context they start in.
current_listener: ContextVar[str] = ContextVar("current_listener", default="PLAINTEXT")


@dataclass(slots=True)
class RequestContext:
    """Who sent a request and its header; handed to the handler with the request."""

    header: RequestHeader
    client_host: str
    client_port: int
    connection_id: str
    received_at: float = 0.0  # the server clock when the frame was complete
    listener_name: str = "PLAINTEXT"  # the listener the request came in on
    principal: str = "User:ANONYMOUS"  # who authenticated (TLS certificate or SASL)
    # With an authorizer: the request's access check (security.enforcement.Check), for
    # handlers that authorise inside (Fetch); None when every request is allowed.
    authz: Any = None
    # KIP-219: a throttled handler calls this with the throttle time (ms); the connection
    # reads nothing more until it is over. None outside a connection (tests).
    mute: Callable[[int], None] | None = None


@dataclass(slots=True)
class ChunkedResponse:
    """A pre-encoded, framed response (size prefix included) as bytes and file regions.

    Regions need ``fd``, ``position`` and ``length``; ``encode_fetch_response`` builds these.
    """

    chunks: list[bytes | Any]


@dataclass(slots=True)
class DeferredResponse:
    """The handler's ordering-sensitive work is done; the response comes later.

    ``result`` resolves to what ``handle`` could have returned (entity, ChunkedResponse,
    None). Later requests of the connection are handled meanwhile; responses still go
    out in request order.
    """

    result: Awaitable[object | None]


@dataclass(slots=True)
class ResponseValues:
    """A response given as ``build_response`` values, built and encoded by the network
    layer: on an executor thread when ``items`` (a handler's count of array elements)
    is large, so a response listing a million partitions does not block the loop."""

    values: dict[str, Any]
    items: int = 0


class RequestHandler(Protocol):
    async def handle(self, ctx: RequestContext, request: object) -> object | None:
        """Return a kio response entity, a ChunkedResponse, a DeferredResponse or None."""
        ...


class _TruncatedRegionError(Exception):
    """A file region ended before its promised length."""


class _Close:
    """Queued instead of a response: close the connection once earlier ones are sent."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Started:
    """Queued instead of a frame: a request whose handling began in the read callback
    (``_Connection._handle_inline``) and awaits something; the processor finishes it
    before any request read after it."""

    __slots__ = ("frame", "task")

    def __init__(self, frame: bytearray | memoryview, task: asyncio.Task[Any]) -> None:
        self.frame = frame
        self.task = task


@types.coroutine
def _resume(coro: Any, step: Any) -> Any:
    """Go on driving ``coro``, whose first step ran outside any task and yielded ``step``,
    exactly as a task would have: every later yield, value and exception passes through."""
    while True:
        try:
            value = yield step
        except BaseException as exc:  # a cancellation thrown into the task
            try:
                step = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                step = coro.send(value)
            except StopIteration as stop:
                return stop.value


async def _continue(coro: Any, step: Any) -> Any:
    return await _resume(coro, step)


_Outgoing = bytes | list[Any] | _Close


class _Connection(asyncio.BufferedProtocol):
    def __init__(self, server: NetworkServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._log = server.logger
        self._reader = FrameReader(server.max_request_size, server.buffer_pool)
        self._transport: asyncio.Transport | None = None
        self._pending: deque[tuple[bytearray | memoryview | _Close, float]] = deque()
        self._pending_bytes = 0
        self._pending_wakeup = asyncio.Event()
        # The processor waits for frames and has none: a lone small request may then be
        # handled in the read callback itself (_handle_inline), without waking it.
        self._processor_idle = False
        self._context: Context = copy_context()
        self._responses: deque[_Outgoing | asyncio.Future[_Outgoing | None]] = deque()
        self._responses_wakeup = asyncio.Event()
        self._in_flight = 0  # received, not yet answered (or dropped for acks=0)
        self._pool = server.memory_pool
        self._reserved = 0  # pool bytes reserved for the incomplete frame
        self._pool_blocked = False  # waiting for the pool to reserve the incomplete frame
        self._reading_paused = False
        self._muted_until = 0.0  # loop time a quota throttle ends (KIP-219)
        self._write_paused = False
        self._writer_idle = False  # the writer waits for responses, none queued
        self._write_resumed: asyncio.Future[None] | None = None
        self._closed = False
        self._stopping = False  # server shutdown: take no new requests
        self.idle = asyncio.Event()  # set whenever nothing is in flight
        self.idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._deferred: set[asyncio.Future[Any]] = set()
        self.last_active = server.clock()
        self.client_host = ""
        self.client_port = 0
        self.counted_ip: str | None = None  # set once the quotas count this connection
        self.connection_id = ""
        self._socket_fd = -1
        self._poll_fd = -1  # a dup of the socket, only while a region waits for the socket
        self._sendfile_usable = server.use_sendfile
        self.principal = "User:ANONYMOUS"
        # Set while a SASL listener's connection has not authenticated yet.
        self._sasl: Any = None

    # asyncio.Protocol callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("?", 0)
        local = transport.get_extra_info("sockname") or ("?", 0)
        self.client_host, self.client_port = str(peer[0]), int(peer[1])
        self.connection_id = (
            f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}-{next(self._server._connection_ids)}"
        )
        sock = transport.get_extra_info("socket")
        if sock is not None and self._server.ssl_context is None:  # TLS owns the socket
            self._socket_fd = sock.fileno()
        if self._server.security is not None:
            hooks = self._server.security
            principal = hooks.principal_of(transport, self.connection_id)
            if principal is None:  # a certificate no mapping rule accepts
                self.abort()
                return
            self.principal = principal
            self._sasl = hooks.sasl_gate(self.connection_id, self._server.api_versions)
        self._server._connections.add(self)
        high, low = self._server.write_buffer_limits
        transport.set_write_buffer_limits(high=high, low=low)
        self._context.run(current_listener.set, self._server.listener_name)
        name = f"odradek-conn-{self.connection_id}"
        self._tasks.append(self._loop.create_task(self._process(), name=f"{name}-process"))
        self._tasks.append(self._loop.create_task(self._write(), name=f"{name}-write"))

    def get_buffer(self, sizehint: int) -> memoryview:
        # The socket reads straight into the frame reader's buffers (see FrameReader).
        return self._reader.get_buffer()

    def data_received(self, data: bytes) -> None:
        # For loops or transports that do not drive a BufferedProtocol.
        view = memoryview(data)
        while view and not self._closed:
            target = self._reader.get_buffer()
            take = min(len(target), len(view))
            target[:take] = view[:take]
            view = view[take:]
            self.buffer_updated(take)

    def buffer_updated(self, nbytes: int) -> None:
        if self._closed or self._stopping:
            return
        self.last_active = self._server.clock()
        try:
            frames = self._reader.buffer_updated(nbytes)
            self._charge(frames)
        except FrameTooLargeError as exc:
            self._log.warning(
                "closing connection %s from %s:%d: %s",
                self.connection_id,
                self.client_host,
                self.client_port,
                exc,
            )
            self.abort()
            return
        if not frames:
            self._update_reading()
            return
        now = self.last_active
        if (
            self._processor_idle
            and len(frames) == 1
            and self._reader.error is None
            and self._sasl is None
            and len(frames[0]) <= _INLINE_FRAME
        ):
            self._handle_inline(frames.pop(), now)
            self._update_reading()
            return
        self._processor_idle = False
        for frame in frames:
            self._pending.append((frame, now))
            self._pending_bytes += len(frame)
        self._in_flight += len(frames)
        error = self._reader.error
        if error is not None:
            # The bytes after the frames we got are not a frame: answer what came before
            # (Kafka does), then close. Nothing more is read from this connection.
            self._log.warning(
                "closing connection %s from %s:%d after %d earlier requests: %s",
                self.connection_id,
                self.client_host,
                self.client_port,
                len(frames),
                error,
            )
            self._pending.append((_Close(str(error)), now))
            self._in_flight += 1
            self.stop_reading()
        self.idle.clear()
        self._pending_wakeup.set()
        self._update_reading()

    def eof_received(self) -> bool:
        # A half-closed client gets nothing more; Kafka closes such channels too.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._poll_fd >= 0:
            with contextlib.suppress(Exception):
                self._loop.remove_writer(self._poll_fd)
            self._close_poll_fd()
        self._server._connections.discard(self)
        if self.counted_ip is not None:
            self._server.quotas.remove(self.counted_ip)
            self.counted_ip = None
        self._pool.forget(self)
        self._pool.release(
            self._reserved + sum(len(f) for f, _ in self._pending if not isinstance(f, _Close))
        )
        self._reserved = 0
        self._pending.clear()
        self._pending_bytes = 0
        self._pending_wakeup.set()
        self._responses_wakeup.set()
        if self._write_resumed is not None and not self._write_resumed.done():
            self._write_resumed.set_result(None)
        for future in self._deferred:
            future.cancel()
        # The processor is not cancelled: a handler half-way through a request finishes
        # it (its response is dropped) rather than being interrupted at an arbitrary
        # await. The writer has nothing left to do.
        for task in self._tasks[1:]:
            task.cancel()
        self.idle.set()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._write_resumed is not None and not self._write_resumed.done():
            self._write_resumed.set_result(None)

    # Control ----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def reading_paused(self) -> bool:
        return self._reading_paused

    def abort(self) -> None:
        """Close at once, dropping anything unsent."""
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Close after the transport flushes what it already holds."""
        self._closed = True
        if self._transport is not None:
            self._transport.close()

    def stop_reading(self) -> None:
        """Server shutdown: accept no more requests; finish the ones received."""
        self._stopping = True
        if self._transport is not None and not self._closed and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()

    def cancel_tasks(self) -> list[asyncio.Task[None]]:
        for task in self._tasks:
            task.cancel()
        return self._tasks

    def _charge(self, frames: list[memoryview | bytearray]) -> None:
        """Account the bytes this read completed, and reserve the frame it started."""
        pool = self._pool
        completed = 0
        for frame in frames:  # usually one: a loop costs a quarter of sum() over a genexpr
            completed += len(frame)
        if frames and self._reserved:
            completed -= self._reserved  # the first frame is the one reserved earlier
            self._reserved = 0
        pool.charge(completed)
        if not self._reserved and not self._pool_blocked:
            self._reserve()

    def _reserve(self) -> None:
        size = self._reader.pending_frame_size
        if size is None:
            return
        pool = self._pool
        if size <= _SMALL_FRAME or pool.capacity is None or pool.used + size <= pool.capacity:
            pool.charge(size)
            self._reserved = size
            if self._pool_blocked:
                self._pool_blocked = False
                self._update_reading()
            return
        if not self._pool_blocked:
            self._pool_blocked = True
            self._update_reading()
        pool.wait(self, self._reserve_again)

    def _reserve_again(self) -> None:
        if not self._closed:
            self._reserve()

    def _release(self, size: int) -> None:
        self._pool.release(size)

    def _update_reading(self) -> None:
        if self._closed or self._transport is None:
            return
        server = self._server
        over = (
            self._pool_blocked
            or self._in_flight >= server.max_in_flight_per_connection
            or self._pending_bytes >= server.max_buffered_bytes_per_connection
            or self._muted_until > 0.0
        )
        if over and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        elif not over and self._reading_paused and not self._stopping:
            self._reading_paused = False
            self._transport.resume_reading()

    def mute_for(self, ms: int) -> None:
        """Stop reading for ``ms`` after a throttled response (client quotas, KIP-219)."""
        if ms <= 0 or self._closed or self._transport is None:
            return
        until = self._loop.time() + ms / 1000
        if until <= self._muted_until:
            return
        self._muted_until = until
        self._update_reading()
        self._loop.call_at(until, self._unmute, until)

    def _unmute(self, until: float) -> None:
        if self._muted_until == until:
            self._muted_until = 0.0
            self._update_reading()

    def _request_done(self) -> None:
        self._in_flight -= 1
        self.last_active = self._server.clock()
        if self._in_flight == 0:
            self.idle.set()
        self._update_reading()

    # Processing -------------------------------------------------------------------------

    async def _process(self) -> None:
        current_listener.set(self._server.listener_name)
        while True:
            while not self._pending:
                if self._closed:
                    return
                self._pending_wakeup.clear()
                self._processor_idle = True
                try:
                    await self._pending_wakeup.wait()
                finally:
                    self._processor_idle = False
            item, received_at = self._pending.popleft()
            if isinstance(item, _Close):
                self._responses.append(item)
                self._responses_wakeup.set()
                return
            started = item if isinstance(item, _Started) else None
            frame = item.frame if started is not None else item
            del item
            size = len(frame)
            self._pending_bytes -= size
            try:
                if started is not None:
                    task, started = started.task, None
                    outgoing = await task
                    del task
                else:
                    outgoing = await self._handle_frame(frame, received_at)
            except asyncio.CancelledError:
                self._release(size)
                raise
            except Exception as exc:  # a bug in the protocol layer: drop the connection
                self._log.exception("unexpected error on connection %s", self.connection_id)
                outgoing = _Close(f"unexpected {type(exc).__name__}")
            self._retire(frame, size)
            del frame
            if self._closed:
                return
            if outgoing is None:
                self._request_done()
                continue
            if isinstance(outgoing, list):
                # A small Fetch answer is sent like bytes; a region that cannot be read
                # leaves it to the writer, which closes the connection.
                with contextlib.suppress(OSError, _TruncatedRegionError):
                    outgoing = self._inline(outgoing)
            if not self._deliver(outgoing):
                return
            if self._pending:
                # Take turns: a connection with many pipelined requests must not keep the
                # loop from the others (a handler that never awaits never yields).
                await asyncio.sleep(0)

    def _handle_inline(self, frame: bytearray | memoryview, received_at: float) -> None:
        """Handle a lone small request in the read callback, where the processor would
        have been woken to do it (a task switch per request of a linger.ms=0 producer).

        The handler coroutine's first step runs here, in the processor's context
        variables; most requests (Produce with acks 0 or 1, Metadata, ...) finish in it
        and are answered at once. One that awaits something goes on in a task that the
        processor finishes before any later request, so answers stay in request order.
        """
        size = len(frame)
        self._in_flight += 1
        self.idle.clear()
        coro = self._handle_frame(frame, received_at)
        try:
            step = self._context.run(coro.send, None)
        except StopIteration as stop:
            outgoing = stop.value
        except asyncio.CancelledError:
            outgoing = _Close("request handling cancelled")
        except Exception as exc:  # a bug in the protocol layer: drop the connection
            self._log.exception("unexpected error on connection %s", self.connection_id)
            outgoing = _Close(f"unexpected {type(exc).__name__}")
        else:
            task = self._loop.create_task(_continue(coro, step), context=self._context)
            self._processor_idle = False  # later requests queue behind this one
            self._pending.append((_Started(frame, task), received_at))
            self._pending_bytes += size
            self._pending_wakeup.set()
            return
        del coro
        # As _process does after a request.
        self._retire(frame, size)
        del frame
        if self._closed:
            return
        if outgoing is None:
            self._request_done()
            return
        if not self._deliver(outgoing):
            # The writer closes after the answers before it; nothing more is read.
            self.stop_reading()

    def _retire(self, frame: bytearray | memoryview, size: int) -> None:
        """A handled request's frame: its dedicated buffer goes back to the pool (reused
        only once nothing refers to it any more: BufferPool.take checks, so the caller
        drops its own reference next) and its bytes are released."""
        owner = frame.obj if isinstance(frame, memoryview) else None
        if isinstance(owner, bytearray):
            self._server.buffer_pool.give_back(owner)
        self._release(size)

    def _deliver(self, outgoing: _Outgoing | asyncio.Future[_Outgoing | None]) -> bool:
        """Answer a handled request: written now when nothing is queued before it (rather
        than waking the writer, which would wait for its turn behind every other ready
        connection), else queued for the writer. False when the answer closes the
        connection."""
        if (
            isinstance(outgoing, bytes)
            and self._writer_idle
            and not self._responses
            and not self._write_paused
            and self._transport is not None
        ):
            self._transport.write(outgoing)
            self._request_done()
            return True
        self._responses.append(outgoing)
        self._responses_wakeup.set()
        return not isinstance(outgoing, _Close)

    async def _handle_frame(
        self, frame: bytes | memoryview, received_at: float
    ) -> _Outgoing | asyncio.Future[_Outgoing | None] | None:
        sasl = self._sasl
        if sasl is not None and (not sasl.authenticated or sasl.needs(frame)):
            intercepted = self._authenticate(frame)
            if intercepted is not None:
                return intercepted
        large = len(frame) > _OFFLOAD_FRAME
        server = self._server
        lane = server.produce_lane
        handling = None
        if lane is not None and len(frame) > 1 and frame[0] == 0 and frame[1] == 0:  # Produce
            accepted = lane.accept(memoryview(frame), server.api_versions)
            if accepted is not None:
                ctx = self._request_context(accepted[0], received_at)
                handling = self._answer_lone(ctx, lane.answer(ctx, accepted[1]), frame)
        if handling is None:
            handling = self._handle_decoded(frame, received_at, large=large)
        if not large:
            return await handling
        _LargeRequests.begin()
        try:
            return await handling
        finally:
            _LargeRequests.end()

    def _authenticate(self, frame: bytes | memoryview) -> _Outgoing | None:
        """Run a frame of a not yet authenticated SASL connection through its gate
        (:mod:`odradek.broker.security.sasl`); None: handle the frame as usual."""
        verdict = self._sasl.intercept(frame)
        if self._sasl.authenticated:
            self.principal = self._sasl.principal
            if self._sasl.reauth_ms <= 0:  # never needed again (no re-authentication)
                self._sasl = None
        if verdict.passthrough:
            return None
        if verdict.close is None:
            return verdict.response
        if verdict.response is not None:
            self._responses.append(verdict.response)  # sent before the close below
        return _Close(verdict.close)

    async def _handle_decoded(
        self, frame: bytes | memoryview, received_at: float, *, large: bool
    ) -> _Outgoing | asyncio.Future[_Outgoing | None] | None:
        server = self._server
        try:
            if large:
                header, request = await self._loop.run_in_executor(
                    server.executor, decode_request, frame, server.api_versions
                )
            else:
                header, request = decode_request(frame, server.api_versions)
        except DecodeError as exc:
            if (
                exc.api_key == API_VERSIONS
                and exc.error_code == ErrorCode.unsupported_version
                and isinstance(exc.header, RequestHeader)
            ):
                return api_versions_unsupported_response(exc.header, server.api_versions)
            return _Close(f"{exc} ({self._describe_undecodable(exc)})")
        ctx = self._request_context(header, received_at)
        observer = server.request_observer
        started = server.clock() if observer is not None else 0.0
        # Log lines emitted while the request runs name it (odradek.logformat); a deferred
        # response's task copies the context, so it is created before the reset.
        token = current_request.set(ctx)
        try:
            try:
                result = await server.handler.handle(ctx, request)
            except asyncio.CancelledError:
                raise
            except Exception:
                return self._handler_failed(ctx, request)
            if isinstance(result, DeferredResponse):
                future = asyncio.ensure_future(
                    self._finish_deferred(ctx, request, result, started)
                )
                self._deferred.add(future)
                future.add_done_callback(self._deferred.discard)
                return future
        finally:
            current_request.reset(token)
        # A handler that counts its items says whether its answer is big; any other
        # answer to a large request may be (it lists what the request listed).
        big = result.items > _OFFLOAD_ITEMS if isinstance(result, ResponseValues) else large
        if big and result is not None and not isinstance(result, ChunkedResponse):
            outgoing = await self._loop.run_in_executor(
                server.executor, self._encode, header, request, result
            )
        else:
            outgoing = self._encode(header, request, result)
        if observer is not None:
            observer.done(ctx, request, started, server.clock())
        if large and not (header.api_key == PRODUCE and isinstance(result, ChunkedResponse)):
            # Freeing a million decoded entries takes a tenth of a second: drop the last
            # references on a network thread rather than on the event loop. (A Produce
            # answered by the direct encoder listed at most a thousand partitions: freed
            # here, without a thread round trip before its answer goes out.)
            garbage = [request, result]
            del request, result
            await self._loop.run_in_executor(server.executor, garbage.clear)
        return outgoing

    def _request_context(self, header: RequestHeader, received_at: float) -> RequestContext:
        return RequestContext(
            header,
            self.client_host,
            self.client_port,
            self.connection_id,
            received_at,
            self._server.listener_name,
            self.principal,
            mute=self.mute_for,
        )

    async def _answer_lone(
        self,
        ctx: RequestContext,
        answer: Coroutine[Any, Any, bytes | None],
        frame: bytearray | memoryview,
    ) -> _Outgoing | None:
        """The produce lane's answer (``NetworkServer.produce_lane``), in the request's
        logging context, with a failing handler answered as on the generic path."""
        token = current_request.set(ctx)
        try:
            return await answer
        except asyncio.CancelledError:
            raise
        except Exception:
            try:  # the generic answer to a failed handler lists the request's partitions
                _header, request = decode_request(frame, self._server.api_versions)
            except DecodeError:
                self._log.exception("produce lane failed on connection %s", self.connection_id)
                return _Close("handler failed for a Produce request")
            return self._handler_failed(ctx, request)
        finally:
            current_request.reset(token)

    async def _finish_deferred(
        self, ctx: RequestContext, request: object, deferred: DeferredResponse, started: float
    ) -> _Outgoing | None:
        try:
            result = await deferred.result
        except asyncio.CancelledError:
            raise
        except Exception:
            return self._handler_failed(ctx, request)
        outgoing = self._encode(ctx.header, request, result)
        observer = self._server.request_observer
        if observer is not None:
            observer.done(ctx, request, started, self._server.clock())
        return outgoing

    def _describe_undecodable(self, exc: DecodeError) -> str:
        """What is known of a request that did not decode, for its log line."""
        parts = []
        if exc.api_key is not None:
            version = "?" if exc.api_version is None else exc.api_version
            parts.append(f"api {api_name(exc.api_key)} v{version}")
        parts.append(f"correlation id {exc.correlation_id}")
        client_id = getattr(exc.header, "client_id", None)
        if client_id is not None:
            parts.append(f"client id {client_id}")
        parts.append(f"listener {self._server.listener_name}")
        return ", ".join(parts)

    def _handler_failed(self, ctx: RequestContext, request: object) -> _Outgoing:
        header = ctx.header
        self._log.exception(
            "handler failed for %s v%d (correlation id %d) from client %s on listener %s, "
            "connection %s",
            api_name(header.api_key),
            header.api_version,
            header.correlation_id,
            header.client_id,
            ctx.listener_name,
            self.connection_id,
        )
        if header.api_key == PRODUCE and getattr(request, "acks", None) == 0:
            # The client expects no response; closing is the only way to tell it.
            return _Close("handler failed for a Produce request with acks=0")
        return self._error(header, request, ErrorCode.unknown_server_error)

    def _error(self, header: RequestHeader, request: object, code: ErrorCode) -> bytes:
        response = error_response(header.api_key, header.api_version, request, code)
        return encode_response(header, response)

    def _encode(self, header: RequestHeader, request: object, result: object) -> _Outgoing | None:
        if result is None:
            return None
        if isinstance(result, ChunkedResponse):
            chunks = result.chunks
            if len(chunks) == 1 and isinstance(chunks[0], bytes):
                return chunks[0]  # one encoded answer: may be written at once
            return list(chunks)
        try:
            if isinstance(result, ResponseValues):
                values, result.values = result.values, {}  # freed once built, not after
                result = build_response(header.api_key, header.api_version, values)
                del values
            return encode_response(header, result)
        except Exception:
            self._log.exception(
                "cannot encode the response to %s v%d (correlation id %d) for client %s on "
                "listener %s",
                api_name(header.api_key),
                header.api_version,
                header.correlation_id,
                header.client_id,
                self._server.listener_name,
            )
            return self._error(header, request, ErrorCode.unknown_server_error)

    # Writing ----------------------------------------------------------------------------

    async def _write(self) -> None:
        try:
            while True:
                while not self._responses:
                    if self._closed:
                        return
                    self._responses_wakeup.clear()
                    self._writer_idle = True
                    try:
                        await self._responses_wakeup.wait()
                    finally:
                        self._writer_idle = False
                item = self._responses.popleft()
                if isinstance(item, asyncio.Future):
                    try:
                        resolved = await item
                    except asyncio.CancelledError:
                        if self._closed:
                            return
                        raise
                    if resolved is None:
                        self._request_done()
                        continue
                    item = resolved
                if isinstance(item, _Close):
                    self._log.warning(
                        "closing connection %s from %s:%d: %s",
                        self.connection_id,
                        self.client_host,
                        self.client_port,
                        item.reason,
                    )
                    self.close()
                    return
                if self._closed:
                    return
                if isinstance(item, bytes):
                    # Coalesce responses that are already encoded into one write: one
                    # send() for a burst of pipelined small responses.
                    batch = [item]
                    size = len(item)
                    while (
                        size < _COALESCE_LIMIT
                        and self._responses
                        and isinstance(self._responses[0], bytes)
                    ):
                        following: bytes = self._responses.popleft()  # type: ignore[assignment]
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
            if not self._closed:
                self._log.warning(
                    "closing connection %s: sending a response failed: %s",
                    self.connection_id,
                    exc,
                )
                self.abort()

    async def _send(self, item: bytes | list[Any]) -> None:
        transport = self._transport
        assert transport is not None
        if isinstance(item, list):
            item = self._inline(item)
        if isinstance(item, bytes):
            transport.write(item)
        else:
            for chunk in item:
                if isinstance(chunk, bytes | bytearray | memoryview):
                    transport.write(chunk)
                else:
                    await self._send_region(chunk)
                if self._closed:
                    return
        await self._drain()

    def _inline(self, chunks: list[Any]) -> bytes | list[Any]:
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
                        raise _TruncatedRegionError(
                            f"file region ended {chunk.length - len(data)} bytes early "
                            "(file truncated?)"
                        )
                    data += more
                parts.append(data)
                self._server.bytes_copied_from_regions += chunk.length
        return b"".join(parts)

    async def _drain(self) -> None:
        while self._write_paused and not self._closed:
            self._write_resumed = self._loop.create_future()
            await self._write_resumed

    async def _wait_write_buffer_empty(self) -> None:
        transport = self._transport
        assert transport is not None
        if transport.get_write_buffer_size() == 0 or self._closed:
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
        transport = self._transport
        assert transport is not None
        if self._sendfile_usable and self._socket_fd >= 0:
            await self._wait_write_buffer_empty()
        # Bytes still queued in the transport would go out after the region: never let
        # that happen (a loop whose flow control differs falls back to copying).
        if (
            self._sendfile_usable
            and self._socket_fd >= 0
            and transport.get_write_buffer_size() == 0
        ):
            try:
                while sent < length and not self._closed:
                    try:
                        count = os.sendfile(self._socket_fd, fd, position + sent, length - sent)
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
                        raise _TruncatedRegionError(
                            f"file region ended {length - sent} bytes early (file truncated?)"
                        )
                    sent += count
                    self._server.bytes_sent_with_sendfile += count
            finally:
                self._close_poll_fd()
        while sent < length and not self._closed:
            piece = os.pread(fd, min(_COPY_CHUNK, length - sent), position + sent)
            if not piece:
                raise _TruncatedRegionError(
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
            self._poll_fd = os.dup(self._socket_fd)
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


class _LargeRequests:
    """Process-wide settings while any large request is being decoded, handled or encoded.

    A request listing a million partitions creates millions of objects; CPython's full
    garbage collections scan every live object and stop every thread, for up to a second
    each, several times over. They are suspended while large requests are in progress
    (the objects are acyclic and freed by reference counting) and resumed after. Large
    requests that follow each other without a gap (producers sending big batches) would
    keep them suspended for good, so after ``_MAX_SUSPENSION_S`` one full collection runs
    anyway. The GIL switch interval is shortened too, so the event loop gets the
    interpreter back from a decoding thread within half a millisecond instead of five.
    """

    in_progress = 0
    _saved_interval = 0.005
    _gc_was_enabled = True
    _suspended_at = 0.0

    @classmethod
    def begin(cls) -> None:
        if cls.in_progress == 0:
            cls._gc_was_enabled = gc.isenabled()
            gc.disable()
            cls._suspended_at = time.monotonic()
            cls._saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(cls._saved_interval, 0.0005))
        cls.in_progress += 1

    @classmethod
    def end(cls) -> None:
        cls.in_progress -= 1
        if cls.in_progress == 0:
            sys.setswitchinterval(cls._saved_interval)
            if cls._gc_was_enabled:
                gc.enable()
        elif cls._gc_was_enabled and time.monotonic() - cls._suspended_at > _MAX_SUSPENSION_S:
            gc.collect()
            cls._suspended_at = time.monotonic()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class NetworkServer:
    """The broker's listener; see the module docstring for its behaviour."""

    def __init__(
        self,
        handler: RequestHandler,
        host: str,
        port: int,
        *,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
        max_in_flight_per_connection: int = DEFAULT_MAX_IN_FLIGHT,
        connections_max_idle_ms: int = DEFAULT_IDLE_MS,
        max_buffered_bytes_per_connection: int | None = None,
        api_versions: Mapping[int, tuple[int, int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
        write_buffer_limits: tuple[int, int] = (64 * 1024, 16 * 1024),
        idle_check_interval_s: float | None = None,
        use_sendfile: bool = True,
        listener_name: str = "PLAINTEXT",
        quotas: ConnectionQuotas | None = None,
        memory_pool: MemoryPool | None = None,
        executor: Executor | None = None,
        security: Any = None,
        request_observer: Any = None,
        produce_lane: Any = None,
    ) -> None:
        """``api_versions`` is the table to accept and list in ApiVersions fallbacks;
        by default ``handler.advertised_versions()`` when the handler has it, else every
        supported version. ``max_buffered_bytes_per_connection`` defaults to
        ``max_request_size``. ``use_sendfile=False`` copies file regions with pread
        (for transports where the socket is not ours, such as TLS).

        ``quotas``, ``memory_pool`` and ``executor`` are shared by every listener of a
        broker; a server given none gets its own (unlimited quotas and pool, one thread).

        ``security`` (an :class:`odradek.broker.security.hooks.ListenerHooks`) makes the
        listener TLS and/or SASL: it gives the SSL context, each connection's principal
        and SASL gate. TLS owns the socket, so file regions are copied, not sendfile'd.
        """
        if max_in_flight_per_connection < 1:
            raise ValueError("max_in_flight_per_connection must be >= 1")
        if max_request_size < 0:
            raise ValueError("max_request_size must be >= 0")
        self.handler = handler
        self.host = host
        self._requested_port = port
        self.port = port
        self.max_request_size = max_request_size
        self.max_in_flight_per_connection = max_in_flight_per_connection
        self.max_buffered_bytes_per_connection = (
            min(max_request_size, _READ_AHEAD_BYTES)
            if max_buffered_bytes_per_connection is None
            else max_buffered_bytes_per_connection
        )
        self.connections_max_idle_ms = connections_max_idle_ms
        self._explicit_versions = api_versions
        self.api_versions: Mapping[int, tuple[int, int]] = api_versions or SUPPORTED
        self.clock = clock
        self.logger = logger or logging.getLogger(__name__)
        self.write_buffer_limits = write_buffer_limits
        idle_s = max(connections_max_idle_ms, 0) / 1000
        self._idle_check_interval = idle_check_interval_s or min(max(idle_s / 4, 0.005), 5.0)
        self._connections: set[_Connection] = set()
        self._connection_ids = itertools.count()
        self._server: asyncio.AbstractServer | None = None
        self._reaper: asyncio.Task[None] | None = None
        self.security = security
        self.ssl_context = getattr(security, "ssl_context", None)
        self.use_sendfile = use_sendfile and self.ssl_context is None
        self.listener_name = listener_name
        self.quotas = quotas or ConnectionQuotas()
        self.memory_pool = memory_pool or MemoryPool()
        self._own_executor = executor is None
        self.executor: Executor = executor or ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="odradek-network"
        )
        self._listen_sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self.bytes_sent_with_sendfile = 0
        self.bytes_copied_from_regions = 0
        # Told of every answered request (broker.metrics.requests.RequestObserver): request
        # metrics and the slow-request log. None costs nothing per request.
        self.request_observer = request_observer
        # Answers lone Produce requests without the generic machinery
        # (broker.handlers.produce_lane); only where no request observer wants each request.
        self.produce_lane = produce_lane if request_observer is None else None
        # Dedicated buffers of large frames, reused across this listener's connections.
        self.buffer_pool = BufferPool(_POOLED_BYTES)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        """Bind and start accepting; ``port`` 0 picks a free port, read it from ``.port``."""
        if self._server is not None:
            raise RuntimeError("NetworkServer already started")
        if self._explicit_versions is None:
            advertised = getattr(self.handler, "advertised_versions", None)
            if callable(advertised):
                self.api_versions = dict(advertised())
        loop = asyncio.get_running_loop()
        # Bound without asyncio's server so that accepting can wait (max.connections).
        # start_serving=False: the server object only owns the listening sockets.
        self._server = await loop.create_server(
            self._make_connection,
            self.host,
            self._requested_port,
            reuse_address=True,
            start_serving=False,
        )
        for transport_socket in self._server.sockets or ():
            listening = socket.socket(fileno=os.dup(transport_socket.fileno()))
            listening.setblocking(False)
            listening.listen(_BACKLOG)
            self._listen_sockets.append(listening)
        if self._listen_sockets:
            self.port = self._listen_sockets[0].getsockname()[1]
        for listening in self._listen_sockets:
            self._acceptors.append(
                loop.create_task(self._accept_forever(listening), name="odradek-acceptor")
            )
        if self.connections_max_idle_ms >= 0:  # negative: never reap (Kafka's meaning)
            self._reaper = loop.create_task(self._reap_forever(), name="odradek-idle-reaper")

    async def _accept_forever(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        quotas = self.quotas
        while True:
            # At max.connections, stop accepting: new peers wait in the backlog (Kafka).
            await quotas.wait_for_room()
            try:
                accepted, address = await loop.sock_accept(listening)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # EMFILE and friends: back off instead of spinning
                self.logger.warning("accepting a connection failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            ip = str(address[0]) if isinstance(address, tuple) else str(address)
            if not quotas.try_add(ip):
                self.logger.info(
                    "closing a new connection from %s: max.connections.per.ip (%d) reached",
                    ip,
                    quotas.limit_for(ip),
                )
                accepted.close()
                continue
            connection = _Connection(self)
            connection.counted_ip = ip  # connection_lost gives the slot back
            if self.ssl_context is not None:
                # The TLS handshake runs in its own task: a slow or silent client must
                # not hold up accepting the others.
                task = loop.create_task(self._set_up(connection, accepted, ip))
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)
                continue
            await self._set_up(connection, accepted, ip)

    async def _set_up(self, connection: _Connection, accepted: socket.socket, ip: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self.ssl_context is not None:
                await loop.connect_accepted_socket(
                    lambda c=connection: c, accepted, ssl=self.ssl_context
                )
            else:
                await loop.connect_accepted_socket(lambda c=connection: c, accepted)
        except asyncio.CancelledError:
            if connection.counted_ip is not None:
                connection.counted_ip = None
                self.quotas.remove(ip)
            accepted.close()
            raise
        except Exception as exc:
            if connection.counted_ip is not None:
                connection.counted_ip = None
                self.quotas.remove(ip)
            accepted.close()
            self.logger.warning("cannot set up a connection from %s: %s", ip, exc)

    def _make_connection(self) -> _Connection:
        return _Connection(self)

    def connection_stats(self) -> list[dict[str, Any]]:
        """Per-connection state, for tests and diagnostics."""
        return [
            {
                "connection_id": c.connection_id,
                "client": f"{c.client_host}:{c.client_port}",
                "in_flight": c.in_flight,
                "reading_paused": c.reading_paused,
                "last_active": c.last_active,
                "principal": c.principal,
            }
            for c in self._connections
        ]

    def reap_idle_connections(self) -> int:
        """Close connections idle for ``connections.max.idle.ms``; return how many."""
        now = self.clock()
        limit = self.connections_max_idle_ms / 1000
        reaped = 0
        for connection in list(self._connections):
            if connection.in_flight == 0 and now - connection.last_active >= limit:
                self.logger.debug(
                    "closing connection %s: idle for more than %d ms",
                    connection.connection_id,
                    self.connections_max_idle_ms,
                )
                connection.close()
                self._connections.discard(connection)
                reaped += 1
        return reaped

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self._idle_check_interval)
            try:
                self.reap_idle_connections()
            except Exception:  # never let the reaper die silently
                self.logger.exception("idle connection reaper failed")

    async def shutdown(self, timeout: float = 30) -> None:
        """Stop accepting, finish requests already received (up to ``timeout``), close."""
        if self._server is None:
            return
        server, self._server = self._server, None
        for acceptor in self._acceptors:
            acceptor.cancel()
        for acceptor in self._acceptors:
            with contextlib.suppress(asyncio.CancelledError):
                await acceptor
        self._acceptors.clear()
        for handshake in list(self._handshakes):
            handshake.cancel()
        for listening in self._listen_sockets:
            listening.close()
        self._listen_sockets.clear()
        server.close()
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        connections = list(self._connections)
        for connection in connections:
            connection.stop_reading()
        waits = [asyncio.ensure_future(c.idle.wait()) for c in connections if not c.closed]
        if waits:
            _done, pending = await asyncio.wait(waits, timeout=timeout)
            for wait in pending:
                wait.cancel()
            if pending:
                self.logger.warning(
                    "shutdown: %d connection(s) still busy after %.1fs; closing them",
                    len(pending),
                    timeout,
                )
        tasks: list[asyncio.Task[None]] = []
        for connection in connections:
            if connection.in_flight:
                connection.abort()
            else:
                connection.close()
            tasks.extend(connection.cancel_tasks())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._connections.clear()
        with contextlib.suppress(Exception):
            await timeouts.wait_for(server.wait_closed(), timeout=max(timeout, 1))
        if self._own_executor:
            self.executor.shutdown(wait=False)
