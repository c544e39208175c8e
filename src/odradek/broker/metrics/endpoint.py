"""The Prometheus endpoint: ``GET /metrics`` over HTTP/1.1, served on the broker's loop.

Serving on the event loop (not on prometheus_client's own HTTP thread) means the
collector reads the broker's dictionaries from the thread that changes them, so a scrape
never sees a dictionary change size under it, and no lock is taken on a hot path. The
collector only gathers numbers (a walk over the hosted partitions and groups); the text
format, most of a scrape's cost, is written on a worker thread while the loop serves
requests. bench/bench_metrics.py measures both.

Only ``GET`` (and ``HEAD``) of ``/metrics`` (or ``/``) are answered; anything else gets a
404 or 405. One request per connection: the answer ends with ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

from odradek import timeouts

log = logging.getLogger(__name__)

# Longest request head accepted, and how long a client may take to send it.
_MAX_HEAD = 8192
_READ_TIMEOUT_S = 10.0


class _Gathered:
    """Families already collected, in the shape generate_latest reads (a registry)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


class MetricsEndpoint:
    def __init__(
        self,
        collect: Callable[[], Iterable[Metric]],
        host: str,
        port: int,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``collect`` gathers every family; it runs on the event loop. ``prepare``, when
        given, is awaited before it (figures that need other brokers' answers)."""
        self.collect = collect
        self.prepare = prepare
        # How long the previous scrape held the event loop (exported by the next one).
        self.last_collect_seconds = 0.0
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._serve, self.host, self.port, reuse_address=True, limit=_MAX_HEAD
            )
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"metrics.port: cannot listen on {self.host}:{self.port}: "
                f"{os.strerror(exc.errno) if exc.errno else exc}",
            ) from None
        sockets = self._server.sockets or ()
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._clients):
            task.cancel()
        with contextlib.suppress(Exception):
            await timeouts.wait_for(self._server.wait_closed(), 2)
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        try:
            try:
                head = await timeouts.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                return
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split()
            if len(parts) != 3:
                await self._answer(writer, 400, b"bad request\n")
                return
            method, target = parts[0], parts[1].split("?", 1)[0]
            if target not in ("/metrics", "/"):
                await self._answer(writer, 404, b"not found\n")
            elif method not in ("GET", "HEAD"):
                await self._answer(writer, 405, b"method not allowed\n")
            else:
                if self.prepare is not None:
                    try:
                        await self.prepare()
                    except Exception:  # the rest of the scrape is still worth serving
                        log.exception("preparing a metrics scrape failed")
                started = time.perf_counter()
                gathered = _Gathered(list(self.collect()))
                self.last_collect_seconds = time.perf_counter() - started
                loop = asyncio.get_running_loop()
                body = await loop.run_in_executor(None, generate_latest, gathered)
                await self._answer(
                    writer, 200, body, CONTENT_TYPE_LATEST, include_body=method == "GET"
                )
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("serving a metrics scrape failed")
            with contextlib.suppress(Exception):
                await self._answer(writer, 500, b"internal error\n")
        finally:
            writer.close()
            if task is not None:
                self._clients.discard(task)

    @staticmethod
    async def _answer(
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        content_type: str = "text/plain; charset=utf-8",
        *,
        include_body: bool = True,
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
        head = (
            f"HTTP/1.1 {status} {reason.get(status, 'Internal Server Error')}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + (body if include_body else b""))
        await writer.drain()
