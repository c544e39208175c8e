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

from bench_ingest import fetch_frame, produce_frame
from bench_produce_path import best_us, broker_and_connection, feeder, print_ratios, runs_of

from odradek.protocol.build import build_request
from odradek.protocol.codec import encode_request

API_VERSIONS, API_VERSIONS_VERSION = 18, 3


async def measure(requests: int) -> dict[str, float]:
    server, connection, transport = await broker_and_connection("bench-fetch-path-")
    feeder(connection, produce_frame("small", [b"x" * 100]))()
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
        feed = feeder(connection, frame)
        answered = transport.answers
        for _ in range(2000):
            feed()
        await asyncio.sleep(0)
        if transport.answers - answered != 2000:
            raise RuntimeError(f"{name}: a request was not answered at once")
        figures[name] = best_us(feed, requests)
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
    runs = runs_of(__file__, args.requests, args.before_src, child(args.requests))
    for name, figures in runs:
        fetch, baseline = figures["fetch"], figures["baseline"]
        print(f"\n== {name} ==")
        print(f"Fetch, one record ready: {fetch:.1f} us, x{fetch / baseline:.2f} of the baseline")
        print(f"baseline, ApiVersions on the same connection: {baseline:.1f} us")
    print_ratios(runs, "fetch", "Fetch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
