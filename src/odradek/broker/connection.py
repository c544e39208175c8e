"""One broker connection's receive and processing side: read frames, handle them in order.

One :class:`Connection` (an ``asyncio.BufferedProtocol``) per client connection, made by
the listener (:class:`~odradek.broker.network.NetworkServer`); it works on the default
loop and on uvloop, plain and TLS. The socket reads straight into a
:class:`~odradek.protocol.framing.FrameReader`'s buffers: small frames into a
per-connection receive buffer and copied out once, frames above 32 KiB into a buffer of
their own (reused through the listener's ``BufferPool`` once nothing refers to it),
handed to the handler without another copy. Per connection there are two tasks owned by
the connection:

* the *processor* decodes queued frames and calls ``handler.handle`` one request at a
  time, in arrival order. Like Kafka (which mutes a channel until its request is done),
  requests of one connection never run concurrently, so an idempotent producer's
  pipelined batches are appended in order. A handler that wants to let later requests
  proceed while it waits (a purgatory) returns ``DeferredResponse(awaitable)``. A lone
  small request read while the processor waits is handled in the read callback itself
  (``_handle_inline``), and a lone Produce request may be answered by the produce lane
  (``NetworkServer.produce_lane``) instead of the generic decode-handle-encode path;
* the *writer* (:class:`~odradek.broker.response_writer.ResponseWriter`, which the
  connection owns) sends responses strictly in request order.

Back-pressure: reading pauses while a connection has ``max_in_flight_per_connection``
requests received but not answered, or ``max_buffered_bytes_per_connection`` bytes of
queued frames (16 MiB by default, less than half the listener's buffer pool; at most
one socket read beyond either bound), and resumes below them. A quota throttle mutes
reading for its throttle time (KIP-219).

Errors, as Kafka handles them:

* a size prefix above ``socket.request.max.bytes`` or negative, an undecodable header, an
  unknown API key, a version outside the table (except ApiVersions) or a body that does
  not parse: the connection is closed and one line is logged (no traceback);
* an ApiVersions request of a version we do not know: an UNSUPPORTED_VERSION response in
  the v0 format listing our ranges (clients retry with a version from it);
* a handler exception: an error response with UNKNOWN_SERVER_ERROR for that request
  (logged with its traceback, since it is a bug); for Produce with ``acks=0``, which
  expects no response, the connection is closed instead, as Kafka does.

Fairness (no single request or client may stall the others):

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
  While such a request is in progress, :class:`~odradek.broker.large_requests.LargeRequests`
  suspends full garbage collections.
"""

from __future__ import annotations

import asyncio
import contextlib
import types
from collections import deque
from collections.abc import Coroutine
from contextvars import Context, copy_context
from typing import TYPE_CHECKING, Any

from odradek.broker.answer_encoding import describe_undecodable, encode_answer, handler_failed
from odradek.broker.large_requests import LargeRequests
from odradek.broker.requests import (
    ChunkedResponse,
    DeferredResponse,
    RequestContext,
    ResponseValues,
    current_listener,
)
from odradek.broker.response_writer import Close, Outgoing, ResponseWriter, TruncatedRegionError
from odradek.logformat import current_request
from odradek.protocol.codec import (
    api_versions_unsupported_response,
    decode_request,
)
from odradek.protocol.errors import DecodeError, ErrorCode
from odradek.protocol.framing import FrameReader, FrameTooLargeError
from odradek.protocol.headers import RequestHeader
from odradek.protocol.versions import API_VERSIONS, PRODUCE

if TYPE_CHECKING:
    from odradek.broker.network import NetworkServer

__all__ = ["Connection"]

# Frames up to this size never wait for the memory pool: a client with ordinary requests
# keeps being served while big requests wait for memory.
_SMALL_FRAME = 64 * 1024
# Frames above this size are decoded (and answered) on executor threads. Decoding costs
# about 5 us per array element; 64 KiB holds at most ~10k elements, ~50 ms on the loop.
_OFFLOAD_FRAME = 64 * 1024
# Requests up to this size may be handled in the read callback (_handle_inline).
_INLINE_FRAME = 16 * 1024
# ResponseValues with more items than this are built and encoded on executor threads.
_OFFLOAD_ITEMS = 2000


class _Declined:
    """What Connection._lane_now returns for a frame the produce lane does not take."""

    __slots__ = ()


_DECLINED = _Declined()


