"""NetworkServer with small handlers written here: ordering, back-pressure, reaping, errors,
shutdown, sendfile; then real clients (librdkafka, kafka-python, aiokafka) negotiating."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from odradek.broker.network import NetworkServer
from odradek.broker.requests import (
    ChunkedResponse,
    DeferredResponse,
    RequestContext,
    current_listener,
)
from odradek.logformat import current_request
from odradek.protocol.build import build_request, build_response
from odradek.protocol.codec import decode_response, encode_request
from odradek.protocol.fetch_encoder import encode_fetch_response
from odradek.protocol.framing import RECEIVE_BUFFER_MIN
from odradek.protocol.versions import (
    API_VERSIONS,
    FETCH,
    HEARTBEAT,
    METADATA,
    PRODUCE,
    SUPPORTED,
    build_api_versions_response,
)

LOOPS = ["asyncio", "uvloop"]
pytestmark = pytest.mark.timeout(60)


def run(loop_kind: str, main: Callable[[], Awaitable[Any]], timeout: float = 30) -> Any:
    factory = uvloop.new_event_loop if loop_kind == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(asyncio.wait_for(main(), timeout))


def heartbeat(version: int = 4) -> Any:
    return build_request(
        HEARTBEAT, version, {"group_id": "g", "generation_id": 1, "member_id": "m"}
    )


class Client:
    """A raw Kafka client over asyncio streams, using odradek's codec."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**26)
        return cls(reader, writer)

    def send(self, request: Any, correlation_id: int, client_id: str | None = "test") -> None:
        self.writer.write(encode_request(request.__version__, correlation_id, client_id, request))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def read_frame(self, timeout: float = 10) -> bytes:
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout))[0]
        return await asyncio.wait_for(self.reader.readexactly(size), timeout)

    async def read(self, api_key: int, version: int, timeout: float = 10) -> tuple[int, Any]:
        return decode_response(api_key, version, await self.read_frame(timeout))

    async def closed_by_server(self, timeout: float = 5) -> bool:
        """True when the server closes the connection within ``timeout`` (bytes it sent
        before closing, such as half a response, are skipped)."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                data = await asyncio.wait_for(self.reader.read(65536), remaining)
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
            if data == b"":
                return True
        return False

    def close(self) -> None:
        self.writer.close()


class EchoHandler:
    """Answers ApiVersions, Heartbeat and Produce; records calls and overlap."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []  # (api key, correlation id)
        self.active = 0
        self.max_active = 0
        self.delay: Callable[[int], float] = lambda _cid: 0.0
        self.deferred = False
        self.fail_on: set[int] = set()
        self.gate: asyncio.Event | None = None

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        header = ctx.header
        self.calls.append((header.api_key, header.correlation_id))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if header.correlation_id in self.fail_on:
                raise RuntimeError(f"boom {header.correlation_id}")
            if header.api_key == API_VERSIONS:
                return build_api_versions_response(header.api_version)
            if header.api_key == PRODUCE and request.acks == 0:
                return None
            response = build_response(header.api_key, header.api_version, {"error_code": 0})
            delay = self.delay(header.correlation_id)
            if self.deferred:

                async def later() -> Any:
                    await asyncio.sleep(delay)
                    return response

                return DeferredResponse(later())
            if delay:
                await asyncio.sleep(delay)
            return response
        finally:
            self.active -= 1


async def started(handler: Any, **kwargs: Any) -> NetworkServer:
    server = NetworkServer(handler, "127.0.0.1", 0, **kwargs)
    await server.start()
    return server


# Ordering ---------------------------------------------------------------------------------


