"""RemoteHighWatermarks (broker/metrics/lag.py) against fake leaders on loopback: one
ListOffsets per leader, partitions a leader refuses or a silent leader left out."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.metrics.lag import RemoteHighWatermarks
from odradek.protocol.build import build_response
from odradek.protocol.codec import decode_request, encode_response


class FakeLeader:
    """Answers ListOffsets with fixed high watermarks (NOT_LEADER for partitions it lacks),
    or never answers when ``silent``."""

    def __init__(self, high_watermarks: dict[tuple[str, int], int], silent: bool = False):
        self.high_watermarks = high_watermarks
        self.silent = silent
        self.requests: list[Any] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[:2]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        header, request = decode_request(await reader.readexactly(size))
        self.requests.append(request)
        if self.silent:
            await asyncio.sleep(60)
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                hw = self.high_watermarks.get((topic.name, int(p.partition_index)))
                partitions.append(
                    {
                        "partition_index": p.partition_index,
                        "error_code": ErrorCode.none if hw is not None
                        else ErrorCode.not_leader_or_follower,
                        "timestamp": -1,
                        "offset": -1 if hw is None else hw,
                    }
                )
            topics.append({"name": topic.name, "partitions": partitions})
        response = build_response(header.api_key, header.api_version, {"topics": topics})
        writer.write(encode_response(header, response))
        await writer.drain()
        writer.close()


def test_asks_each_leader_once_and_leaves_out_what_it_cannot_know() -> None:
    async def go() -> None:
        one = FakeLeader({("a", 0): 10, ("b", 1): 7})
        two = FakeLeader({("a", 1): 4})
        silent = FakeLeader({("c", 0): 99}, silent=True)
        addresses = {1: await one.start(), 2: await two.start(), 3: await silent.start()}
        leaders = {("a", 0): 1, ("b", 1): 1, ("b", 2): 1, ("a", 1): 2, ("c", 0): 3}
        remote = RemoteHighWatermarks(
            lambda t, p: leaders.get((t, p)), addresses.get, timeout_s=3.0
        )
        found = await remote.fetch([*leaders, ("unknown", 0)])
        # b-2: its leader says NOT_LEADER_OR_FOLLOWER; c-0: its leader is silent;
        # unknown-0: no leader known.
        assert found == {("a", 0): 10, ("b", 1): 7, ("a", 1): 4}
        assert len(one.requests) == len(two.requests) == 1
        asked = {(t.name, int(p.partition_index)) for t in one.requests[0].topics
                 for p in t.partitions}  # fmt: skip
        assert asked == {("a", 0), ("b", 1), ("b", 2)}
        request = one.requests[0]
        # A consumer's question: the high watermark, not the log end a follower would get.
        assert int(request.replica_id) == -1 and int(request.isolation_level) == 0
        for leader in (one, two, silent):
            assert leader.server is not None
            leader.server.close()

    asyncio.run(go())