class _Started:
    """Queued instead of a frame: a request whose handling began in the read callback
    (``Connection._handle_inline``) and awaits something; the processor finishes it
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


class Connection(asyncio.BufferedProtocol):
    """One client connection: reads frames, handles them in order, hands answers to its
    :class:`~odradek.broker.response_writer.ResponseWriter`; see the module docstring."""

    def __init__(self, server: NetworkServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._log = server.logger
        self._reader = FrameReader(server.max_request_size, server.buffer_pool)
        self._transport: asyncio.Transport | None = None
        self._pending: deque[tuple[bytearray | memoryview | Close, float]] = deque()
        self._pending_bytes = 0
        self._pending_wakeup = asyncio.Event()
        # The processor waits for frames and has none: a lone small request may then be
        # handled in the read callback itself (_handle_inline), without waking it.
        self._processor_idle = False
        self._context: Context = copy_context()
        self._in_flight = 0  # received, not yet answered (or dropped for acks=0)
        self._pool = server.memory_pool
        self._reserved = 0  # pool bytes reserved for the incomplete frame
        self._pool_blocked = False  # waiting for the pool to reserve the incomplete frame
        self._reading_paused = False
        self._muted_until = 0.0  # loop time a quota throttle ends (KIP-219)
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
        self.principal = "User:ANONYMOUS"
        # Set while a SASL listener's connection has not authenticated yet.
        self._sasl: Any = None
        self._writer = ResponseWriter(self, server, self._request_done)
        # Bound once: _process and _handle_inline call it per request.
        self._deliver = self._writer.deliver

    # asyncio.Protocol callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = transport  # type: ignore[assignment]
        self._writer.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("?", 0)
        local = transport.get_extra_info("sockname") or ("?", 0)
        self.client_host, self.client_port = str(peer[0]), int(peer[1])
        self.connection_id = (
            f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}-{next(self._server._connection_ids)}"
        )
        sock = transport.get_extra_info("socket")
        if sock is not None and self._server.ssl_context is None:  # TLS owns the socket
            self._writer.socket_fd = sock.fileno()
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
        self._tasks.append(self._loop.create_task(self._writer.run(), name=f"{name}-write"))

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
            self._pending.append((Close(str(error)), now))
            self._in_flight += 1
            self.stop_reading()
        self.idle.clear()
        self._pending_wakeup.set()
        self._update_reading()

    def eof_received(self) -> bool:
        # A half-closed client gets nothing more; Kafka closes such channels too.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = self._writer.closed = True
        self._server._connections.discard(self)
        if self.counted_ip is not None:
            self._server.quotas.remove(self.counted_ip)
            self.counted_ip = None
        self._pool.forget(self)
        self._pool.release(
            self._reserved + sum(len(f) for f, _ in self._pending if not isinstance(f, Close))
        )
        self._reserved = 0
        self._pending.clear()
        self._pending_bytes = 0
        self._pending_wakeup.set()
        self._writer.connection_lost()
        for future in self._deferred:
            future.cancel()
        # The processor is not cancelled: a handler half-way through a request finishes
        # it (its response is dropped) rather than being interrupted at an arbitrary
        # await. The writer has nothing left to do.
        for task in self._tasks[1:]:
            task.cancel()
        self.idle.set()

    def pause_writing(self) -> None:
        self._writer.pause()

    def resume_writing(self) -> None:
        self._writer.resume()

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
        self._closed = self._writer.closed = True
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Close after the transport flushes what it already holds."""
        self._closed = self._writer.closed = True
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
            if isinstance(item, Close):
                self._deliver(item)
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
                outgoing = Close(f"unexpected {type(exc).__name__}")
            self._retire(frame, size)
            del frame
            if not self._hand_on(outgoing):
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
        task = None
        try:
            # A lone Produce first: the lane answers most without any coroutine.
            outgoing = self._context.run(self._lane_now, frame, received_at)
            if type(outgoing) is types.CoroutineType:  # the lane waits for something
                task = self._loop.create_task(outgoing, context=self._context)
            elif outgoing is _DECLINED:
                coro = self._handle_frame(frame, received_at, try_lane=False)
                try:
                    step = self._context.run(coro.send, None)
                except StopIteration as stop:
                    outgoing = stop.value
                else:
                    task = self._loop.create_task(_continue(coro, step), context=self._context)
                del coro
        except asyncio.CancelledError:
            outgoing = Close("request handling cancelled")
        except Exception as exc:  # a bug in the protocol layer: drop the connection
            self._log.exception("unexpected error on connection %s", self.connection_id)
            outgoing = Close(f"unexpected {type(exc).__name__}")
        if task is not None:
            self._processor_idle = False  # later requests queue behind this one
            self._pending.append((_Started(frame, task), received_at))
            self._pending_bytes += size
            self._pending_wakeup.set()
            return
        # As _process does after a request.
        self._retire(frame, size)
        del frame
        if not self._hand_on(outgoing) and not self._closed:
            # The writer closes after the answers before it; nothing more is read.
            self.stop_reading()

    def _hand_on(self, outgoing: Outgoing | None) -> bool:
        """A handled request's answer (its frame already retired) to the writer: False
        when the connection is done with (closed, or this answer closes it)."""
        if self._closed:
            return False
        if outgoing is None:
            self._request_done()
            return True
        if isinstance(outgoing, list):
            # A small Fetch answer is sent like bytes; a region that cannot be read
            # leaves it to the writer, which closes the connection.
            with contextlib.suppress(OSError, TruncatedRegionError):
                outgoing = self._writer.inline(outgoing)
        return self._deliver(outgoing)

    def _retire(self, frame: bytearray | memoryview, size: int) -> None:
        """A handled request's frame: its dedicated buffer goes back to the pool (reused
        only once nothing refers to it any more: BufferPool.take checks, so the caller
        drops its own reference next) and its bytes are released."""
        owner = frame.obj if isinstance(frame, memoryview) else None
        if isinstance(owner, bytearray):
            self._server.buffer_pool.give_back(owner)
        self._release(size)

    async def _handle_frame(
        self, frame: bytes | memoryview, received_at: float, *, try_lane: bool = True
    ) -> Outgoing | asyncio.Future[Outgoing | None] | None:
        sasl = self._sasl
        if sasl is not None and (not sasl.authenticated or sasl.needs(frame)):
            intercepted = self._authenticate(frame)
            if intercepted is not None:
                return intercepted
        large = len(frame) > _OFFLOAD_FRAME
        if large:
            LargeRequests.begin()
        try:
            if try_lane:
                answered = self._lane_now(frame, received_at)
                if type(answered) is types.CoroutineType:
                    return await answered
                if answered is not _DECLINED:
                    return answered
            return await self._handle_decoded(frame, received_at, large=large)
        finally:
            if large:
                LargeRequests.end()

    def _lane_now(
        self, frame: bytes | memoryview, received_at: float
    ) -> Outgoing | Coroutine[Any, Any, Outgoing | None] | _Declined | None:
        """A lone Produce, answered by the produce lane (``NetworkServer.produce_lane``):
        the answer, or a coroutine finishing it when the lane waits for something, or
        _DECLINED when the lane does not take the frame (the generic path answers it)."""
        server = self._server
        lane = server.produce_lane
        if lane is None or len(frame) < 2 or frame[0] != 0 or frame[1] != 0:  # not Produce
            return _DECLINED
        accepted = lane.accept(memoryview(frame), server.api_versions)
        if accepted is None:
            return _DECLINED
        ctx = self._request_context(accepted[0], received_at)
        token = current_request.set(ctx)
        try:
            answer = lane.answer(ctx, accepted[1])
        except Exception:
            return self._lane_failed(ctx, frame)
        finally:
            current_request.reset(token)
        if answer is None or type(answer) is bytes:
            return answer
        return self._lane_later(ctx, answer, frame)  # type: ignore[arg-type]

    async def _lane_later(
        self, ctx: RequestContext, answer: Coroutine[Any, Any, bytes | None], frame: Any
    ) -> Outgoing | None:
        """The rest of a lane answer that waits (an offloaded append, acks=all
        replication), in the request's logging context."""
        token = current_request.set(ctx)
        try:
            return await answer
        except asyncio.CancelledError:
            raise
        except Exception:
            return self._lane_failed(ctx, frame)
        finally:
            current_request.reset(token)

    def _authenticate(self, frame: bytes | memoryview) -> Outgoing | None:
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
            self._writer.responses.append(verdict.response)  # sent before the close below
        return Close(verdict.close)

    async def _handle_decoded(
        self, frame: bytes | memoryview, received_at: float, *, large: bool
    ) -> Outgoing | asyncio.Future[Outgoing | None] | None:
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
            return Close(f"{exc} ({describe_undecodable(exc, server.listener_name)})")
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
                return handler_failed(ctx, request, self._log)
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
                server.executor, encode_answer, header, request, result, server
            )
        else:
            outgoing = encode_answer(header, request, result, server)
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

    def _lane_failed(self, ctx: RequestContext, frame: bytearray | memoryview) -> Outgoing:
        """The answer when the produce lane's handler failed: as on the generic path."""
        try:  # the generic answer to a failed handler lists the request's partitions
            _header, request = decode_request(frame, self._server.api_versions)
        except DecodeError:
            self._log.exception("produce lane failed on connection %s", self.connection_id)
            return Close("handler failed for a Produce request")
        return handler_failed(ctx, request, self._log)

    async def _finish_deferred(
        self, ctx: RequestContext, request: object, deferred: DeferredResponse, started: float
    ) -> Outgoing | None:
        try:
            result = await deferred.result
        except asyncio.CancelledError:
            raise
        except Exception:
            return handler_failed(ctx, request, self._log)
        server = self._server
        outgoing = encode_answer(ctx.header, request, result, server)
        observer = server.request_observer
        if observer is not None:
            observer.done(ctx, request, started, server.clock())
        return outgoing
