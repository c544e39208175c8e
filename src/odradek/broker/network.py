"""The broker's listener: bind, accept connections, own what they share, shut down.

The network layer in four parts, one module each:

* this module, :class:`NetworkServer`: one listener (host, port, TLS and/or SASL). It
  binds, accepts connections itself, owns what its connections share (the frame
  buffer pool, the executor threads, the memory pool and connection quotas it is given),
  closes idle connections and shuts down gracefully;
* :mod:`odradek.broker.connection`: one client connection's receive and processing side
  (frames read into pooled buffers, back-pressure, handling in request order, the
  produce lane, SASL interception, errors as Kafka answers them);
* :mod:`odradek.broker.response_writer`: the connection's sending side (answers in
  request order, coalesced writes, write flow control, sendfile of file regions);
* :mod:`odradek.broker.requests`: what handlers get and return (``RequestContext``,
  ``ChunkedResponse``, ``DeferredResponse``, ``ResponseValues``), so that handlers never
  depend on the server.

Limits the listener enforces, as Kafka does:

* the server accepts connections itself, so it can honour ``max.connections`` (stop
  accepting until one closes) and ``max.connections.per.ip`` (close at once), counted
  across every listener by a shared :class:`~odradek.broker.quotas.ConnectionQuotas`;
* connections idle (nothing read or written, nothing in flight) for
  ``connections.max.idle.ms`` are closed (a negative value disables this, as in Kafka);
* ``queued.max.request.bytes`` (a shared :class:`~odradek.broker.quotas.MemoryPool`)
  and ``socket.request.max.bytes`` bound what connections may read.

Every connection logs through the listener's logger (``odradek.broker.network`` unless
one is given).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from odradek import timeouts
from odradek.broker.connection import Connection
from odradek.broker.quotas import ConnectionQuotas, MemoryPool
from odradek.broker.requests import RequestHandler
from odradek.protocol.framing import BufferPool
from odradek.protocol.versions import SUPPORTED

__all__ = ["NetworkServer"]

DEFAULT_MAX_REQUEST_SIZE = 104_857_600  # socket.request.max.bytes
DEFAULT_MAX_IN_FLIGHT = 100
DEFAULT_IDLE_MS = 600_000  # connections.max.idle.ms
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
        self._connections: set[Connection] = set()
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
            connection = Connection(self)
            connection.counted_ip = ip  # connection_lost gives the slot back
            if self.ssl_context is not None:
                # The TLS handshake runs in its own task: a slow or silent client must
                # not hold up accepting the others.
                task = loop.create_task(self._set_up(connection, accepted, ip))
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)
                continue
            await self._set_up(connection, accepted, ip)

    async def _set_up(self, connection: Connection, accepted: socket.socket, ip: str) -> None:
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

    def _make_connection(self) -> Connection:
        return Connection(self)

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
