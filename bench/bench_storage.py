"""Storage benchmarks: append throughput, read-by-offset latency, open time after a clean
shutdown. Every figure is printed next to the baseline it is compared with, both measured
in the same run (this machine is shared and noisy; absolute numbers mean little).

    .venv/bin/python bench/bench_storage.py            # 1 GiB vs 10 GiB logs (a few minutes)
    .venv/bin/python bench/bench_storage.py --small    # 64 MiB vs 640 MiB, seconds

Goals: append >= 0.8 x raw file append of the same bytes; read latency and open time on
the large log <= 1.2 x the small one. Temporary files go to --dir (default: a temporary
directory) and are removed at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from crc32c import crc32c

from odradek.records.batch import Record, build_batch
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.producer_state import ProducerStateManager

MIB = 1 << 20


def one_mib_batch() -> bytearray:
    """A ~1 MiB uncompressed batch of 1024 records (what a producer sends)."""
    value = os.urandom(1000)
    records = [Record(value=value, key=b"key-%d" % i) for i in range(1024)]
    return build_batch(records)


def bench_append(directory: Path, total_mib: int, batch: bytearray, rounds: int) -> None:
    """Alternate rounds of raw appends and Log appends of the same bytes.

    Each round ends with an fsync outside the timing, so every round starts without a
    backlog of dirty pages that the kernel would make the next writer pay for."""
    raw_path = directory / "raw.bin"
    log = Log.open(directory / "append-0", LogConfig(retention_ms=-1))
    raw_fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    data = bytes(batch)
    per_round = max(total_mib // rounds, 1)
    raw_rates: list[float] = []
    log_rates: list[float] = []
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(per_round):
                view = memoryview(data)
                while view:
                    view = view[os.write(raw_fd, view) :]
            raw_rates.append(per_round * len(data) / (time.perf_counter() - start))
            os.fsync(raw_fd)
            start = time.perf_counter()
            for _ in range(per_round):
                log.append_as_leader(batch)  # a bytearray: offsets are rewritten in place
            log_rates.append(per_round * len(data) / (time.perf_counter() - start))
            log.flush()
    finally:
        os.close(raw_fd)
        log.close()
        raw_path.unlink()
        shutil.rmtree(directory / "append-0")
    # The CRC32C check every produced batch must pass is the floor of the overhead.
    start = time.perf_counter()
    for _ in range(64):
        crc32c(memoryview(batch)[21:])
    crc_seconds = (time.perf_counter() - start) / 64
    raw, ours = statistics.median(raw_rates), statistics.median(log_rates)
    raw_seconds = len(data) / raw
    bound = raw_seconds / (raw_seconds + crc_seconds)
    print(f"CRC32C of one batch {crc_seconds * 1e6:.0f} us vs its raw write "
          f"{raw_seconds * 1e6:.0f} us: ratio bound with validation {bound:.2f}")  # fmt: skip
    ratio = statistics.median(o / r for o, r in zip(log_rates, raw_rates, strict=True))
    print(f"append 1 MiB batches: raw file {raw / MIB:8.0f} MiB/s, Log {ours / MIB:8.0f} MiB/s, "
          f"ratio {ratio:.2f} (median of per-round ratios; goal >= 0.8; {rounds} rounds of "
          f"{per_round} MiB)")  # fmt: skip


def build_log(
    directory: Path, size_mib: int, batch: bytearray, config: LogConfig
) -> tuple[int, list[tuple[int, int]]]:
    """The log end offset and the segment sizes a clean shutdown records."""
    log = Log.open(directory, config)
    for _ in range(size_mib):
        log.append_as_leader(batch)
    log.flush()
    leo = log.log_end_offset
    log.close()
    return leo, log.segment_sizes()


def read_latencies(log: Log, samples: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    leo = log.log_end_offset
    offsets = [rng.randrange(leo) for _ in range(samples)]
    for offset in offsets[:50]:  # warm-up: first touches load each segment's index
        log.read(offset, MIB)
    out = []
    for offset in offsets:
        start = time.perf_counter()
        info = log.read(offset, MIB)
        out.append(time.perf_counter() - start)
        assert info.size > 0
    return out


def open_times(
    directory: Path, config: LogConfig, leo: int, sizes: list[tuple[int, int]], repeats: int
) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        log = Log.open(directory, config, recovery_point=leo, clean_shutdown=True,
                       segment_sizes=sizes)  # fmt: skip
        out.append(time.perf_counter() - start)
        assert log.log_end_offset == leo
        log.close()
    return out


def producer_state_load_times(directory: Path, leo: int, repeats: int) -> list[float]:
    """The producer-state part of an open (it lists the directory for snapshots)."""
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        ProducerStateManager(directory).load(0, leo)
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="64 MiB vs 640 MiB, quick")
    parser.add_argument("--small-mib", type=int, help="size of the small log (MiB)")
    parser.add_argument("--large-mib", type=int, help="size of the large log (MiB)")
    parser.add_argument("--append-mib", type=int, help="MiB appended in the append bench")
    parser.add_argument("--segment-mib", type=int, help="segment.bytes (MiB)")
    parser.add_argument("--reads", type=int, default=2000, help="read samples per log")
    parser.add_argument("--opens", type=int, default=30, help="clean opens per log")
    parser.add_argument("--dir", type=Path, help="where to put the temporary logs")
    args = parser.parse_args()
    small = args.small_mib or (64 if args.small else 1024)
    large = args.large_mib or (640 if args.small else 10240)
    append_mib = args.append_mib or (256 if args.small else 2048)
    segment_mib = args.segment_mib or (64 if args.small else 1024)
    config = LogConfig(segment_bytes=segment_mib * MIB, retention_ms=-1)
    root = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir))
    try:
        batch = one_mib_batch()
        print(f"batch: {len(batch)} bytes, 1024 records; logs in {root}")
        bench_append(root, append_mib, batch, rounds=16)

        results = {}
        for name, size in (("small", small), ("large", large)):
            directory = root / f"{name}-0"
            start = time.perf_counter()
            leo, sizes = build_log(directory, size, batch, config)
            built = time.perf_counter() - start
            log = Log.open(directory, config, recovery_point=leo, clean_shutdown=True,
                           segment_sizes=sizes)  # fmt: skip
            reads = read_latencies(log, args.reads, seed=1)
            segments = len(log.segments)
            log.close()
            opens = open_times(directory, config, leo, sizes, args.opens)
            psm = statistics.median(producer_state_load_times(directory, leo, args.opens))
            results[name] = (size, segments, statistics.median(reads), statistics.median(opens))
            print(f"{name} log: {size} MiB in {segments} segments (built at "
                  f"{size / built:.0f} MiB/s); read p50 {results[name][2] * 1e6:.1f} us, "
                  f"p99 {sorted(reads)[int(len(reads) * 0.99)] * 1e6:.1f} us; clean open p50 "
                  f"{results[name][3] * 1e3:.3f} ms (producer-state load alone "
                  f"{psm * 1e3:.3f} ms)")  # fmt: skip
            shutil.rmtree(directory)
        (s_size, _, s_read, s_open), (l_size, _, l_read, l_open) = (
            results["small"],
            results["large"],
        )
        print(f"read-by-offset latency {l_size} MiB vs {s_size} MiB: ratio {l_read / s_read:.2f} "
              f"(goal <= 1.2)")  # fmt: skip
        print(f"open after clean shutdown {l_size} MiB vs {s_size} MiB: ratio "
              f"{l_open / s_open:.2f} (goal <= 1.2)")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
