"""The cluster marker writer against a stand-in broker on a real socket: markers grouped
per leader, markers of concurrent transactions merged into one WriteTxnMarkers request,
and the errors a coordinator retries (leader moved, no leader, broker unreachable)."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.txn.marker_channel import ClusterMarkerWriter
from odradek.protocol.build import build_response
from odradek.protocol.codec import decode_request, encode_response

NO_LEADER = -1


@dataclass
class Info:
    leader: int


class Cache:
    """The two questions the writer asks the metadata cache."""

    def __init__(self, leaders: dict[tuple[str, int], int]) -> None:
        self.leaders = leaders

    def contains(self, topic: str, partition: int | None = None) -> bool:
        return any(t == topic for t, _ in self.leaders)

    def partition(self, topic: str, partition: int) -> Info | None:
        leader = self.leaders.get((topic, partition))
        return None if leader is None else Info(leader)


class StandInBroker:
    """Answers WriteTxnMarkers: every partition 0, except the ones in ``errors``; each
    request's markers (producer ids) are recorded. ``hold`` delays the first answer so
    other transactions queue behind it."""

    def __init__(self, errors: dict[tuple[str, int], int] | None = None) -> None:
        self.errors = errors or {}
        self.requests: list[list[int]] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self.server: asyncio.Server | None = None
        self.connections: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append(writer)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header, request = decode_request(await reader.readexactly(size))
                self.requests.append([int(m.producer_id) for m in request.markers])
                await self.hold.wait()
                markers: list[dict[str, Any]] = []
                for marker in request.markers:
                    topics = [
                        {
                            "name": topic.name,
                            "partitions": [
                                {
                                    "partition_index": int(p),
                                    "error_code": ErrorCode(self.errors.get((topic.name, p), 0)),
                                }
                                for p in topic.partition_indexes
                            ],
                        }
                        for topic in marker.topics
                    ]
                    markers.append({"producer_id": int(marker.producer_id), "topics": topics})
                response = build_response(27, header.api_version, {"markers": markers})
                writer.write(encode_response(header, response))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for connection in self.connections:  # a dead broker: its connections go too
            connection.close()
        await self.server.wait_closed()


def writer_for(cache: Cache, ports: dict[int, int]) -> ClusterMarkerWriter:
    def address_of(broker: int) -> tuple[str, int] | None:
        port = ports.get(broker)
        return None if port is None else ("127.0.0.1", port)

    # Broker 1 is "this" broker and leads nothing here: every marker goes over the wire.
    return ClusterMarkerWriter(1, None, cache, address_of, timeout_s=5)  # type: ignore[arg-type]


async def write(writer: ClusterMarkerWriter, producer_id: int, partitions: list) -> dict:
    return await writer.write_markers(
        producer_id=producer_id,
        producer_epoch=0,
        coordinator_epoch=3,
        commit=True,
        partitions=partitions,
    )


def test_markers_go_to_each_leader_with_their_errors() -> None:
    async def scenario() -> None:
        moved = int(ErrorCode.not_leader_or_follower)
        two, three = StandInBroker({("t", 1): moved}), StandInBroker()
        ports = {2: await two.start(), 3: await three.start()}
        cache = Cache({("t", 0): 2, ("t", 1): 2, ("t", 2): 3, ("u", 0): NO_LEADER})
        writer = writer_for(cache, ports)
        results = await write(writer, 7, [("t", 0), ("t", 1), ("t", 2), ("u", 0), ("gone", 0)])
        assert results == {
            ("t", 0): 0,
            ("t", 1): moved,  # the leader moved: the coordinator retries it
            ("t", 2): 0,
            ("u", 0): moved,  # no leader now
            ("gone", 0): 0,  # topic deleted: nothing left to mark
        }
        assert two.requests == [[7]] and three.requests == [[7]]
        # A broker that cannot be reached: its partitions are retried later.
        await three.stop()
        results = await write(writer, 8, [("t", 2)])
        assert results == {("t", 2): moved}
        await writer.close()
        await two.stop()

    asyncio.run(scenario())


def test_concurrent_transactions_share_a_request() -> None:
    async def scenario() -> None:
        broker = StandInBroker()
        port = await broker.start()
        writer = writer_for(Cache({("t", 0): 2, ("t", 1): 2}), {2: port})
        broker.hold.clear()  # the first request waits: the next ones pile up
        first = asyncio.ensure_future(write(writer, 1, [("t", 0)]))
        while not broker.requests:
            await asyncio.sleep(0.01)
        others = [asyncio.ensure_future(write(writer, pid, [("t", 1)])) for pid in (2, 3, 4)]
        await asyncio.sleep(0.05)
        broker.hold.set()
        assert await first == {("t", 0): 0}
        assert [await o for o in others] == [{("t", 1): 0}] * 3
        assert broker.requests == [[1], [2, 3, 4]]  # one request for the three that waited
        await writer.close()
        await broker.stop()

    asyncio.run(scenario())
