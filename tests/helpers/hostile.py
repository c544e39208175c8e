"""Hostile load against a broker, and a well-behaved client timing its round trips.

Used by tests/integration/test_fairness.py and bench/bench_hostile.py. The load runs in
its own process (``python -m tests.helpers.hostile PORT CONNECTIONS SECONDS``) so that its
CPU use does not distort the round trips measured in the caller. It opens CONNECTIONS
connections, in equal thirds:

* slow loris: a size prefix declaring 1000 bytes, then one byte every 200 ms;
* huge declared frames: a prefix declaring 100,000,000 bytes (under the default
  ``socket.request.max.bytes``), then 256 KiB, then one KiB every 200 ms;
* floods: batches of 50 pipelined ApiVersions requests, answers read, again and again.

It prints ``ready`` once every connection is open and ``done <floods answered>`` at the end.

The frame builders write requests by hand (non-flexible versions): building a million
entries through kio would take longer than the broker takes to answer them.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time

_HEAD = struct.Struct(">hhih")


def _header(api_key: int, version: int, correlation: int) -> bytes:
    return _HEAD.pack(api_key, version, correlation, -1)  # client_id: null


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def api_versions_frame(correlation: int) -> bytes:
    return framed(_header(18, 0, correlation))


def produce_frame(partitions: int, topic: str = "t", correlation: int = 1) -> bytes:
    """Produce v3 (acks=1) listing ``partitions`` partitions of ``topic``, each with an
    empty record set."""
    body = [_header(0, 3, correlation), struct.pack(">hhi", -1, 1, 30000)]
    body.append(struct.pack(">i", 1) + _string(topic) + struct.pack(">i", partitions))
    entry = struct.Struct(">ii")
    body.append(b"".join(entry.pack(i, 0) for i in range(partitions)))
    return framed(b"".join(body))


def delete_topics_frame(names: int, correlation: int = 1) -> bytes:
    """DeleteTopics v1 naming ``names`` topics that do not exist."""
    body = [_header(20, 1, correlation), struct.pack(">i", names)]
    body.append(b"".join(_string(f"missing-{i}") for i in range(names)))
    body.append(struct.pack(">i", 30000))
    return framed(b"".join(body))


def list_offsets_frame(partitions: int, topic: str = "t", correlation: int = 1) -> bytes:
    """ListOffsets v1 asking the latest offset of ``partitions`` partitions of ``topic``."""
    body = [_header(2, 1, correlation), struct.pack(">i", -1)]
    body.append(struct.pack(">i", 1) + _string(topic) + struct.pack(">i", partitions))
    entry = struct.Struct(">iq")
    body.append(b"".join(entry.pack(i, -1) for i in range(partitions)))
    return framed(b"".join(body))


def fetch_frame(partitions: int, topic: str = "t", correlation: int = 1) -> bytes:
    """Fetch v4 of ``partitions`` partitions of ``topic`` from offset 0, not waiting."""
    body = [_header(1, 4, correlation), struct.pack(">iiiib", -1, 0, 0, 52428800, 0)]
    body.append(struct.pack(">i", 1) + _string(topic) + struct.pack(">i", partitions))
    entry = struct.Struct(">iqi")
    body.append(b"".join(entry.pack(i, 0, 1048576) for i in range(partitions)))
    return framed(b"".join(body))


def offset_commit_frame(partitions: int, topic: str = "t", correlation: int = 1) -> bytes:
    """OffsetCommit v2 of group ``g`` (a simple consumer's commit) for ``partitions``
    partitions of ``topic``."""
    body = [_header(8, 2, correlation), _string("g"), struct.pack(">i", -1), _string("")]
    body.append(struct.pack(">q", -1) + struct.pack(">i", 1) + _string(topic))
    body.append(struct.pack(">i", partitions))
    entry = struct.Struct(">iqh")
    body.append(b"".join(entry.pack(i, 5, -1) for i in range(partitions)))
    return framed(b"".join(body))


def read_response(sock: socket.socket) -> bytes:
    """One whole response frame (without its size prefix)."""
    size = struct.unpack(">i", _read(sock, 4))[0]
    return _read(sock, size)


def _read(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class Pinger:
    """A well-behaved client: one ApiVersions request at a time, each round trip timed."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 60) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def round_trip(self) -> float:
        self.correlation += 1
        started = time.perf_counter()
        self.sock.sendall(api_versions_frame(self.correlation))
        response = read_response(self.sock)
        elapsed = time.perf_counter() - started
        assert struct.unpack(">i", response[:4])[0] == self.correlation
        return elapsed

    def sample(self, seconds: float, pause: float = 0.005) -> list[float]:
        """Round trips for ``seconds`` (at least one), ``pause`` apart."""
        times = [self.round_trip()]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(pause)
            times.append(self.round_trip())
        return times

    def close(self) -> None:
        self.sock.close()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


# The hostile load ---------------------------------------------------------------------


# Each runs until cancelled.
async def _slow_loris(port: int, answered: list[int]) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(struct.pack(">i", 1000))
    while not writer.is_closing():
        writer.write(b"\x00")
        await asyncio.sleep(0.2)
    writer.close()


async def _huge_frame(port: int, answered: list[int]) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(struct.pack(">i", 100_000_000) + bytes(256 * 1024))
    while not writer.is_closing():
        writer.write(bytes(1024))
        await asyncio.sleep(0.2)
    writer.close()


async def _flood(port: int, answered: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    batch = b"".join(api_versions_frame(i) for i in range(50))
    while True:
        writer.write(batch)
        for _ in range(50):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
        answered[0] += 50
    writer.close()


async def run_load(port: int, connections: int, seconds: float) -> int:
    """Run the load for ``seconds`` after every connection is open; floods answered."""
    answered = [0]
    kinds = [_slow_loris, _huge_frame, _flood]
    tasks = [asyncio.ensure_future(kinds[i % 3](port, answered)) for i in range(connections)]
    await asyncio.sleep(0.5)
    print("ready", flush=True)
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return answered[0]


def main() -> None:
    port, connections, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    answered = asyncio.run(run_load(port, connections, seconds))
    print(f"done {answered}", flush=True)


if __name__ == "__main__":
    main()