@pytest.mark.parametrize("loop_kind", LOOPS)
@pytest.mark.parametrize("deferred", [False, True])
def test_pipelined_requests_are_answered_in_order(loop_kind: str, deferred: bool) -> None:
    async def main() -> None:
        handler = EchoHandler()
        rng = random.Random(7)
        delays = {cid: rng.choice([0, 0, 0.001, 0.005, 0.02]) for cid in range(60)}
        handler.delay = delays.__getitem__
        handler.deferred = deferred
        server = await started(handler)
        client = await Client.connect(server.port)
        for cid in range(60):
            client.send(heartbeat(), cid)
        got = [(await client.read(HEARTBEAT, 4))[0] for _ in range(60)]
        assert got == list(range(60))
        # Handlers of one connection never overlap (Kafka's per-connection ordering).
        assert handler.max_active == 1
        assert [cid for _key, cid in handler.calls] == list(range(60))
        client.close()
        await server.shutdown(timeout=5)

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_lone_requests_run_in_the_read_callback_and_keep_their_order(loop_kind: str) -> None:
    """A lone small request is handled in the read callback (no processor task switch),
    in the connection's context variables; one that awaits there is finished by a task
    ahead of the requests read after it, and handlers still never overlap."""

    async def main() -> None:
        handler = EchoHandler()
        handler.delay = lambda cid: 0.2 if cid == 1 else 0.0
        seen: list[tuple[int, bool, str, bool]] = []
        echo = handler.handle

        async def handle(ctx: RequestContext, request: Any) -> Any:
            seen.append((ctx.header.correlation_id, asyncio.current_task() is None,
                         current_listener.get(), current_request.get() is ctx))  # fmt: skip
            return await echo(ctx, request)

        handler.handle = handle  # type: ignore[method-assign]
        server = await started(handler, listener_name="INTERNAL")
        client = await Client.connect(server.port)
        client.send(heartbeat(), 0)
        assert (await client.read(HEARTBEAT, 4))[0] == 0
        client.send(heartbeat(), 1)  # handled inline, then sleeps in a task
        await asyncio.sleep(0.05)
        client.send(heartbeat(), 2)  # read while 1 still sleeps: queued behind it
        client.send(heartbeat(), 3)
        got = [(await client.read(HEARTBEAT, 4))[0] for _ in range(3)]
        assert got == [1, 2, 3]
        assert handler.max_active == 1
        assert [cid for cid, *_ in seen] == [0, 1, 2, 3]
        inline = {cid: in_callback for cid, in_callback, *_ in seen}
        assert inline[1] is True  # the processor was idle: no task ran its first step
        assert inline[2] is False  # 1 was still running: the processor took 2
        assert all(listener == "INTERNAL" and same for _, _, listener, same in seen)
        # The connection goes on after a request finished in a task.
        client.send(heartbeat(), 4)
        assert (await client.read(HEARTBEAT, 4))[0] == 4
        client.close()
        await server.shutdown(timeout=5)

    run(loop_kind, main)


def encoded_heartbeat(correlation_id: int, size: int = 0) -> bytes:
    """A Heartbeat request frame (size prefix included) of exactly ``size`` bytes (padded
    in its group id), or as small as it comes with ``size`` 0."""
    pad = 1
    for _ in range(5):  # the group id's length prefix may grow: a few rounds
        request = build_request(
            HEARTBEAT, 4, {"group_id": "g" * pad, "generation_id": 1, "member_id": "m"}
        )
        data = encode_request(4, correlation_id, "test", request)
        if not size or len(data) == size:
            return data
        pad += size - len(data)
    raise AssertionError(f"no Heartbeat of {size} bytes")


# The tests below send requests that a connection reads in one event loop callback: a
# fresh connection's first read fills its receive buffer (RECEIVE_BUFFER_MIN bytes), and
# uvloop (libuv) reads again at once when a read fills the buffer, handing the protocol
# the next request before any task runs. asyncio reads once per callback, so there the
# tests only check the answers; on uvloop each fails without the guard it names.


