"""Broker CPU for one consumer Fetch whose record is already there, in process with hot
caches, against an ApiVersions request through the same connection in the same run.

A real broker (`KafkaServer`, a temporary data directory) runs in this process with one
single-record batch in partition small-0. One connection's `Connection.buffer_updated`
is fed one Fetch v12 frame after another (offset 0, min_bytes 1, max_wait 500 ms: the
record is there, so each is answered at once); the transport is a stub, so no socket, no
kernel and no other process runs in between. The figure is per request, the best of 7
rounds of ``--requests``. The baseline, an ApiVersions v3 request on the same connection,
is what the generic request path costs without a handler worth the name.

``--before-src DIR`` (repeatable) measures another checkout's broker the same way, in a
child process of its own.

Usage: ``.venv/bin/python bench/bench_fetch_path.py [--requests 5000] [--before-src DIR]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable

from bench_ingest import fetch_frame, produce_frame
from bench_produce_path import StubTransport

from odradek.protocol.build import build_request
from odradek.protocol.codec import encode_request

ROUNDS = 7
API_VERSIONS, API_VERSIONS_VERSION = 18, 3


async def measure(requests: int) -> dict[str, float]:
    from confluent_kafka.admin import AdminClient, NewTopic

    from odradek.broker.config import BrokerConfig
    from odradek.broker.connection import Connection
    from odradek.broker.server import KafkaServer

    data = tempfile.mkdtemp(prefix="bench-fetch-path-")
    config = BrokerConfig.load(None, ["listeners=PLAINTEXT://127.0.0.1:0", f"log.dir={data}"])
    server = KafkaServer(config)
    await server.start()
    network = server.networks[0]

    def create() -> None:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{network.port}"})
        admin.create_topics([NewTopic("small", 1, 1)])["small"].result(30)

    await asyncio.get_running_loop().run_in_executor(None, create)
    connection = Connection(network)
    transport = StubTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    for _ in range(5):  # the connection's tasks reach their waits
        await asyncio.sleep(0)

    def feeder(frame: bytes) -> Callable[[], None]:
        def feed() -> None:
            buffer = connection.get_buffer(len(frame))
            buffer[: len(frame)] = frame
            connection.buffer_updated(len(frame))

        return feed

    feeder(produce_frame("small", [b"x" * 100]))()
    for _ in range(5):
        await asyncio.sleep(0)
    figures: dict[str, float] = {}
    api_versions = build_request(
        API_VERSIONS,
        API_VERSIONS_VERSION,
        {"client_software_name": "bench", "client_software_version": "1"},
    )
    frames = {
        "fetch": fetch_frame("small", 0, 7),
        "baseline": encode_request(API_VERSIONS_VERSION, 8, "bench", api_versions),
    }
    for name, frame in frames.items():
        feed = feeder(frame)
        answered = transport.answers
        for _ in range(2000):
            feed()
        await asyncio.sleep(0)
        if transport.answers - answered != 2000:
            raise RuntimeError(f"{name}: a request was not answered at once")
        rounds = timeit.repeat(feed, number=requests, repeat=ROUNDS)
        figures[name] = min(rounds) / requests * 1e6
    await server.shutdown()
    return figures


def child(requests: int) -> dict[str, float]:
    import uvloop

    uvloop.install()
    return asyncio.run(measure(requests))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5_000, help="per timed round")
    parser.add_argument("--before-src", action="append", default=[], help="another src dir")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.requests)))
        return 0
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    runs = [("this checkout", child(args.requests))]
    for src in args.before_src:
        env = {**os.environ, "PYTHONPATH": src}
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--requests", str(args.requests)],
            env=env, check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        runs.append((f"before ({src})", json.loads(out.strip().splitlines()[-1])))
    for name, figures in runs:
        fetch, baseline = figures["fetch"], figures["baseline"]
        print(f"\n== {name} ==")
        print(f"Fetch, one record ready: {fetch:.1f} us, x{fetch / baseline:.2f} of the baseline")
        print(f"baseline, ApiVersions on the same connection: {baseline:.1f} us")
    if len(runs) > 1:
        print()
        mine = runs[0][1]["fetch"]
        for name, figures in runs[1:]:
            print(f"this checkout / {name}: x{mine / figures['fetch']:.2f} per Fetch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
