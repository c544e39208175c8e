"""Produce/consume throughput and latency of one odradek broker, with same-run baselines.

Run from the repository root: ``.venv/bin/python bench/produce_consume.py`` (``--help`` for
record counts). It starts its own broker subprocess (data in a temporary directory) and,
when ``redis-server`` is installed, its own Redis; both bind 127.0.0.1 on free ports.

What is measured, all in one run on the same machine:

1. raw loopback TCP throughput: one connection, 1 MiB ``sendall`` -> ``recv_into``, sender
   and receiver in separate processes. The ceiling for moving bytes between processes.
2. Redis Streams (baseline, optional): ``redis-benchmark`` (C client) with one connection,
   ``XADD`` pipelined 64 deep with 100-byte values, and ``XRANGE ... COUNT 100`` pipelined
   16 deep, reported as entries/s.
3. confluent-kafka producer, 1 partition, acks=1, 100-byte values: records/s from the first
   ``produce()`` until ``flush()`` returns (every record acknowledged).
4. confluent-kafka consumer reading those records back from offset 0: records/s.
5. the same with 64 KiB values: MB/s for produce and consume, as a fraction of (1).
6. produce-to-consume latency at a fixed 10,000 records/s (linger.ms=0): p50/p99/max of
   the time from ``produce()`` to the record arriving in a consumer polling in a thread.
   The clock starts once the consumer has delivered two warm-up records (the first from
   where it starts, the second produced while it tails the log): no sample includes the
   clients' start-up.

Goals (printed with each ratio): produce >= 1,000,000 rec/s and >= 2x Redis XADD; consume
>= 1,500,000 rec/s and >= 1x Redis XRANGE; 64 KiB MB/s >= 0.5x loopback; p99 < 5 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

MiB = 1 << 20
STARTUP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited early with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{what} not listening on 127.0.0.1:{port} after {STARTUP_TIMEOUT_S}s")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def odradek_broker(workdir: Path, src: str | None = None) -> Iterator[tuple[str, int]]:
    """A broker subprocess: yields (bootstrap address, pid). ``src``: run the code in that
    directory (another checkout's ``src``) instead of the one on PYTHONPATH."""
    port = free_port()
    log_path = workdir / "broker.log"
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    cmd = [
        sys.executable,
        "-m",
        "odradek",
        "server",
        "--log-level",
        "WARNING",
        "--override",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override",
        f"log.dir={workdir / f'data-{port}'}",
    ]
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for_port(port, proc, "odradek broker")
        yield f"127.0.0.1:{port}", proc.pid
    except BaseException:
        sys.stderr.write(log_path.read_text(errors="replace")[-3000:])
        raise
    finally:
        stop_process(proc)


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[int]:
    port = free_port()
    cmd = [
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, "redis-server")
        yield port
    finally:
        stop_process(proc)


# -- baselines ---------------------------------------------------------------------------


def _loopback_receiver(conn: Connection) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        conn.send(server.getsockname()[1])
        peer, _ = server.accept()
        buffer = bytearray(MiB)
        view = memoryview(buffer)
        total = 0
        with peer:
            while True:
                n = peer.recv_into(view)
                if not n:
                    break
                total += n
        conn.send(total)


def loopback_mb_per_s(total_bytes: int) -> float:
    """One TCP connection over loopback, sender and receiver in different processes."""
    parent, child = mp.Pipe()
    receiver = mp.get_context("fork").Process(target=_loopback_receiver, args=(child,))
    receiver.start()
    try:
        port = parent.recv()
        chunk = memoryview(os.urandom(MiB))
        with socket.create_connection(("127.0.0.1", port)) as sock:
            started = time.perf_counter()
            sent = 0
            while sent < total_bytes:
                sock.sendall(chunk)
                sent += len(chunk)
            sock.shutdown(socket.SHUT_WR)
            received = parent.recv()
            elapsed = time.perf_counter() - started
        assert received == sent, (received, sent)
        return sent / elapsed / 1e6
    finally:
        receiver.join(30)


def redis_benchmark(port: int, requests: int, pipeline: int, *command: str) -> float:
    """Requests per second that redis-benchmark reports for one connection."""
    cmd = ["redis-benchmark", "-p", str(port), "-c", "1", "-P", str(pipeline)]
    cmd += ["-n", str(requests), "-q", *command]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    match = re.findall(r"([\d.]+) requests per second", out)
    if not match:
        raise RuntimeError(f"cannot parse redis-benchmark output: {out[-500:]!r}")
    return float(match[-1])


@dataclass
class RedisFigures:
    xadd_per_s: float
    xrange_entries_per_s: float


def redis_baseline(workdir: Path, records: int) -> RedisFigures | None:
    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        return None
    value = "x" * 100
    with redis_server(workdir) as port:
        xadd = redis_benchmark(port, records, 64, "XADD", "bench", "*", "v", value)
        # Each XRANGE returns 100 entries of the stream XADD just filled.
        xrange_requests = max(1000, records // 100)
        xrange = redis_benchmark(
            port, xrange_requests, 16, "XRANGE", "bench", "-", "+", "COUNT", "100"
        )
    return RedisFigures(xadd, xrange * 100)


# -- odradek with confluent-kafka ------------------------------------------------------


def producer(bootstrap: str, **extra: object) -> Producer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": 1,
        "enable.idempotence": False,
        "linger.ms": 5,
        "batch.size": MiB,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "compression.codec": "none",
    }
    conf.update(extra)
    return Producer(conf)


def consumer(bootstrap: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": "bench",
        "enable.auto.commit": False,
        "fetch.max.bytes": 64 * MiB,
        "max.partition.fetch.bytes": 16 * MiB,
        "queued.max.messages.kbytes": 512 * 1024,
        # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s by default) whenever
        # more than queued.min.messages wait in its local queue: with fast fetches that
        # pause, not the broker, would set the pace.
        "queued.min.messages": 2_000_000,
        "fetch.queue.backoff.ms": 1,
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra)
    return Consumer(conf)


def produce_rate(bootstrap: str, topic: str, count: int, value_size: int) -> tuple[float, float]:
    """(records/s, MB/s) producing ``count`` values of ``value_size`` bytes, all acknowledged."""
    value = os.urandom(value_size)
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    p = producer(bootstrap, on_delivery=on_delivery)
    # Warm up: create the topic, connect, learn the leader.
    p.produce(topic, value=value, partition=0)
    if p.flush(30) != 0:
        raise RuntimeError("warm-up record not delivered")
    produce = p.produce
    poll = p.poll
    started = time.perf_counter()
    for i in range(count):
        try:
            produce(topic, value, partition=0)
        except BufferError:
            poll(0.001)
            produce(topic, value, partition=0)
        if i & 0xFFF == 0:
            poll(0)
    remaining = p.flush(120)
    elapsed = time.perf_counter() - started
    if remaining or failures:
        raise RuntimeError(f"{remaining} undelivered, {len(failures)} failed: {failures[:3]}")
    return count / elapsed, count * value_size / elapsed / 1e6


def consume_rate(bootstrap: str, topic: str, count: int, value_size: int) -> tuple[float, float]:
    """(records/s, MB/s) reading ``count`` records of ``topic`` from its first offset."""
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        received = 0
        deadline = time.monotonic() + 300
        # The clock starts at the first record, so connection setup is not counted.
        first = c.consume(num_messages=1, timeout=30)
        if not first:
            raise RuntimeError("consumer got nothing within 30 s")
        started = time.perf_counter()
        received = 1  # the warm-up record produced before the measured ones
        target = count + 1
        while received < target and time.monotonic() < deadline:
            # consume(n) returns when n messages are there or at the timeout: never ask
            # for more than remain, or the last call would wait out its whole timeout.
            messages = c.consume(num_messages=min(100_000, target - received), timeout=1.0)
            if messages and messages[-1].error() is not None:
                raise KafkaException(messages[-1].error())
            received += len(messages)
        elapsed = time.perf_counter() - started
        if received < target:
            raise RuntimeError(f"consumed {received} of {target} records")
        return (received - 1) / elapsed, (received - 1) * value_size / elapsed / 1e6
    finally:
        c.close()


@dataclass
class Latency:
    samples_ms: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.samples_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def produce_warm_up(p: Producer, topic: str) -> int:
    """Produce a warm-up record to partition 0 of ``topic``; its offset."""
    delivered: list[Any] = []
    p.produce(topic, value=b"warm-up", partition=0, on_delivery=lambda e, m: delivered.append(m))
    p.flush(30)
    if not delivered or delivered[0].error() is not None:
        raise RuntimeError(f"warm-up record not delivered: {delivered}")
    return int(delivered[0].offset())


def await_warm_up(c: Consumer, offset: int, timeout_s: float = 60.0) -> None:
    """Poll until the consumer delivers the warm-up record at ``offset``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = c.poll(0.1)
        if message is None or message.error() is not None:
            continue
        if message.offset() == offset:
            return
        raise RuntimeError(f"expected the warm-up record at {offset}, got {message.offset()}")
    raise RuntimeError(f"the consumer did not deliver the warm-up record in {timeout_s} s")


def latency_at_rate(bootstrap: str, topic: str, rate: int, seconds: float) -> Latency:
    """Produce ``rate`` records/s for ``seconds``; latency is produce() -> consumer delivery."""
    total = int(rate * seconds)
    result = Latency()
    c = consumer(bootstrap, **{"fetch.wait.max.ms": 500, "fetch.min.bytes": 1})
    p = producer(bootstrap, **{"linger.ms": 0, "batch.num.messages": 1000})
    # Warm up both sides before the clock runs, so no sample includes the start-up (the
    # topic's creation, the consumer's connections and first fetch): the consumer starts
    # at a warm-up record and must deliver it, then a second one produced while it tails
    # the log (a parked fetch woken by a produce, as in the measured run).
    offset = produce_warm_up(p, topic)
    c.assign([TopicPartition(topic, 0, offset)])
    await_warm_up(c, offset)
    await_warm_up(c, produce_warm_up(p, topic))
    done = threading.Event()

    def consume_loop() -> None:
        seen = 0
        deadline = time.monotonic() + seconds + 60
        while seen < total and time.monotonic() < deadline:
            # poll(), not consume(n, timeout): consume waits for n messages or the whole
            # timeout, which would add up to that timeout to every measurement.
            message = c.poll(0.1)
            if message is None or message.error() is not None:
                continue
            now = time.perf_counter()
            result.samples_ms.append((now - float(message.value())) * 1000)
            seen += 1
        done.set()

    reader = threading.Thread(target=consume_loop, name="latency-consumer")
    reader.start()
    # Records are written in millisecond ticks (rate/1000 per tick) and the loop sleeps
    # between ticks: a busy-wait would hold the GIL and delay the consumer thread, which
    # would then measure Python's thread switching rather than the broker.
    interval = 1.0 / rate
    started = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - started) / interval) + 1)
        while sent < due:
            p.produce(topic, value=repr(time.perf_counter()).encode(), partition=0)
            sent += 1
        p.poll(0)
        time.sleep(0.001)
    p.flush(30)
    done.wait(seconds + 60)
    reader.join(5)
    c.close()
    if len(result.samples_ms) < total:
        raise RuntimeError(f"latency run received {len(result.samples_ms)} of {total}")
    return result


# -- where the time goes ---------------------------------------------------------------------


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuShare:
    """CPU the broker and this (client) process used during one phase, against wall time.

    A side near ``wall`` seconds of CPU is the bottleneck of that phase; the client side
    includes librdkafka's threads.
    """

    wall_s: float = 0.0
    broker_s: float = 0.0
    client_s: float = 0.0

    def __str__(self) -> str:
        return (
            f"wall {self.wall_s:.2f} s, broker CPU {self.broker_s:.2f} s, "
            f"client CPU {self.client_s:.2f} s"
        )


@contextlib.contextmanager
def cpu_share(broker_pid: int) -> Iterator[CpuShare]:
    share = CpuShare()
    own = resource.getrusage(resource.RUSAGE_SELF)
    broker = process_cpu_s(broker_pid)
    started = time.perf_counter()
    yield share
    share.wall_s = time.perf_counter() - started
    share.broker_s = process_cpu_s(broker_pid) - broker
    after = resource.getrusage(resource.RUSAGE_SELF)
    share.client_s = (after.ru_utime + after.ru_stime) - (own.ru_utime + own.ru_stime)


# -- report --------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-records", type=int, default=2_000_000, help="100-byte records")
    parser.add_argument("--large-records", type=int, default=4_000, help="64 KiB records")
    parser.add_argument("--loopback-mib", type=int, default=4096, help="MiB for the raw test")
    parser.add_argument("--redis-records", type=int, default=1_000_000)
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis baseline")
    parser.add_argument("--latency-rate", type=int, default=10_000, help="records/s")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="odradek-bench-"))
    started = time.monotonic()
    try:
        print(f"machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}")
        loopback = loopback_mb_per_s(args.loopback_mib * MiB)
        print(f"raw loopback TCP (1 connection, 1 MiB sends):  {loopback:12,.0f} MB/s")
        redis = None if args.no_redis else redis_baseline(workdir, args.redis_records)
        if redis is None:
            print("redis: skipped (no redis-server/redis-benchmark or --no-redis)")
        else:
            print(f"redis XADD (1 conn, pipeline 64, 100 B):       {redis.xadd_per_s:12,.0f} rec/s")
            print(
                f"redis XRANGE (1 conn, pipeline 16, COUNT 100): "
                f"{redis.xrange_entries_per_s:12,.0f} rec/s"
            )

        shares: dict[str, CpuShare] = {}
        with odradek_broker(workdir) as (bootstrap, pid):
            n = args.small_records
            with cpu_share(pid) as shares["produce 100 B"]:
                produce_rps, _ = produce_rate(bootstrap, "bench-small", n, 100)
            with cpu_share(pid) as shares["consume 100 B"]:
                consume_rps, _ = consume_rate(bootstrap, "bench-small", n, 100)
            with cpu_share(pid) as shares["produce 64 KiB"]:
                large_produce_rps, large_produce_mbs = produce_rate(
                    bootstrap, "bench-large", args.large_records, 64 * 1024
                )
            with cpu_share(pid) as shares["consume 64 KiB"]:
                large_consume_rps, large_consume_mbs = consume_rate(
                    bootstrap, "bench-large", args.large_records, 64 * 1024
                )
            with cpu_share(pid) as shares["latency run"]:
                latency = latency_at_rate(
                    bootstrap, "bench-latency", args.latency_rate, args.latency_seconds
                )

        print()
        print(f"odradek produce, 100 B, acks=1, {n:,} records: {produce_rps:12,.0f} rec/s")
        print(f"   goal >= 1,000,000 rec/s: {verdict(produce_rps >= 1_000_000)}")
        if redis is not None:
            ratio = produce_rps / redis.xadd_per_s
            print(f"   vs redis XADD: {ratio:.2f}x (goal >= 2x): {verdict(ratio >= 2)}")
        print(f"odradek consume, 100 B:                         {consume_rps:12,.0f} rec/s")
        print(f"   goal >= 1,500,000 rec/s: {verdict(consume_rps >= 1_500_000)}")
        if redis is not None:
            ratio = consume_rps / redis.xrange_entries_per_s
            print(f"   vs redis XRANGE: {ratio:.2f}x (goal >= 1x): {verdict(ratio >= 1)}")
        for label, rps, mbs in (
            ("produce", large_produce_rps, large_produce_mbs),
            ("consume", large_consume_rps, large_consume_mbs),
        ):
            ratio = mbs / loopback
            print(
                f"odradek {label}, 64 KiB, {args.large_records:,} records: {mbs:10,.0f} MB/s "
                f"({rps:,.0f} rec/s) = {ratio:.2f}x loopback (goal >= 0.5): "
                f"{verdict(ratio >= 0.5)}"
            )
        p50, p99 = latency.percentile(0.50), latency.percentile(0.99)
        print(
            f"latency at {args.latency_rate:,} rec/s over {args.latency_seconds:g}s "
            f"({len(latency.samples_ms):,} records): p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
            f"max {max(latency.samples_ms):.2f} ms, mean {statistics.fmean(latency.samples_ms):.2f}"
            f" ms; goal p99 < 5 ms: {verdict(p99 < 5)}"
        )
        print("\nwhere the time went (a side using ~all the wall time is the bottleneck):")
        for phase, share in shares.items():
            print(f"   {phase:15s} {share}")
        print(f"\ntotal bench time {time.monotonic() - started:.0f} s")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