async def warm_connection(server: NetworkServer) -> Client:
    """A connection whose processor waits for requests and whose receive buffer is empty
    (one request answered)."""
    client = await Client.connect(server.port)
    client.send_raw(encoded_heartbeat(0))
    assert (await client.read(HEARTBEAT, 4))[0] == 0
    return client


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_request_read_after_a_suspended_inline_one_in_one_callback_waits(
    loop_kind: str,
) -> None:
    """_handle_inline: a request whose handler suspended in the read callback makes the
    processor busy at once, so a request read right after it (same callback, before the
    processor task wakes) is queued behind it rather than handled inline and answered
    first."""

    async def main() -> None:
        handler = EchoHandler()
        handler.delay = lambda cid: 0.2 if cid == 1 else 0.0
        server = await started(handler)
        client = await warm_connection(server)
        client.send_raw(encoded_heartbeat(1, RECEIVE_BUFFER_MIN) + encoded_heartbeat(2))
        got = [(await client.read(HEARTBEAT, 4))[0] for _ in range(2)]
        assert got == [1, 2]
        assert handler.max_active == 1
        client.close()
        await server.shutdown(timeout=5)

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_request_read_after_queued_ones_in_one_callback_waits(loop_kind: str) -> None:
    """buffer_updated: frames queued for the processor make it busy at once, so a lone
    request read right after them (same callback) is not handled inline ahead of them."""

    async def main() -> None:
        handler = EchoHandler()
        server = await started(handler)
        client = await warm_connection(server)
        second = encoded_heartbeat(2)
        first = encoded_heartbeat(1, RECEIVE_BUFFER_MIN - len(second))
        client.send_raw(first + second + encoded_heartbeat(3))
        got = [(await client.read(HEARTBEAT, 4))[0] for _ in range(3)]
        assert got == [1, 2, 3]
        client.close()
        await server.shutdown(timeout=5)

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_answer_is_not_written_past_a_queued_deferred_one(loop_kind: str) -> None:
    """_deliver writes an answer at once only when no earlier answer is queued: here a
    deferred answer was queued in the same callback and the writer has not woken yet."""

    async def main() -> None:
        handler = EchoHandler()
        echo = handler.handle

        async def handle(ctx: RequestContext, request: Any) -> Any:
            if ctx.header.correlation_id not in (1, 3):
                return await echo(ctx, request)

            async def later() -> Any:
                await asyncio.sleep(0.2)
                return build_response(HEARTBEAT, 4, {"error_code": 0})

            return DeferredResponse(later())

        handler.handle = handle  # type: ignore[method-assign]
        server = await started(handler)
        client = await warm_connection(server)
        client.send_raw(encoded_heartbeat(1, RECEIVE_BUFFER_MIN) + encoded_heartbeat(2))
        got = [(await client.read(HEARTBEAT, 4))[0] for _ in range(2)]
        assert got == [1, 2]
        # Later, with the writer waiting for the deferred answer: the same holds.
        client.send(heartbeat(), 3)
        await asyncio.sleep(0.05)
        client.send(heartbeat(), 4)
        got = [(await client.read(HEARTBEAT, 4))[0] for _ in range(2)]
        assert got == [3, 4]
        client.close()
        await server.shutdown(timeout=5)

    run(loop_kind, main)


def test_two_connections_are_served_independently() -> None:
    async def main() -> None:
        handler = EchoHandler()
        # Served one after the other, the fast answer would wait about 0.95 s for the slow
        # one; independently it comes in milliseconds. The bound between the two leaves a
        # loaded machine room on both sides (0.3 s against 0.25 s left none).
        handler.delay = lambda cid: 1.0 if cid == 1 else 0.0
        server = await started(handler)
        slow, fast = await Client.connect(server.port), await Client.connect(server.port)
        slow.send(heartbeat(), 1)
        await asyncio.sleep(0.05)
        fast.send(heartbeat(), 2)
        started_at = time.monotonic()
        assert (await fast.read(HEARTBEAT, 4))[0] == 2
        assert time.monotonic() - started_at < 0.6
        assert (await slow.read(HEARTBEAT, 4))[0] == 1
        await server.shutdown(timeout=5)

    run("asyncio", main)


