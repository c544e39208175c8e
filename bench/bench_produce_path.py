"""Broker CPU for one single-record Produce, in process with hot caches, against the cost
of the connection machinery alone measured in the same run.

A real broker (`KafkaServer`, a temporary data directory) runs in this process. One
connection's `Connection.buffer_updated` is fed one acks=all single-record Produce v9
frame after another; the transport is a stub, so no socket, no kernel and no other process
runs in between. The figure is per request, the best of 7 rounds of ``--requests``.
It measures the Python work the broker does per request without the cache misses and
wake-ups of a real exchange (`bench_peer.py` and `bench_ingest.py` measure those).

* whole request: frame read, the produce lane, the append, the answer;
* baseline: the same connection whose produce lane hands back a ready answer (framing,
  in-order bookkeeping, back-pressure, the answer's delivery): whole / baseline is printed;
* for this checkout, where the whole goes: the lane's frame read and checks, the log
  append (`Log.append_as_leader`), the replica manager around it, the answer.

``--before-src DIR`` (repeatable) measures another checkout's broker the same way, in a
child process of its own, for the whole and the baseline.

Usage: ``.venv/bin/python bench/bench_produce_path.py [--requests 20000] [--before-src DIR]``
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
from typing import Any

from bench_ingest import produce_frame

ROUNDS = 7


class StubTransport:
    """What Connection needs of a transport; counts the answers written."""

    def __init__(self) -> None:
        self.answers = 0

    def write(self, data: bytes) -> None:
        self.answers += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        addresses = {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 9092)}
        return addresses.get(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def best_us(work: Callable[[], object], requests: int) -> float:
    return min(timeit.repeat(work, number=requests, repeat=ROUNDS)) / requests * 1e6


async def broker_and_connection(prefix: str) -> tuple[Any, Any, StubTransport]:
    """A real broker in this process (data in a new temporary directory named from
    ``prefix``) with a one-partition topic ``small``, and one connection to it whose
    transport is a stub: ``(server, connection, transport)``."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from odradek.broker.config import BrokerConfig
    from odradek.broker.connection import Connection
    from odradek.broker.server import KafkaServer

    data = tempfile.mkdtemp(prefix=prefix)
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
    return server, connection, transport


def feeder(connection: Any, frame: bytes) -> Callable[[], None]:
    """What feeds ``frame`` to ``connection`` as one socket read."""

    def feed() -> None:
        buffer = connection.get_buffer(len(frame))
        buffer[: len(frame)] = frame
        connection.buffer_updated(len(frame))

    return feed


def runs_of(
    script: str, requests: int, before_src: list[str], mine: dict[str, float]
) -> list[tuple[str, dict[str, float]]]:
    """This checkout's figures (``mine``), then each ``--before-src`` checkout's, named."""
    runs = [("this checkout", mine)]
    for src in before_src:
        runs.append((f"before ({src})", before_src_figures(script, requests, src)))
    return runs


def print_ratios(runs: list[tuple[str, dict[str, float]]], key: str, per: str) -> None:
    """This checkout's ``key`` figure against each other run's."""
    if len(runs) > 1:
        print()
        mine = runs[0][1][key]
        for name, figures in runs[1:]:
            print(f"this checkout / {name}: x{mine / figures[key]:.2f} per {per}")


def before_src_figures(script: str, requests: int, src: str) -> dict[str, float]:
    """``script --child --requests N`` run on another checkout's ``src``: its figures."""
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, script, "--child", "--requests", str(requests)],
        env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


async def measure(requests: int, components: bool) -> dict[str, float]:
    import uvloop  # noqa: F401 - the loop the broker runs on (installed by main)

    server, connection, transport = await broker_and_connection("bench-produce-path-")
    network = server.networks[0]
    frame = produce_frame("small", [b"x" * 100], acks=-1)
    one = feeder(connection, frame)
    for _ in range(2000):
        one()
    figures = {"whole": best_us(one, requests)}
    if transport.answers != 2000 + ROUNDS * requests:
        raise RuntimeError(f"{transport.answers} answers: a request was not answered at once")

    lane = network.produce_lane
    body = bytearray(frame[4:])
    accepted = lane.accept(memoryview(body), network.api_versions)
    ctx = connection._request_context(accepted[0], 0.0)
    ready = lane.answer(ctx, lane.accept(memoryview(bytearray(body)), network.api_versions)[1])
    # Older checkouts' lanes answer with a coroutine: the baseline's lane must too.
    awaited = not isinstance(ready, bytes)
    if awaited:
        ready = await ready
    if components and not awaited:
        replicas = server.replica_manager
        log = replicas.partition("small", 0).log

        def read() -> Any:
            return lane.accept(memoryview(bytearray(body)), network.api_versions)

        def read_append() -> None:
            log.append_as_leader(read()[1].records, leader_epoch=0)

        def read_replicas() -> None:
            replicas.append_or_offload("small", 0, read()[1].records, required_acks=-1)

        def read_answer() -> None:
            lane.answer(ctx, read()[1])

        figures["read"] = best_us(read, requests)
        figures["read+append"] = best_us(read_append, requests)
        figures["read+replicas"] = best_us(read_replicas, requests)
        figures["read+answer"] = best_us(read_answer, requests)

    class ReadyLane:
        """Takes every frame and hands back a ready answer: the connection alone."""

        def accept(self, frame: memoryview, versions: Any) -> Any:
            return accepted

        def answer(self, ctx: Any, lone: Any) -> Any:
            return answered() if awaited else ready

    async def answered() -> Any:
        return ready

    network.produce_lane = ReadyLane()
    figures["baseline"] = best_us(one, requests)
    network.produce_lane = lane
    await server.shutdown()
    return figures


def child(requests: int, components: bool) -> dict[str, float]:
    import uvloop

    uvloop.install()
    return asyncio.run(measure(requests, components))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="per timed round")
    parser.add_argument("--before-src", action="append", default=[], help="another src dir")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.requests, components=False)))
        return 0
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    mine = child(args.requests, components=True)
    runs = runs_of(__file__, args.requests, args.before_src, mine)
    for name, figures in runs:
        whole, baseline = figures["whole"], figures["baseline"]
        print(f"\n== {name} ==")
        print(f"whole request: {whole:.2f} us, x{whole / baseline:.2f} of the baseline")
        print(f"baseline, the connection with a lane giving a ready answer: {baseline:.2f} us")
        if "read" in figures:
            read, append = figures["read"], figures["read+append"]
            replicas, answer = figures["read+replicas"], figures["read+answer"]
            print(f"  the lane's frame read and checks: {read:.2f} us")
            print(f"  the log append: {append - read:.2f} us")
            print(f"  the replica manager around it: {replicas - append:.2f} us")
            print(f"  the answer around that: {answer - replicas:.2f} us")
    print_ratios(runs, "whole", "request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
