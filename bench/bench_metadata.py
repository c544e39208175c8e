"""Metadata for many partitions: the first answer after a change, and the kept answer.

Run from the repository root: ``.venv/bin/python bench/bench_metadata.py`` (under a
minute). One embedded broker subprocess with ``--topics`` topics of ``--per-topic``
partitions (10 x 1,000 by default). Then ``--changes`` rounds of: a change (one partition
added to one topic, or a new one-partition topic, alternately), the first Metadata v9 for
every topic after it (time from sending the request to the last byte of the answer, not
decoded), and the median of ``--requests`` more (the kept answer). Baselines from the same
run: a Metadata request naming one one-partition topic (what a small request costs on
this connection), and, in this process, kio's building and encoding of the same
10,000-partition answer (what every first answer after a change cost before). The CPU
time of the broker's threads during each first answer is printed too (from
``/proc/<pid>/task/*/schedstat``): on a loaded machine a request's wall time is mostly waiting
for a core.

``--before-src DIR`` also runs a broker from another checkout's ``src`` (e.g. main's)
through the same rounds, interleaved with this one's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_partitions import create, load, source  # this script's folder is on sys.path
from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import METADATA, RawClient

from odradek.protocol.build import build_request, build_response
from odradek.protocol.codec import decode_response, encode_request, encode_response_body

CREATE_PARTITIONS = 37
VERSION = 9


def ask(client: RawClient, topics: list[str] | None) -> tuple[float, bytes]:
    """Seconds from sending a Metadata request to the last byte of its answer."""
    client.correlation += 1
    request = build_request(
        METADATA, VERSION, {"topics": None if topics is None else [{"name": t} for t in topics],
                            "allow_auto_topic_creation": False},
    )  # fmt: skip
    frame = encode_request(VERSION, client.correlation, "bench", request)
    sock = client.sock
    start = time.perf_counter()
    sock.sendall(frame)
    size = struct.unpack(">i", _read(sock, 4))[0]
    payload = _read(sock, size)
    took = time.perf_counter() - start
    if struct.unpack(">i", payload[:4])[0] != client.correlation:
        raise SystemExit(f"answer to request {struct.unpack('>i', payload[:4])[0]}, not "
                         f"{client.correlation}")  # fmt: skip
    return took, payload


def _read(sock: socket.socket, n: int) -> bytes:
    buffer = bytearray(n)
    view = memoryview(buffer)
    got = 0
    while got < n:
        count = sock.recv_into(view[got:])
        if not count:
            raise ConnectionError("broker closed the connection")
        got += count
    return bytes(buffer)


def broker_cpu_ms(broker: BrokerProcess) -> float:
    """CPU time of the broker's threads so far (the old code encoded on a thread), from
    ``/proc/<pid>/task/*/schedstat`` (nanoseconds on a CPU): unlike the wall time of a
    request on this loaded machine, it leaves out the time the broker waited for a core."""
    total = 0
    for task in Path(f"/proc/{broker.proc.pid}/task").iterdir():  # type: ignore[union-attr]
        with contextlib.suppress(OSError):  # a thread that has just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e6


def partitions_in(payload: bytes) -> int:
    _, response = decode_response(METADATA, VERSION, payload)
    return sum(len(t.partitions) for t in response.topics)  # type: ignore[attr-defined]


def change(client: RawClient, round_: int, sizes: dict[str, int]) -> str:
    """Round 0, 2, ...: a partition added to a big topic; 1, 3, ...: a new small topic."""
    if round_ % 2:
        name = f"small-{round_}"
        create(client, name, 1)
        sizes[name] = 1
        return "new 1-partition topic"
    name = f"bench-{(round_ // 2) % len([t for t in sizes if t.startswith('bench-')])}"
    sizes[name] += 1
    response: Any = client.call(CREATE_PARTITIONS, 2, {
        "topics": [{"name": name, "count": sizes[name], "assignments": None}],
        "timeout": 60_000, "validate_only": False})  # fmt: skip
    if response.results[0].error_code != 0:
        raise SystemExit(f"adding a partition to {name} failed: {response.results[0]}")
    return "partition added"


def kio_encoding(payload: bytes) -> float:
    """Seconds kio takes to build and encode the answer in ``payload`` (the old path)."""
    _, response = decode_response(METADATA, VERSION, payload)
    values = {
        "throttle_time": 0,
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in response.brokers],  # type: ignore[attr-defined]
        "cluster_id": response.cluster_id,  # type: ignore[attr-defined]
        "controller_id": response.controller_id,  # type: ignore[attr-defined]
        "topics": [
            {"error_code": 0, "name": t.name, "topic_id": getattr(t, "topic_id", None),
              "is_internal": False,
             "partitions": [
                 {"error_code": 0, "partition_index": p.partition_index, "leader_id": p.leader_id,
                  "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replica_nodes),
                  "isr_nodes": list(p.isr_nodes), "offline_replicas": []}
                 for p in t.partitions]}
            for t in response.topics  # type: ignore[attr-defined]
        ],
    }  # fmt: skip
    start = time.perf_counter()
    encode_response_body(build_response(METADATA, VERSION, values))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--per-topic", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=6)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--before-src", help="also run a broker from this src dir, interleaved")
    args = parser.parse_args()
    names = {"after": None}
    if args.before_src:
        names = {"before": args.before_src, "after": None}
    with tempfile.TemporaryDirectory(prefix="bench-metadata-") as tmp:
        brokers: dict[str, BrokerProcess] = {}
        clients: dict[str, RawClient] = {}
        sizes: dict[str, dict[str, int]] = {}
        try:
            for name, src in names.items():
                with source(src):
                    brokers[name] = BrokerProcess(Path(tmp) / name).start()
                client = clients[name] = RawClient(brokers[name].port)
                client.sock.settimeout(600)
                sizes[name] = {}
                create(client, "one", 1)
                for i in range(args.topics):
                    create(client, f"bench-{i}", args.per_topic)
                    sizes[name][f"bench-{i}"] = args.per_topic
            print(f"{args.topics} topics of {args.per_topic:,} partitions; {load()}")
            for name in names:  # the first answer after the creates: every topic new
                # A request naming one small topic first: is the broker still busy with
                # the creates (the partition.metadata writes of its flush job)?
                probe, _ = ask(clients[name], ["one"])
                cpu_before = broker_cpu_ms(brokers[name])
                took, payload = ask(clients[name], None)
                print(f"  {name}: first Metadata after the creates {took * 1000:.1f} ms, broker "
                      f"CPU {broker_cpu_ms(brokers[name]) - cpu_before:.2f} ms (naming one "
                      f"partition just before: {probe * 1000:.1f} ms)")  # fmt: skip
            first: dict[str, list[float]] = {n: [] for n in names}
            kept: dict[str, list[float]] = {n: [] for n in names}
            small: dict[str, list[float]] = {n: [] for n in names}
            cpu: dict[str, list[float]] = {n: [] for n in names}
            payload = b""
            for round_ in range(args.changes):
                for name in names if round_ % 2 == 0 else list(reversed(names)):
                    client = clients[name]
                    what = change(client, round_, sizes[name])
                    cpu_before = broker_cpu_ms(brokers[name])
                    took, payload = ask(client, None)
                    cpu[name].append(broker_cpu_ms(brokers[name]) - cpu_before)
                    listed = partitions_in(payload)
                    expected = sum(sizes[name].values()) + 1
                    if listed != expected:
                        _, response = decode_response(METADATA, VERSION, payload)
                        counts = {t.name: len(t.partitions) for t in response.topics}  # type: ignore[attr-defined]
                        raise SystemExit(f"{name}: {listed} partitions listed, {expected} "
                                         f"exist: {counts} vs {sizes[name]}")  # fmt: skip
                    first[name].append(took)
                    kept[name].append(statistics.median(
                        ask(client, None)[0] for _ in range(args.requests)))  # fmt: skip
                    small[name].append(statistics.median(
                        ask(client, ["one"])[0] for _ in range(args.requests)))  # fmt: skip
                    print(f"  {name} round {round_ + 1} ({what}, {listed:,} partitions): first "
                          f"{took * 1000:.2f} ms (broker CPU {cpu[name][-1]:.2f} ms), kept "
                          f"{kept[name][-1] * 1000:.2f} ms, "
                          f"one partition {small[name][-1] * 1000:.2f} ms")  # fmt: skip
            old = statistics.median(kio_encoding(payload) for _ in range(3))
            for name in names:
                base = statistics.median(small[name])
                f, k = statistics.median(first[name]), statistics.median(kept[name])
                print(f"{name}: Metadata v9 for all {listed:,} partitions, median of "
                      f"{args.changes}: first after a change {f * 1000:.2f} ms (worst "
                      f"{max(first[name]) * 1000:.2f} ms), kept {k * 1000:.2f} ms; one "
                      f"partition {base * 1000:.2f} ms; ratios {f / base:.1f} and "
                      f"{k / base:.1f}; broker CPU for the first answer: median "
                      f"{statistics.median(cpu[name]):.2f} ms, worst "
                      f"{max(cpu[name]):.2f} ms")  # fmt: skip
            print(f"kio building and encoding the same answer in this process: {old * 1000:.1f} "
                  f"ms (the old first answer's encoding, on a thread); {load()}")  # fmt: skip
        finally:
            for broker in brokers.values():
                broker.stop(timeout=120)


if __name__ == "__main__":
    os.environ.setdefault("HYPOTHESIS_NO_PLUGINS", "1")
    main()