# Back-pressure ----------------------------------------------------------------------------


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_back_pressure_bounds_requests_in_flight(loop_kind: str) -> None:
    frame_count = 2000
    record_size = 10_000

    async def main() -> None:
        handler = EchoHandler()
        handler.gate = asyncio.Event()
        server = await started(handler, max_in_flight_per_connection=4)
        client = await Client.connect(server.port)
        produce = build_request(
            PRODUCE,
            9,
            {
                "acks": 1,
                "timeout": 1000,
                "topic_data": [
                    {"name": "t", "partition_data": [{"index": 0, "records": b"x" * record_size}]}
                ],
            },
        )
        for cid in range(frame_count):
            client.send(produce, cid)
        await asyncio.sleep(0.5)
        (stats,) = server.connection_stats()
        # At most the bound plus what one socket read (<= 256 KiB) can carry.
        assert stats["reading_paused"]
        assert stats["in_flight"] <= 4 + (256 * 1024) // record_size + 1
        # The client could not hand everything to the kernel: the server stopped reading.
        assert client.writer.transport.get_write_buffer_size() > 0
        handler.gate.set()
        got = [(await client.read(PRODUCE, 9))[0] for _ in range(frame_count)]
        assert got == list(range(frame_count))
        client.close()
        await server.shutdown(timeout=5)

    run(loop_kind, main)


# Idle reaping -----------------------------------------------------------------------------


def test_idle_connections_are_reaped_by_the_injected_clock() -> None:
    now = [1000.0]

    async def main() -> None:
        server = await started(
            EchoHandler(),
            connections_max_idle_ms=1000,
            clock=lambda: now[0],
            idle_check_interval_s=3600,  # only the explicit calls below reap
        )
        client = await Client.connect(server.port)
        client.send(heartbeat(), 1)
        await client.read(HEARTBEAT, 4)
        now[0] += 0.5
        assert server.reap_idle_connections() == 0
        client.send(heartbeat(), 2)  # activity restarts the idle timer
        await client.read(HEARTBEAT, 4)
        now[0] += 0.9
        assert server.reap_idle_connections() == 0
        now[0] += 0.2
        assert server.reap_idle_connections() == 1
        assert await client.closed_by_server()
        await server.shutdown(timeout=5)

    run("asyncio", main)


def test_idle_reaper_runs_on_its_own() -> None:
    async def main() -> None:
        server = await started(EchoHandler(), connections_max_idle_ms=100)
        idle = await Client.connect(server.port)
        assert await idle.closed_by_server(timeout=3)
        await server.shutdown(timeout=5)

    run("uvloop", main)


def test_busy_connection_is_not_reaped() -> None:
    now = [0.0]

    async def main() -> None:
        handler = EchoHandler()
        handler.gate = asyncio.Event()
        server = await started(
            handler, connections_max_idle_ms=100, clock=lambda: now[0], idle_check_interval_s=3600
        )
        client = await Client.connect(server.port)
        client.send(heartbeat(), 1)
        await asyncio.sleep(0.05)
        now[0] += 10
        assert server.reap_idle_connections() == 0  # a request is in flight
        handler.gate.set()
        assert (await client.read(HEARTBEAT, 4))[0] == 1
        await server.shutdown(timeout=5)

    run("asyncio", main)


# Malformed input --------------------------------------------------------------------------


