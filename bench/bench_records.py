"""Benchmark the record layer; every ratio compares figures measured in this same run.

1. Header fast path: ``parse_header`` + ``check_crc`` of a 1 MiB batch against a bare
   ``crc32c.crc32c`` over the same bytes (the goal is a ratio >= 0.9: the Python
   around the checksum must cost almost nothing).
2. Encode (``build_batch``) and decode (``decode_batch``) throughput in records/s for
   100-byte records, per codec, with aiokafka's Cython batch builder / reader as a
   reference point for the uncompressed case.
3. Produce validation: ``Log.append_as_leader`` of 1000-record batches per codec, with
   the per-record walk (:mod:`odradek.records.validation`) and without it (the header
   checks and CRC only, as before validation walked records), in records/s and as a
   ratio; for uncompressed batches also with the pure-Python walk (the fallback when
   the C extension is not built).

Usage: ``.venv/bin/python bench/bench_records.py [--records N] [--seconds S] [--only validation]``.
Each figure is the best of several timed rounds, to damp the noise of a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from crc32c import crc32c

from odradek.records import Compression, Record, build_batch, decode_batch
from odradek.records.header import check_crc, parse_header

NOW = 1_700_000_000_000
VALUE_SIZE = 100


def best_rate(work: Callable[[], object], units: int, seconds: float, rounds: int = 5) -> float:
    """Units per second of the fastest round; each round runs ~seconds/rounds."""
    work()  # warm up caches and lazy imports
    started = time.perf_counter()
    work()
    once = max(time.perf_counter() - started, 1e-9)
    per_round = max(1, int(seconds / rounds / once))
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(per_round):
            work()
        best = min(best, (time.perf_counter() - started) / per_round)
    return units / best


def sample_values(count: int, seed: int = 7) -> list[bytes]:
    """JSON-ish 100-byte values: realistic, moderately compressible."""
    rng = random.Random(seed)
    names = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
    out = []
    for i in range(count):
        text = (
            f'{{"id":{i},"user":"{rng.choice(names)}","amount":{rng.randint(1, 99999)},'
            f'"currency":"EUR","ok":{str(rng.random() < 0.9).lower()},"note":"'
        )
        text += "".join(rng.choice("abcdefghij") for _ in range(VALUE_SIZE - len(text) - 2))
        out.append((text + '"}').encode())
    return out


def bench_header(seconds: float) -> None:
    values = sample_values(1)
    records: list[Record] = []
    batch = b""
    while len(batch) < 1024 * 1024:  # grow to just over 1 MiB
        records += [
            Record(value=values[0], key=b"key-%06d" % (len(records) + i), timestamp_ms=NOW)
            for i in range(1000 if len(batch) < 900_000 else 20)
        ]
        batch = bytes(build_batch(records, now_ms=NOW))
    mib = len(batch) / (1024 * 1024)

    def raw_crc() -> None:
        crc32c(batch)

    def fast_path() -> None:
        check_crc(batch, 0, parse_header(batch, 0))

    raw = best_rate(raw_crc, 1, seconds)
    ours = best_rate(fast_path, 1, seconds)
    print(f"header fast path on a {mib:.2f} MiB batch ({len(records)} records)")
    print(f"  crc32c alone           {raw * mib / 1024:8.2f} GiB/s")
    print(f"  parse_header+check_crc {ours * mib / 1024:8.2f} GiB/s")
    print(f"  ratio                  {ours / raw:8.3f}   (goal >= 0.9)")


def bench_codecs(count: int, seconds: float) -> None:
    values = sample_values(count)
    records = [
        Record(value=value, key=b"key-%d" % i, timestamp_ms=NOW + i)
        for i, value in enumerate(values)
    ]
    print(f"\nbatches of {count} records, {VALUE_SIZE}-byte values, 6-9 byte keys")
    print(f"  {'codec':<8}{'encode rec/s':>14}{'decode rec/s':>14}{'batch bytes':>13}{'ratio':>8}")
    plain_size = len(build_batch(records, now_ms=NOW))
    for codec in Compression:
        raw = bytes(build_batch(records, compression=codec, now_ms=NOW))
        encode = best_rate(
            lambda c=codec: build_batch(records, compression=c, now_ms=NOW), count, seconds
        )
        decode = best_rate(lambda r=raw: decode_batch(r), count, seconds)
        print(
            f"  {codec.kafka_name:<8}{encode:>14,.0f}{decode:>14,.0f}{len(raw):>13,}"
            f"{plain_size / len(raw):>8.2f}"
        )
    try:
        from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    except ImportError:
        return

    def their_encode() -> bytearray:
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=0, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
        )  # fmt: skip
        for i, record in enumerate(records):
            builder.append(i, timestamp=record.timestamp_ms, key=record.key, value=record.value,
                           headers=[])  # fmt: skip
        return builder.build()

    raw = bytes(their_encode())

    def their_decode() -> list[object]:
        return list(DefaultRecordBatch(raw))

    ours_encode = best_rate(lambda: build_batch(records, now_ms=NOW), count, seconds)
    ours_decode = best_rate(lambda: decode_batch(raw), count, seconds)
    theirs_encode = best_rate(their_encode, count, seconds)
    theirs_decode = best_rate(their_decode, count, seconds)
    print("\nreference, uncompressed: aiokafka's Cython builder / reader, same records")
    print(f"  encode  ours {ours_encode:>12,.0f} rec/s  aiokafka {theirs_encode:>12,.0f} rec/s"
          f"  ratio {ours_encode / theirs_encode:.2f}")  # fmt: skip
    print(f"  decode  ours {ours_decode:>12,.0f} rec/s  aiokafka {theirs_decode:>12,.0f} rec/s"
          f"  ratio {ours_decode / theirs_decode:.2f}")  # fmt: skip


@contextlib.contextmanager
def _walk_mode(mode: str) -> Iterator[None]:
    """``c``/``python``: validate with that walk; ``off``: no record walk at all."""
    from odradek.records import validation
    from odradek.storage import log_append

    saved = (validation._c_walk, log_append.check_batch_records)
    try:
        if mode == "python":
            validation._c_walk = None
        elif mode == "off":
            log_append.check_batch_records = lambda buf, pos, header, config, now_ms: header
        yield
    finally:
        validation._c_walk, log_append.check_batch_records = saved


def _time_once(work: Callable[[], object]) -> float:
    work()
    started = time.perf_counter()
    work()
    return max(time.perf_counter() - started, 1e-9)


def bench_validation(count: int, seconds: float) -> None:
    from odradek.records import validation
    from odradek.storage.config import LogConfig
    from odradek.storage.log import Log

    values = sample_values(count)
    records = [
        Record(value=value, key=b"key-%d" % i, timestamp_ms=NOW + i)
        for i, value in enumerate(values)
    ]
    modes = ["off", "c", "python"] if validation._c_walk is not None else ["off", "python"]
    print(f"\nproduce validation: Log.append_as_leader of {count}-record batches, rec/s")
    print(f"  {'codec':<8}" + "".join(f"{'walk ' + m:>14}" for m in modes)
          + "".join(f"{'ratio ' + m:>14}" for m in modes[1:]))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "bench-0", LogConfig(), clock=time.time)
        appended = [0]

        def append(batch: bytearray) -> None:
            log.append_as_leader(batch)  # rewrites offsets in place: the same bytes serve again
            appended[0] += 1
            if appended[0] % 256 == 0:  # keep the log small; both arms pay this alike
                log.truncate_fully_and_start_at(0)

        for codec in Compression:
            batch = build_batch(records, compression=codec, now_ms=NOW)
            wanted = [m for m in modes if m != "python" or codec is Compression.NONE]
            # The arms take turns in short rounds and each keeps its best round: on a
            # shared machine, load drifts over seconds and would favour whichever arm
            # ran in a quiet moment.
            rates = {m: 0.0 for m in wanted}
            calls = max(1, int(seconds / 40 / _time_once(lambda b=batch: append(b))))
            for _ in range(20):
                for mode in wanted:
                    done = calls if mode != "python" else max(1, calls // 8)  # ~8x slower
                    with _walk_mode(mode):
                        started = time.perf_counter()
                        for _ in range(done):
                            append(batch)
                        rate = done * count / (time.perf_counter() - started)
                    rates[mode] = max(rates[mode], rate)
            row = "".join(f"{rates[m]:>14,.0f}" if m in rates else f"{'-':>14}" for m in modes)
            row += "".join(
                f"{rates[m] / rates['off']:>14.2f}" if m in rates else f"{'-':>14}"
                for m in modes[1:]
            )
            print(f"  {codec.kafka_name:<8}{row}")
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1000, help="records per batch")
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="time budget per measured figure"
    )
    parser.add_argument("--only", choices=["validation"], help="run one section only")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.only is None:
        bench_header(args.seconds)
        bench_codecs(args.records, args.seconds)
    bench_validation(args.records, args.seconds)
    print(f"\ntotal {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
