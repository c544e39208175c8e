"""The least a Python broker on uvloop can spend per request: a server that only frames.

``python bench/uvloop_floor.py PORT`` serves on 127.0.0.1:PORT until killed. For every
request frame it reads (a ``BufferedProtocol`` reading into one reusable buffer, as the
broker's does), it writes the same ready-made Produce v9 answer (one partition, no error)
with the request's correlation id: no decoding, no log, no bookkeeping. ``bench_ingest``
measures it with the same single-record Produce requests as the broker, one at a time, so
the broker's CPU per request can be read against what the event loop and the kernel cost
here (the socket read and write, the wake-up), in the same run.
"""

from __future__ import annotations

import asyncio
import struct
import sys

import uvloop

from odradek.protocol.produce_response import encode_produce_response

_SIZE = struct.Struct(">i")
_ANSWER = bytearray(
    encode_produce_response(
        0,
        9,
        [("small", [{"index": 0, "error_code": 0, "base_offset": 0, "log_start_offset": 0}])],
    )
    or b""
)


class FloorProtocol(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.buffer = bytearray(1 << 16)
        self.view = memoryview(self.buffer)
        self.filled = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view[self.filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self.filled += nbytes
        position = 0
        while self.filled - position >= 4:
            (size,) = _SIZE.unpack_from(self.buffer, position)
            if self.filled - position - 4 < size:
                break
            answer = bytearray(_ANSWER)
            answer[4:8] = self.buffer[position + 8 : position + 12]  # the correlation id
            assert self.transport is not None
            self.transport.write(bytes(answer))
            position += 4 + size
        rest = self.filled - position
        self.view[:rest] = self.view[position : self.filled]
        self.filled = rest


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_server(FloorProtocol, "127.0.0.1", port)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