def test_malformed_frames_close_only_their_connection(caplog: pytest.LogCaptureFixture) -> None:
    def framed(payload: bytes) -> bytes:
        return struct.pack(">i", len(payload)) + payload

    header = struct.pack(">hhih", HEARTBEAT, 4, 5, 1) + b"c" + b"\x00"
    bad_inputs = {
        "negative size": struct.pack(">i", -1),
        "oversized": struct.pack(">i", 5000) + b"x" * 100,
        "short header": framed(b"\x00\x0c\x00"),
        "bad client id length": framed(struct.pack(">hhih", HEARTBEAT, 4, 5, 50) + b"ab"),
        "unknown api key": framed(struct.pack(">hhih", 999, 0, 5, -1)),
        "unsupported version": framed(struct.pack(">hhih", METADATA, 99, 5, -1)),
        "garbage body": framed(header + b"\xff\xff\xff"),
        "TLS hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    }

    async def main() -> None:
        server = await started(EchoHandler(), max_request_size=1000)
        good = await Client.connect(server.port)
        good.send(heartbeat(), 1)
        assert (await good.read(HEARTBEAT, 4))[0] == 1
        for name, data in bad_inputs.items():
            bad = await Client.connect(server.port)
            bad.send_raw(data)
            assert await bad.closed_by_server(), name
            good.send(heartbeat(), 2)
            assert (await good.read(HEARTBEAT, 4))[0] == 2, name
        await server.shutdown(timeout=5)

    with caplog.at_level(logging.INFO, logger="odradek.broker.network"):
        run("asyncio", main)
    closing = [r for r in caplog.records if "closing connection" in r.getMessage()]
    assert len(closing) == len(bad_inputs)
    assert all(r.exc_info is None for r in closing)  # one line each, no traceback


def test_unsupported_api_versions_version_gets_a_v0_answer() -> None:
    async def main() -> None:
        server = await started(EchoHandler())
        client = await Client.connect(server.port)
        # ApiVersions v9 does not exist yet: flexible header v2 with a tagged field.
        header = struct.pack(">hhih", API_VERSIONS, 9, 77, 3) + b"cli" + b"\x01\x05\x01\xaa"
        client.send_raw(struct.pack(">i", len(header) + 5) + header + b"\x02a\x021\x00")
        frame = await client.read_frame()
        correlation_id, error, count = struct.unpack_from(">ihi", frame)
        assert (correlation_id, error, count) == (77, ErrorCode.unsupported_version, len(SUPPORTED))
        assert len(frame) == 4 + 2 + 4 + 6 * count  # response header v0, v0 body, no throttle
        _, response = decode_response(API_VERSIONS, 9, frame)
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert ranges == SUPPORTED
        # The connection stays open: the client retries with a version we know.
        client.send(
            load_request_schema(API_VERSIONS, 3)(
                client_software_name="x", client_software_version="1"
            ),
            78,
        )
        correlation_id, response = await client.read(API_VERSIONS, 3)
        assert correlation_id == 78 and response.error_code == ErrorCode.none
        await server.shutdown(timeout=5)

    run("asyncio", main)


def test_handler_exception_becomes_unknown_server_error(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        handler = EchoHandler()
        handler.fail_on = {2}
        server = await started(handler)
        client = await Client.connect(server.port)
        for cid in (1, 2, 3):
            client.send(heartbeat(), cid)
        results = [await client.read(HEARTBEAT, 4) for _ in range(3)]
        assert [cid for cid, _ in results] == [1, 2, 3]
        assert [r.error_code for _, r in results] == [
            ErrorCode.none,
            ErrorCode.unknown_server_error,
            ErrorCode.none,
        ]
        await server.shutdown(timeout=5)

    with caplog.at_level(logging.ERROR, logger="odradek.broker.network"):
        run("asyncio", main)
    assert any("handler failed" in r.getMessage() for r in caplog.records)


def test_produce_acks_0_gets_no_response_and_a_failure_closes() -> None:
    def produce(acks: int) -> Any:
        return build_request(
            PRODUCE, 7, {"acks": acks, "timeout": 10, "topic_data": [{"name": "t"}]}
        )

    async def main() -> None:
        handler = EchoHandler()
        handler.fail_on = {12}
        server = await started(handler)
        client = await Client.connect(server.port)
        client.send(produce(0), 10)
        client.send(produce(1), 11)
        assert (await client.read(PRODUCE, 7))[0] == 11  # nothing for correlation id 10
        client.send(produce(0), 12)  # the handler fails: closing is the only signal
        assert await client.closed_by_server()
        await server.shutdown(timeout=5)

    run("asyncio", main)


def test_bad_handler_results_never_break_the_server() -> None:
    class Confused:
        async def handle(self, ctx: RequestContext, request: Any) -> Any:
            if ctx.header.correlation_id == 1:  # an entity of the wrong API
                return build_response(METADATA, 5, {})
            if ctx.header.correlation_id == 2:  # a chunk that is neither bytes nor region
                return ChunkedResponse([b"\x00\x00\x00\x10", 12345])
            return build_response(HEARTBEAT, ctx.header.api_version, {"error_code": 0})

    async def main() -> None:
        server = await started(Confused())
        client = await Client.connect(server.port)
        client.send(heartbeat(), 1)
        correlation_id, response = await client.read(HEARTBEAT, 4)
        assert (correlation_id, response.error_code) == (1, ErrorCode.unknown_server_error)
        client.send(heartbeat(), 2)
        assert await client.closed_by_server()
        other = await Client.connect(server.port)
        other.send(heartbeat(), 3)
        assert (await other.read(HEARTBEAT, 4))[0] == 3
        await server.shutdown(timeout=5)

    run("asyncio", main)


# Shutdown ---------------------------------------------------------------------------------


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_graceful_shutdown_finishes_requests_in_flight(loop_kind: str) -> None:
    async def main() -> None:
        handler = EchoHandler()
        handler.delay = lambda _cid: 0.1
        server = await started(handler)
        port = server.port
        client = await Client.connect(port)
        for cid in range(3):
            client.send(heartbeat(), cid)
        await asyncio.sleep(0.05)
        shutdown = asyncio.create_task(server.shutdown(timeout=5))
        got = [(await client.read(HEARTBEAT, 4))[0] for _ in range(3)]
        assert got == [0, 1, 2]
        await shutdown
        assert await client.closed_by_server()
        with pytest.raises(OSError):
            await Client.connect(port)

    run(loop_kind, main)


def test_shutdown_timeout_aborts_stuck_requests() -> None:
    async def main() -> None:
        handler = EchoHandler()
        handler.gate = asyncio.Event()  # never set
        server = await started(handler)
        client = await Client.connect(server.port)
        client.send(heartbeat(), 1)
        await asyncio.sleep(0.05)
        started_at = time.monotonic()
        await server.shutdown(timeout=0.2)
        assert time.monotonic() - started_at < 2
        assert await client.closed_by_server()

    run("asyncio", main)


# Sendfile ---------------------------------------------------------------------------------


def open_descriptors() -> dict[str, str]:
    found = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # listdir's own descriptor
            found[name] = os.readlink(f"/proc/self/fd/{name}")
    return found


@dataclasses.dataclass
class Region:
    fd: int
    position: int
    length: int


class FetchHandler:
    """Fetch answers whose records are regions of one file; Heartbeat answered inline."""

    def __init__(self, fd: int, regions: dict[int, tuple[int, int]]) -> None:
        self.fd = fd
        self.regions = regions  # partition -> (position, length)

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        header = ctx.header
        if header.api_key == HEARTBEAT:
            return build_response(HEARTBEAT, header.api_version, {"error_code": 0})
        topics = {
            "t": [
                {
                    "partition_index": index,
                    "high_watermark": 1,
                    "records": [Region(self.fd, position, length)],
                }
                for index, (position, length) in sorted(self.regions.items())
            ]
        }
        return ChunkedResponse(encode_fetch_response(header, 0, 0, 0, topics))


def fetch_request(version: int) -> Any:
    return build_request(
        FETCH,
        version,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 2**31 - 1,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0}]}],
        },
    )


