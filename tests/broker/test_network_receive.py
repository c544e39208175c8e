"""The BufferedProtocol receive path of NetworkServer over real sockets: large and small
frames split at arbitrary points arrive intact, large frames' buffers are reused from the
pool, and a buffer someone still refers to is never reused (its bytes stay intact)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from odradek.broker.requests import DeferredResponse, RequestContext
from odradek.protocol.build import build_request, build_response
from odradek.protocol.codec import encode_request
from odradek.protocol.versions import PRODUCE
from tests.broker.test_network import LOOPS, Client, run, started

pytestmark = pytest.mark.timeout(120)


def produce_frame(correlation_id: int, payload: bytes) -> bytes:
    request = build_request(
        PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": payload}]}],
        },
    )
    return encode_request(9, correlation_id, "test", request)


class KeepingHandler:
    """Records what each Produce carried; keeps a live slice of every third one and
    answers those later (a deferred answer holding its request, as acks=all does)."""

    def __init__(self) -> None:
        self.seen: dict[int, bytes] = {}
        self.kept: dict[int, memoryview] = {}

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        cid = ctx.header.correlation_id
        records = request.topic_data[0].partition_data[0].records
        self.seen[cid] = bytes(records)
        response = build_response(PRODUCE, 9, {"responses": [], "throttle_time": 0})
        if cid % 3 == 0:
            self.kept[cid] = memoryview(records)

            async def later() -> Any:
                await asyncio.sleep(0.01)
                return response

            return DeferredResponse(later())
        return response


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_split_pipelined_frames_arrive_intact_and_large_buffers_are_reused(
    loop_kind: str,
) -> None:
    rng = random.Random(16)
    sizes = [rng.choice([10, 3000, 40_000, 100_000, 300_000]) for _ in range(40)]
    payloads = {cid: rng.randbytes(size) for cid, size in enumerate(sizes)}
    frames = [produce_frame(cid, p) for cid, p in payloads.items()]
    half_count = len(frames) // 2
    stream = b"".join(frames)
    middle = sum(len(f) for f in frames[:half_count])
    handler = KeepingHandler()

    async def main() -> None:
        server = await started(handler)
        client = await Client.connect(server.port)
        try:
            # Two halves: the second one's large frames find the first one's buffers
            # handed back (all but the ones the handler keeps a slice of).
            for half in (stream[:middle], stream[middle:]):
                position = 0
                while position < len(half):  # arbitrary cuts, including inside prefixes
                    step = rng.choice([1, 3, 4, 5, 1000, 65_536, 200_001])
                    client.send_raw(half[position : position + step])
                    position += step
                    if rng.random() < 0.2:
                        await client.writer.drain()
                for _ in range(half_count):
                    await client.read_frame()
            assert server.buffer_pool.reused > 0
        finally:
            client.close()
            await server.shutdown(timeout=5)

    run(loop_kind, main)
    assert handler.seen == payloads
    # Slices kept by the handler still show their own request's bytes: their buffers
    # were never handed to a later frame.
    for cid, view in handler.kept.items():
        assert bytes(view) == payloads[cid]


class GatedHandler:
    """Answers Produce once ``gate`` is set; counts the requests it saw."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.count = 0

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        self.count += 1
        await self.gate.wait()
        return build_response(PRODUCE, 9, {"responses": [], "throttle_time": 0})


def test_pipelined_large_requests_are_read_ahead_only_as_far_as_the_pool_reaches() -> None:
    # A client pipelining 1 MiB Produce requests while the broker is busy: the connection
    # stops reading at 16 MiB of queued requests (not socket.request.max.bytes), so every
    # frame after the first few dozen finds a pooled buffer instead of a fresh one.
    frame = produce_frame(1, random.Random(5).randbytes(1 << 20))
    count = 48
    handler = GatedHandler()

    async def main() -> None:
        server = await started(handler)
        client = await Client.connect(server.port)
        try:
            for _ in range(count):
                client.send_raw(frame)
            await asyncio.sleep(1.0)  # let the broker read what it will
            (connection,) = server._connections
            assert connection.reading_paused
            assert connection._pending_bytes <= (16 << 20) + len(frame)
            handler.gate.set()
            for _ in range(count):
                await client.read_frame(timeout=30)
            assert handler.count == count
            # 16 queued + the one being handled + the one being read, with room to spare;
            # reading 100 MiB ahead allocated one buffer per frame (48).
            assert server.buffer_pool.allocated <= 24
            assert server.buffer_pool.reused >= count - 24
        finally:
            client.close()
            await server.shutdown(timeout=5)

    run("uvloop", main)
