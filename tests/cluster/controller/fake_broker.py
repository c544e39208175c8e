"""An in-test broker for controller tests: registered in ZooKeeper, it reads what the
controller sends with odradek's protocol layer, records it and answers with error NONE."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from typing import Any

from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import BrokerEndpoint, BrokerRegistration
from odradek.protocol import interbroker as ib
from odradek.protocol.build import build_response
from odradek.protocol.codec import decode_request, encode_response

_SIZE = struct.Struct(">i")
SESSION_MS = 4000


class FakeBroker:
    def __init__(self, broker_id: int, zk_connect: str) -> None:
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.requests: list[tuple[int, Any]] = []  # (api key, request entity)
        self.zk: ZkClient | None = None
        self.broker_epoch = -1
        self._server: asyncio.Server | None = None

    async def start(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        registration = BrokerRegistration(
            self.broker_id,
            (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),),
            timestamp_ms=int(time.time() * 1000),
        )

        def register() -> None:
            self.zk = ZkClient.connect(self.zk_connect, session_timeout_ms=SESSION_MS)
            self.broker_epoch = self.zk.register_broker(registration)

        await asyncio.to_thread(register)
        return self

    async def die(self) -> None:
        """The session ends (ZooKeeper drops the registration) and the socket closes."""
        if self.zk is not None:
            await asyncio.to_thread(self.zk.close)
            self.zk = None
        if self._server is not None:
            self._server.close()
            self._server = None

    def of(self, api_key: int) -> list[Any]:
        return [request for key, request in self.requests if key == api_key]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                header, request = decode_request(bytearray(await reader.readexactly(size)))
                self.requests.append((header.api_key, request))
                writer.write(
                    encode_response(header, _answer(header.api_key, header.api_version, request))
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _answer(api_key: int, version: int, request: Any) -> Any:
    if api_key == ib.STOP_REPLICA:
        errors = [
            {"topic_name": topic.topic_name, "partition_index": p.partition_index, "error_code": 0}
            for topic in request.topic_states
            for p in topic.partition_states
        ]
        return build_response(api_key, version, {"error_code": 0, "partition_errors": errors})
    return build_response(api_key, version, {"error_code": 0})


def partition_states(request: Any) -> dict[tuple[str, int], Any]:
    """LeaderAndIsr / UpdateMetadata partition states by (topic, partition)."""
    return {
        (topic.topic_name, int(p.partition_index)): p
        for topic in request.topic_states
        for p in topic.partition_states
    }


async def wait_for(condition: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