@pytest.fixture
def data_file(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    data = random.Random(3).randbytes(6 * 1024 * 1024)
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd, data
    finally:
        os.close(fd)


@pytest.mark.parametrize("loop_kind", LOOPS)
@pytest.mark.parametrize("use_sendfile", [True, False])
def test_file_regions_arrive_intact_and_in_order(
    loop_kind: str, use_sendfile: bool, data_file: tuple[int, bytes]
) -> None:
    fd, data = data_file
    regions = {0: (0, 5 * 1024 * 1024), 1: (123, 4567), 2: (len(data) - 10, 10)}

    async def main() -> None:
        open_fds = open_descriptors()
        server = await started(FetchHandler(fd, regions), use_sendfile=use_sendfile)
        client = await Client.connect(server.port)
        # A fetch, a small inline response, another fetch: order must hold across paths.
        client.send(fetch_request(11), 1)
        client.send(heartbeat(), 2)
        client.send(fetch_request(12), 3)
        for cid, api_key, version in ((1, FETCH, 11), (2, HEARTBEAT, 4), (3, FETCH, 12)):
            await asyncio.sleep(0.2)  # let the socket fill so sendfile meets EAGAIN
            correlation_id, response = await client.read(api_key, version)
            assert correlation_id == cid
            if api_key == FETCH:
                partitions = response.responses[0].partitions
                for partition in partitions:
                    position, length = regions[partition.partition_index]
                    assert partition.records == data[position : position + length]
        total = 2 * sum(length for _position, length in regions.values())
        assert server.bytes_sent_with_sendfile + server.bytes_copied_from_regions == total
        if use_sendfile:
            assert server.bytes_sent_with_sendfile == total  # zero copy all the way
        else:
            assert server.bytes_sent_with_sendfile == 0
        client.close()
        await client.writer.wait_closed()
        await server.shutdown(timeout=5)
        await asyncio.sleep(0.05)  # let the transports run their close callbacks
        # No socket descriptor is left behind (the duplicate used to wait for
        # writability would keep the connection open). uvloop opens /dev/null lazily.
        now = open_descriptors()
        new = {now[fd] for fd in now.keys() - open_fds.keys()}
        assert not {target for target in new if target.startswith("socket:")}

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_small_fetch_answers_are_copied_and_written_whole(
    loop_kind: str, data_file: tuple[int, bytes]
) -> None:
    # Regions of at most 32 KiB in all: one pread each and one write for the answer
    # (a tailing consumer's answers), not a write plus a sendfile per region.
    fd, data = data_file
    regions = {0: (123, 4567), 1: (len(data) - 10, 10), 2: (9000, 0)}

    async def main() -> None:
        server = await started(FetchHandler(fd, regions))
        client = await Client.connect(server.port)
        for cid in (1, 2):
            client.send(fetch_request(12), cid)
            correlation_id, response = await client.read(FETCH, 12)
            assert correlation_id == cid
            for partition in response.responses[0].partitions:
                position, length = regions[partition.partition_index]
                assert (partition.records or b"") == data[position : position + length]
        assert server.bytes_copied_from_regions == 2 * (4567 + 10)
        assert server.bytes_sent_with_sendfile == 0
        client.close()
        await client.writer.wait_closed()
        await server.shutdown(timeout=5)

    run(loop_kind, main)


def test_truncated_region_closes_the_connection(data_file: tuple[int, bytes]) -> None:
    fd, data = data_file

    async def main() -> None:
        server = await started(FetchHandler(fd, {0: (len(data) - 100, 1000)}))
        client = await Client.connect(server.port)
        client.send(fetch_request(11), 1)
        with pytest.raises((asyncio.IncompleteReadError, ConnectionResetError)):
            await client.read(FETCH, 11)
        await server.shutdown(timeout=5)

    run("asyncio", main)


# Real clients -----------------------------------------------------------------------------


class MetadataHandler:
    """ApiVersions + Metadata only: one broker (itself) and one topic with two partitions."""

    def __init__(self) -> None:
        self.port = 0
        self.seen: list[tuple[int, int]] = []

    def advertised_versions(self) -> dict[int, tuple[int, int]]:
        return {key: SUPPORTED[key] for key in (API_VERSIONS, METADATA)}

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        header = ctx.header
        self.seen.append((header.api_key, header.api_version))
        if header.api_key == API_VERSIONS:
            return build_api_versions_response(header.api_version, self.advertised_versions())
        partitions = [
            {
                "partition_index": i,
                "leader_id": 1,
                "leader_epoch": 0,
                "replica_nodes": [1],
                "isr_nodes": [1],
            }
            for i in range(2)
        ]
        return build_response(
            METADATA,
            header.api_version,
            {
                "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.port, "rack": None}],
                "cluster_id": "odradek-test",
                "controller_id": 1,
                "topics": [{"name": "hello", "partitions": partitions}],
            },
        )


@contextlib.contextmanager
def server_in_thread(handler: Any) -> Iterator[NetworkServer]:
    """A NetworkServer on its own event loop thread, for blocking client libraries."""
    loop = uvloop.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)

        async def start() -> None:
            server = NetworkServer(handler, "127.0.0.1", 0)
            await server.start()
            handler.port = server.port
            holder["server"] = server
            ready.set()

        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield holder["server"]
    finally:
        asyncio.run_coroutine_threadsafe(holder["server"].shutdown(timeout=2), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_librdkafka_negotiates_and_reads_metadata() -> None:
    from confluent_kafka.admin import AdminClient

    handler = MetadataHandler()
    with server_in_thread(handler) as server:
        admin = AdminClient(
            {"bootstrap.servers": f"127.0.0.1:{server.port}", "socket.timeout.ms": 5000}
        )
        metadata = admin.list_topics(timeout=10)
        assert sorted(metadata.topics["hello"].partitions) == [0, 1]
        assert metadata.cluster_id == "odradek-test"
    # librdkafka opened with ApiVersions v3 and then used our Metadata maximum.
    assert handler.seen[0] == (API_VERSIONS, 3)
    assert (METADATA, SUPPORTED[METADATA][1]) in handler.seen


def test_kafka_python_negotiates_and_reads_metadata() -> None:
    from kafka import KafkaAdminClient

    handler = MetadataHandler()
    with server_in_thread(handler) as server:
        admin = KafkaAdminClient(
            bootstrap_servers=f"127.0.0.1:{server.port}", request_timeout_ms=5000
        )
        try:
            assert "hello" in admin.list_topics()
        finally:
            admin.close()
    # kafka-python tries ApiVersions v4 first; we support it, so no fallback round trip.
    assert handler.seen[0] == (API_VERSIONS, 4)


def test_aiokafka_negotiates_and_reads_metadata() -> None:
    from aiokafka import AIOKafkaClient

    handler = MetadataHandler()

    async def main() -> None:
        with server_in_thread(handler) as server:
            client = AIOKafkaClient(bootstrap_servers=f"127.0.0.1:{server.port}")
            await client.bootstrap()
            try:
                assert "hello" in client.cluster.topics()
            finally:
                await client.close()

    run("asyncio", main)
    assert handler.seen[0] == (API_VERSIONS, 0)
    assert all(version <= 5 for key, version in handler.seen if key == METADATA)


def test_librdkafka_falls_back_when_api_versions_v3_is_not_advertised() -> None:
    from confluent_kafka.admin import AdminClient

    class OldBroker(MetadataHandler):
        def advertised_versions(self) -> dict[int, tuple[int, int]]:
            return {API_VERSIONS: (0, 2), METADATA: (1, 8)}

    handler = OldBroker()
    with server_in_thread(handler) as server:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.port}"})
        assert "hello" in admin.list_topics(timeout=10).topics
    api_versions_seen = [v for key, v in handler.seen if key == API_VERSIONS]
    # v3 was answered UNSUPPORTED_VERSION by the network layer, then a version we listed.
    assert API_VERSIONS not in {k for k, v in handler.seen if v == 3}
    assert api_versions_seen and max(api_versions_seen) <= 2


def test_kcat_old_librdkafka_lists_metadata() -> None:
    import shutil
    import subprocess

    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    handler = MetadataHandler()
    with server_in_thread(handler) as server:
        result = subprocess.run(
            ["kcat", "-b", f"127.0.0.1:{server.port}", "-L", "-m", "10"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 0, result.stderr
    assert 'topic "hello" with 2 partitions' in result.stdout
    assert handler.seen[0] == (API_VERSIONS, 3)
