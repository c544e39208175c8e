"""The broker's produce hot path: ingest throughput and CPU per request, with baselines.

Run from the repository root: ``.venv/bin/python bench/bench_ingest.py`` (~1-2 min;
``--help`` for sizes). It starts its own broker subprocesses (data in a temporary
directory, 127.0.0.1 on free ports). ``--before-src DIR`` also starts a broker from
another checkout's ``src`` (e.g. main's, before a change) and measures it the same way in
the same run, so the two sets of figures share the machine's load.

Measured, all in one run:

1. raw loopback TCP: one connection, 1 MiB ``sendall`` -> ``recv_into`` between two
   processes (``produce_consume.loopback_mb_per_s``), right before each broker's figures.
   The ceiling for moving bytes.
2. the broker alone, fed pre-encoded Produce requests (one ~1 MiB batch of 16 x 65,000 B
   records each, under the default max.message.bytes; acks=1) pipelined over one
   connection: MB/s and its ratio to (1), and broker CPU seconds per GB (goal: ratio >=
   0.6). Sampled answers must carry error code 0.
3. confluent-kafka producing 64 KiB records (acks=1): broker CPU seconds per GB.
4. single-record Produce requests (100-byte value, acks=1), pre-encoded: broker CPU us per
   request, pipelined (many per socket read) and one at a time (send, wait for the
   answer: what a producer with linger.ms=0 and a slow trickle costs).
5. produce-to-consume latency through confluent-kafka at 10,000 records/s, linger.ms=0:
   p99 of each of ``--latency-runs`` runs, each timed from after the consumer delivered
   its warm-up records (``produce_consume.latency_at_rate``).
6. the floor under (4), once per run: ``bench/uvloop_floor.py``, a uvloop server that only
   frames requests and writes a ready-made answer, fed the same requests one at a time;
   its CPU per request is what the event loop, the socket calls and the wake-up cost
   here, beside which the broker's own work per request can be read.
7. the same path without a client library: a Fetch (max.wait 500 ms, min.bytes 1) waits
   in the purgatory on one connection, a single-record Produce arrives on another, and
   the time from sending the Produce to reading the Fetch answer is timed, one cycle
   after the other: p50/p99 and broker CPU us per cycle (what the broker adds to a
   tailing consumer's latency, with no Python client threads in the way).
8. the floor under (2), right before each broker's 1 MiB phase: ``bench/ingest_floor.py``,
   a server that only reads each frame into a reused buffer, checks the batch's CRC and
   writes it to a file, fed the same frames by the same client (``--ingest-floor``
   names its modes: ``write`` by default, also ``thread`` and ``splice``). Its ratio to
   (1) is what this machine allows any receiver that keeps the records in a file; the
   broker's figure is printed as a ratio to the best floor too.

Broker CPU is user + system time from /proc/<pid>/stat.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from produce_consume import (
    free_port,
    latency_at_rate,
    loopback_mb_per_s,
    process_cpu_s,
    produce_rate,
    stop_process,
    wait_for_port,
)

from odradek.protocol.build import build_request
from odradek.protocol.codec import encode_request
from odradek.protocol.versions import FETCH, PRODUCE
from odradek.records.batch import Record, build_batch

MiB = 1 << 20
PRODUCE_VERSION = 9
BIG_RECORD = 65_000
FETCH_VERSION = 12


@contextlib.contextmanager
def broker(
    workdir: Path, src: str | None, extra: tuple[str, ...] = ()
) -> Iterator[tuple[int, int]]:
    """A broker subprocess running the code in ``src`` (this checkout's when None), with
    ``extra`` ``key=value`` overrides."""
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = src or str(Path(__file__).resolve().parent.parent / "src")
    data = workdir / f"data-{port}"
    cmd = [
        sys.executable, "-m", "odradek", "server", "--log-level", "WARNING",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override", f"log.dir={data}",
        "--override", "log.segment.bytes=1073741824",
        "--override", "log.retention.bytes=2147483648",
    ]  # fmt: skip
    for override in extra:
        cmd += ["--override", override]
    log_path = workdir / f"broker-{port}.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for_port(port, proc, "odradek broker")
        yield port, proc.pid
    except BaseException:
        sys.stderr.write(log_path.read_text(errors="replace")[-3000:])
        raise
    finally:
        stop_process(proc)
        # Gone before the next broker runs: its dirty pages are dropped, not written back
        # while the next one is measured.
        shutil.rmtree(data, ignore_errors=True)


def create_topic(port: int, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    for future in futures.values():
        future.result(30)


def produce_frame(topic: str, values: list[bytes], acks: int = 1) -> bytes:
    return produce_frame_and_batch_offset(topic, values, acks)[0]


def produce_frame_and_batch_offset(
    topic: str, values: list[bytes], acks: int = 1
) -> tuple[bytes, int]:
    """A framed Produce request of one batch, and where the batch starts after the size."""
    batch = bytes(build_batch([Record(v) for v in values]))
    request = build_request(
        PRODUCE,
        PRODUCE_VERSION,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": 30_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    frame = encode_request(PRODUCE_VERSION, 1, "bench-ingest", request)
    return frame, frame.index(batch) - 4


def _recv_exact(sock: socket.socket, view: memoryview, size: int) -> None:
    got = 0
    while got < size:
        n = sock.recv_into(view[got:size])
        if not n:
            raise ConnectionError("broker closed the connection")
        got += n


def _uvarint(buf: bytearray, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def produce_error_code(buf: bytearray) -> int:
    """The error code of the one partition in a flexible Produce response (v9) body."""
    pos = 4  # correlation id
    _tags, pos = _uvarint(buf, pos)  # response header tagged fields (none)
    _topics, pos = _uvarint(buf, pos)
    name_len, pos = _uvarint(buf, pos)
    pos += name_len - 1
    _partitions, pos = _uvarint(buf, pos)
    (error_code,) = struct.unpack_from(">h", buf, pos + 4)  # after the partition index
    return int(error_code)


def _read_responses(
    sock: socket.socket, count: int, slots: threading.Semaphore | None = None
) -> None:
    """Read ``count`` answers; every 64th (and the last) must say the append succeeded:
    an error answer costs the broker far less than an append and would flatter it."""
    buf = bytearray(64 * 1024)
    view = memoryview(buf)
    for i in range(count):
        _recv_exact(sock, view, 4)
        (size,) = struct.unpack_from(">i", buf)
        if size > len(buf):
            buf = bytearray(size)
            view = memoryview(buf)
        _recv_exact(sock, view, size)
        if slots is not None:
            slots.release()
        if i % 64 == 0 or i == count - 1:
            code = produce_error_code(buf)
            if code:
                raise RuntimeError(f"the broker answered Produce with error code {code}")


def pipelined(
    port: int, frame: bytes, count: int, pid: int, window: int | None = None
) -> tuple[float, float]:
    """Send ``count`` copies of ``frame`` while reading the answers: (seconds, broker CPU s).

    ``window``: at most this many requests unanswered (librdkafka's
    max.in.flight.requests.per.connection is 5); None: no bound, so the broker reads
    ahead up to its per-connection limit (socket.request.max.bytes of queued frames)."""
    slots = threading.Semaphore(window) if window else None
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(frame)  # warm-up (first append creates the segment)
        _read_responses(sock, 1)
        cpu0 = process_cpu_s(pid)
        started = time.perf_counter()
        failure: list[BaseException] = []

        def send() -> None:
            try:
                for _ in range(count):
                    if slots is not None and not slots.acquire(timeout=60):
                        raise TimeoutError("no answer for 60 s")
                    sock.sendall(frame)
            except BaseException as exc:  # reported by the main thread
                failure.append(exc)

        sender = threading.Thread(target=send, name="bench-ingest-sender")
        sender.start()
        _read_responses(sock, count, slots)
        elapsed = time.perf_counter() - started
        cpu = process_cpu_s(pid) - cpu0
        sender.join(30)
        if failure:
            raise failure[0]
    return elapsed, cpu


def one_at_a_time(port: int, frame: bytes, count: int, pid: int) -> tuple[float, float]:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(frame)
        _read_responses(sock, 1)
        cpu0 = process_cpu_s(pid)
        started = time.perf_counter()
        for _ in range(count):
            sock.sendall(frame)
            _read_responses(sock, 1)
        return time.perf_counter() - started, process_cpu_s(pid) - cpu0


def fetch_frame(topic: str, offset: int, correlation_id: int) -> bytes:
    request = build_request(
        FETCH,
        FETCH_VERSION,
        {
            "replica_id": -1,
            "max_wait": 500,
            "min_bytes": 1,
            "max_bytes": MiB,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": MiB}
                    ],
                }
            ],
        },
    )
    return encode_request(FETCH_VERSION, correlation_id, "bench-ingest", request)


def _read_frame(sock: socket.socket) -> bytes:
    head = bytearray(4)
    _recv_exact(sock, memoryview(head), 4)
    (size,) = struct.unpack(">i", head)
    body = bytearray(size)
    _recv_exact(sock, memoryview(body), size)
    return bytes(body)


def fetch_wakeups(port: int, topic: str, count: int, pid: int) -> tuple[list[float], float]:
    """``count`` cycles of: a Fetch parked at the log end, then one single-record Produce;
    returns the Produce-sent -> Fetch-answered times (ms) and broker CPU s."""
    produce = produce_frame(topic, [b"x" * 100])
    samples: list[float] = []
    with (
        socket.create_connection(("127.0.0.1", port)) as producer,
        socket.create_connection(("127.0.0.1", port)) as consumer,
    ):
        for sock in (producer, consumer):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        producer.sendall(produce)  # the offset of the first cycle's record is known
        _read_responses(producer, 1)
        cpu0 = process_cpu_s(pid)
        for cycle in range(count):
            consumer.sendall(fetch_frame(topic, cycle + 1, cycle))
            # Let it reach the purgatory (an answer now would mean it did not wait).
            time.sleep(0.002)
            started = time.perf_counter()
            producer.sendall(produce)
            answer = _read_frame(consumer)
            samples.append((time.perf_counter() - started) * 1000)
            _read_responses(producer, 1)
            if len(answer) < 100:
                raise RuntimeError(f"Fetch answered without the record ({len(answer)} B)")
        return samples, process_cpu_s(pid) - cpu0


def floor_us_per_request(requests: int) -> float:
    """CPU us per request of bench/uvloop_floor.py, single-record Produce one at a time."""
    port = free_port()
    script = Path(__file__).resolve().parent / "uvloop_floor.py"
    proc = subprocess.Popen([sys.executable, str(script), str(port)])
    try:
        wait_for_port(port, proc, "uvloop floor server")
        frame = produce_frame("small", [b"x" * 100])
        _elapsed, cpu = one_at_a_time(port, frame, requests, proc.pid)
        return cpu / requests * 1e6
    finally:
        stop_process(proc)


def ingest_floor(
    mode: str, workdir: Path, frame: bytes, batch_offset: int, count: int, window: int | None
) -> tuple[float, float]:
    """bench/ingest_floor.py in ``mode`` fed ``count`` copies of ``frame`` as the broker
    is: (MB/s, CPU s/GB)."""
    port = free_port()
    script = Path(__file__).resolve().parent / "ingest_floor.py"
    data = workdir / f"floor-{port}"
    cmd = [sys.executable, str(script), str(port), str(data), str(batch_offset), "--mode", mode]
    proc = subprocess.Popen(cmd)
    try:
        wait_for_port(port, proc, "ingest floor server")
        elapsed, cpu = pipelined(port, frame, count, proc.pid, window)
    finally:
        stop_process(proc)
        shutil.rmtree(data, ignore_errors=True)
    total = count * len(frame)
    return total / elapsed / 1e6, cpu / total * 1e9


def measure(name: str, port: int, pid: int, args: argparse.Namespace) -> None:
    """Every phase whose count is above 0 (``--raw-mb 0`` skips the 1 MiB phase, ...)."""
    print(f"\n== {name} (pid {pid}) ==", flush=True)
    if args.raw_mb > 0:
        create_topic(port, "raw")
        # Measured right before the broker is: the machine's load drifts within a run.
        loopback = loopback_mb_per_s(args.loopback_mb * MiB)
        print(f"raw loopback TCP (1 MiB sends): {loopback:.0f} MB/s", flush=True)
        # 16 records of 65,000 bytes: one batch just under Kafka's default
        # max.message.bytes (1,048,588), so the broker appends it rather than answering
        # RECORD_TOO_LARGE.
        big, batch_offset = produce_frame_and_batch_offset(
            "raw", [os.urandom(BIG_RECORD) for _ in range(16)]
        )
        count = max(1, args.raw_mb * MiB // len(big))
        floors = []
        for mode in args.ingest_floor:
            floor, floor_s_gb = ingest_floor(
                mode, args.workdir, big, batch_offset, count, args.window
            )
            floors.append(floor)
            print(
                f"ingest floor (bench/ingest_floor.py --mode {mode}: read, CRC, write to a "
                f"file): {floor:.0f} MB/s, ratio to loopback {floor / loopback:.2f}; CPU "
                f"{floor_s_gb:.2f} s/GB",
                flush=True,
            )
        elapsed, cpu = pipelined(port, big, count, pid, args.window)
        total = count * len(big)
        rate = total / elapsed / 1e6
        of_floor = f", x{rate / max(floors):.2f} of the best floor" if floors else ""
        print(
            f"pre-encoded 1 MiB Produce, 1 connection: {rate:.0f} MB/s, ratio to loopback "
            f"{rate / loopback:.2f} (goal >= 0.6){of_floor}; broker CPU "
            f"{cpu / total * 1e9:.2f} s/GB",
            flush=True,
        )

    if args.big_records > 0:
        cpu0 = process_cpu_s(pid)
        _records, mb_s = produce_rate(f"127.0.0.1:{port}", "big", args.big_records, 64 * 1024)
        cpu = process_cpu_s(pid) - cpu0
        gb = args.big_records * 64 * 1024 / 1e9
        print(
            f"confluent-kafka 64 KiB records: {mb_s:.0f} MB/s, broker CPU {cpu / gb:.2f} s/GB",
            flush=True,
        )

    if args.small_requests >= 4:
        create_topic(port, "small")
        small = produce_frame("small", [b"x" * 100])
        elapsed, cpu = pipelined(port, small, args.small_requests, pid)
        print(
            f"single-record Produce, pipelined: {args.small_requests / elapsed:.0f} req/s, "
            f"broker CPU {cpu / args.small_requests * 1e6:.0f} us/request",
            flush=True,
        )
        n = args.small_requests // 4
        elapsed, cpu = one_at_a_time(port, small, n, pid)
        floor = f", x{cpu / n * 1e6 / args.floor_us:.2f} of the floor" if args.floor_us else ""
        print(
            f"single-record Produce, one at a time: {n / elapsed:.0f} req/s, "
            f"broker CPU {cpu / n * 1e6:.0f} us/request{floor}",
            flush=True,
        )

    if args.wakeups:
        create_topic(port, "wakeup")
        samples, cpu = fetch_wakeups(port, "wakeup", args.wakeups, pid)
        samples.sort()
        print(
            f"parked Fetch woken by a Produce, raw sockets: p50 "
            f"{samples[len(samples) // 2]:.2f} ms, p99 {samples[int(len(samples) * 0.99)]:.2f}"
            f" ms; broker CPU {cpu / args.wakeups * 1e6:.0f} us per Produce + Fetch",
            flush=True,
        )

    if args.latency_runs <= 0:
        return
    p99s = []
    for run in range(args.latency_runs):
        latency = latency_at_rate(
            f"127.0.0.1:{port}", f"latency-{run}", 10_000, args.latency_seconds
        )
        p99s.append(latency.percentile(0.99))
    print(
        "produce-to-consume p99 at 10,000 rec/s: "
        + ", ".join(f"{p:.2f}" for p in p99s)
        + " ms (goal < 5 ms)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--before-src",
        action="append",
        default=[],
        help="also measure a broker running this src dir (repeatable)",
    )
    parser.add_argument("--before-first", action="store_true", help="measure --before-src first")
    parser.add_argument(
        "--window",
        type=int,
        help="most 1 MiB requests unanswered at once (librdkafka's default is 5); "
        "default: no bound, the broker reads ahead as far as it allows",
    )
    parser.add_argument(
        "--append-thread",
        type=int,
        metavar="BYTES",
        help="also measure this checkout with append.thread.min.bytes=BYTES",
    )
    parser.add_argument("--loopback-mb", type=int, default=1024)
    parser.add_argument("--raw-mb", type=int, default=512, help="MB of 1 MiB Produce requests")
    parser.add_argument("--big-records", type=int, default=4000, help="64 KiB records")
    parser.add_argument("--small-requests", type=int, default=20_000)
    parser.add_argument("--wakeups", type=int, default=1000, help="Produce + parked Fetch cycles")
    parser.add_argument(
        "--floor-requests",
        type=int,
        default=5000,
        help="requests to measure bench/uvloop_floor.py with (0: skip)",
    )
    parser.add_argument(
        "--ingest-floor",
        default="write",
        help="comma-separated modes of bench/ingest_floor.py to measure before each broker's "
        "1 MiB phase (write, thread, splice; empty: none)",
    )
    parser.add_argument("--latency-runs", type=int, default=5)
    parser.add_argument("--latency-seconds", type=float, default=1.0)
    args = parser.parse_args(argv)
    args.ingest_floor = [mode for mode in args.ingest_floor.split(",") if mode]
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    args.floor_us = floor_us_per_request(args.floor_requests) if args.floor_requests else 0.0
    if args.floor_us:
        print(
            f"floor: a uvloop server that only frames (bench/uvloop_floor.py), one "
            f"single-record Produce at a time: CPU {args.floor_us:.0f} us/request",
            flush=True,
        )
    with tempfile.TemporaryDirectory(prefix="odradek-bench-ingest-") as tmp:
        workdir = Path(tmp)
        args.workdir = workdir
        runs: list[tuple[str, str | None, tuple[str, ...]]] = [("this checkout", None, ())]
        if args.append_thread is not None:
            override = f"append.thread.min.bytes={args.append_thread}"
            runs.append((f"this checkout, {override}", None, (override,)))
        runs += [(f"before ({src})", src, ()) for src in args.before_src]
        if args.before_first:  # alternate the order across runs: load drifts
            runs.reverse()
        for name, src, extra in runs:
            with broker(workdir, src, extra) as (port, pid):
                measure(name, port, pid, args)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
