"""NetworkServer limits: max.connections, max.connections.per.ip, the request memory
pool (queued.max.request.bytes), taking turns between pipelining connections, and several
listeners sharing the broker-wide limits. Real sockets, handlers written here."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from odradek.broker.network import NetworkServer
from odradek.broker.quotas import ConnectionQuotas, MemoryPool
from odradek.broker.requests import RequestContext
from odradek.protocol.versions import build_api_versions_response
from tests.broker.test_network import LOOPS, Client, EchoHandler, run, started

pytestmark = pytest.mark.timeout(60)

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, -1)


def api_versions(correlation: int) -> bytes:
    payload = struct.pack(">hhih", 18, 0, correlation, -1)
    return struct.pack(">i", len(payload)) + payload


async def answered(client: Client, correlation: int, timeout: float = 5) -> bool:
    client.send_raw(api_versions(correlation))
    frame = await client.read_frame(timeout)
    return struct.unpack(">i", frame[:4])[0] == correlation


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_connections_over_the_per_ip_limit_are_closed(loop_kind: str) -> None:
    async def main() -> None:
        quotas = ConnectionQuotas(max_per_ip=2)
        server = await started(EchoHandler(), quotas=quotas)
        first, second = await Client.connect(server.port), await Client.connect(server.port)
        assert await answered(first, 1) and await answered(second, 2)
        third = await Client.connect(server.port)
        assert await third.closed_by_server()
        assert quotas.refused_per_ip == 1
        first.close()
        await asyncio.sleep(0.2)  # the slot is given back when the connection goes
        fourth = await Client.connect(server.port)
        assert await answered(fourth, 4)
        for client in (second, third, fourth):
            client.close()
        await server.shutdown()

    run(loop_kind, main)


def test_per_ip_overrides_apply_to_their_address() -> None:
    quotas = ConnectionQuotas(max_per_ip=0, per_ip_overrides={"127.0.0.1": 1, "localhost": 3})
    assert quotas.limit_for("10.1.2.3") == 0
    assert quotas.limit_for("127.0.0.1") in (1, 3)  # localhost resolves to 127.0.0.1 too
    assert quotas.try_add("10.1.2.3") is False


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_at_max_connections_new_ones_wait_until_one_closes(loop_kind: str) -> None:
    async def main() -> None:
        quotas = ConnectionQuotas(max_connections=1)
        server = await started(EchoHandler(), quotas=quotas)
        first = await Client.connect(server.port)
        assert await answered(first, 1)
        waiting = await Client.connect(server.port)  # the kernel completes the handshake
        waiting.send_raw(api_versions(2))
        with pytest.raises(TimeoutError):
            await waiting.read_frame(timeout=0.5)  # not accepted, so not answered
        first.close()
        frame = await waiting.read_frame(timeout=5)  # accepted once the first is gone
        assert struct.unpack(">i", frame[:4])[0] == 2
        waiting.close()
        await server.shutdown()

    run(loop_kind, main)


class GateHandler(EchoHandler):
    """Holds large requests at a gate so the pool stays charged; answers ApiVersions."""

    def __init__(self) -> None:
        super().__init__()
        self.large_seen = 0
        self.release = asyncio.Event()

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        if ctx.header.api_key == 18 and ctx.header.correlation_id >= 1000:
            self.large_seen += 1
            await self.release.wait()
            return build_api_versions_response(0)
        return await super().handle(ctx, request)


def large_frame(correlation: int, size: int) -> bytes:
    # ApiVersions v0 with trailing bytes: Kafka (and odradek) ignore bytes after the body.
    payload = struct.pack(">hhih", 18, 0, correlation, -1)
    payload += bytes(size - len(payload))
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_the_memory_pool_holds_back_large_frames_but_not_small_ones(loop_kind: str) -> None:
    async def main() -> None:
        size = 512 * 1024
        pool = MemoryPool(size)
        handler = GateHandler()
        server = await started(handler, memory_pool=pool, max_request_size=size)
        big_a, big_b = await Client.connect(server.port), await Client.connect(server.port)
        big_a.send_raw(large_frame(1000, size))
        await big_a.writer.drain()
        for _ in range(100):
            if handler.large_seen:
                break
            await asyncio.sleep(0.02)
        assert handler.large_seen == 1 and pool.used >= size
        big_b.send_raw(large_frame(1001, size))
        await big_b.writer.drain()
        await asyncio.sleep(0.3)
        assert handler.large_seen == 1  # the second waits: the pool is full
        assert pool.used < 2 * size  # what it sent before being paused is one read at most
        small = await Client.connect(server.port)
        assert await answered(small, 5)  # small requests are never held back
        handler.release.set()
        for client, correlation in ((big_a, 1000), (big_b, 1001)):
            frame = await client.read_frame(timeout=5)
            assert struct.unpack(">i", frame[:4])[0] == correlation
        assert handler.large_seen == 2
        for client in (big_a, big_b, small):
            client.close()
        await asyncio.sleep(0.1)
        assert pool.used == 0  # everything charged was given back
        await server.shutdown()

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_connection_that_goes_away_gives_its_reservation_back(loop_kind: str) -> None:
    async def main() -> None:
        pool = MemoryPool(1 << 20)
        server = await started(EchoHandler(), memory_pool=pool)
        client = await Client.connect(server.port)
        client.send_raw(struct.pack(">i", 900_000) + bytes(1000))  # declared, never finished
        await asyncio.sleep(0.2)
        assert pool.used == 900_000  # reserved when the size prefix arrived
        client.close()
        await asyncio.sleep(0.2)
        assert pool.used == 0
        await server.shutdown()

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_pipelining_connection_takes_turns_with_the_others(loop_kind: str) -> None:
    """A thousand pipelined requests on one connection do not all go before another
    connection's single request (the handler never awaits, so nothing else would yield)."""

    async def main() -> None:
        handler = EchoHandler()
        server = await started(handler, max_in_flight_per_connection=2000)
        busy, other = await Client.connect(server.port), await Client.connect(server.port)
        busy.send_raw(b"".join(api_versions(i) for i in range(1, 1001)))
        await busy.writer.drain()
        await asyncio.sleep(0)  # let the server read the burst first
        other.send_raw(api_versions(5000))
        await other.read_frame()
        position = [cid for _key, cid in handler.calls].index(5000)
        assert position < 900, position
        for _ in range(1000):
            await busy.read_frame()
        busy.close()
        other.close()
        await server.shutdown()

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_listeners_share_the_broker_wide_connection_limit(loop_kind: str) -> None:
    async def main() -> None:
        quotas = ConnectionQuotas(max_per_ip=1)
        seen: list[str] = []

        class Named(EchoHandler):
            async def handle(self, ctx: RequestContext, request: Any) -> Any:
                seen.append(ctx.listener_name)
                return await super().handle(ctx, request)

        handler = Named()
        one = NetworkServer(handler, "127.0.0.1", 0, listener_name="ONE", quotas=quotas)
        two = NetworkServer(handler, "127.0.0.1", 0, listener_name="TWO", quotas=quotas)
        await one.start()
        await two.start()
        first = await Client.connect(one.port)
        assert await answered(first, 1)
        second = await Client.connect(two.port)
        assert await second.closed_by_server()  # same address, other listener: over limit
        first.close()
        await asyncio.sleep(0.2)
        third = await Client.connect(two.port)
        assert await answered(third, 3)
        assert seen == ["ONE", "TWO"]
        third.close()
        await one.shutdown()
        await two.shutdown()

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_full_collections_are_suspended_only_while_a_large_request_is_in_progress(
    loop_kind: str,
) -> None:
    import gc

    async def main() -> None:
        handler = GateHandler()
        server = await started(handler)
        client = await Client.connect(server.port)
        assert gc.isenabled()
        client.send_raw(large_frame(1000, 256 * 1024))
        for _ in range(100):
            if handler.large_seen:
                break
            await asyncio.sleep(0.02)
        assert handler.large_seen and not gc.isenabled()
        handler.release.set()
        await client.read_frame()
        await asyncio.sleep(0.05)
        assert gc.isenabled()
        client.close()
        await server.shutdown()

    run(loop_kind, main)


def test_a_negative_idle_time_never_reaps() -> None:
    async def main() -> None:
        server = await started(
            EchoHandler(), connections_max_idle_ms=-1, idle_check_interval_s=0.01
        )
        client = await Client.connect(server.port)
        assert await answered(client, 1)
        await asyncio.sleep(0.2)
        assert await answered(client, 2)
        client.close()
        await server.shutdown()

    run("asyncio", main)
