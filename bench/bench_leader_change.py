"""What a leader change costs the thread that applies it: N partitions become leader in
a new epoch and take their first produce, as a broker does on the event loop when a peer
dies (LeaderAndIsr for every partition it led, then the clients' retried produces).

Run from the repository root: ``.venv/bin/python bench/bench_leader_change.py`` (``--help``
for the knobs). In the same run, over the same N non-empty logs, alternating rounds:

- baseline ("fsync per change", the behaviour before the leader-epoch checkpoint was
  deferred): the become-leader entry written with fsync of the file and the directory,
  as ``assign(epoch, leo, sync=True)`` did, then the first append of the new epoch;
- now: the same with ``sync=False`` (what the LeaderAndIsr handler and the append paths
  do), then the flush that syncs the checkpoints, timed separately as it runs on the
  flush thread, off the event loop.

Prints the loop-side milliseconds for N partitions, per partition, and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.storage.conftest import make_batch  # noqa: E402

from odradek.storage.config import LogConfig  # noqa: E402
from odradek.storage.log import Log  # noqa: E402


def make_logs(root: Path, count: int) -> list[Log]:
    logs = []
    for i in range(count):
        log = Log.open(root / f"t-{i}", LogConfig())
        log.append_as_leader(make_batch([b"x" * 100] * 10), leader_epoch=0)
        log.flush()
        logs.append(log)
    return logs


def leader_change(logs: list[Log], epoch: int, *, sync: bool) -> float:
    """Seconds the applying thread spends making every log leader in ``epoch`` and
    appending its first batch of it."""
    batch = make_batch([b"y" * 100] * 10)
    started = time.perf_counter()
    for log in logs:
        log.leader_epoch_cache.assign(epoch, log.log_end_offset, sync=sync)
        log.append_as_leader(bytearray(batch), leader_epoch=epoch)
    return time.perf_counter() - started


def flush_all(logs: list[Log]) -> float:
    started = time.perf_counter()
    for log in logs:
        log.flush()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="leader changes of each kind")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the logs go (default: a temporary directory; use a "
                             "directory on the disk a broker would use)")  # fmt: skip
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-leader-change-", dir=args.dir))
    try:
        logs = make_logs(root, args.partitions)
        flush_all(logs)
        before: list[float] = []
        after: list[float] = []
        flushes: list[float] = []
        epoch = 0
        for _ in range(args.rounds):
            epoch += 1
            before.append(leader_change(logs, epoch, sync=True))
            flush_all(logs)  # the data of the round, so both kinds start alike
            epoch += 1
            after.append(leader_change(logs, epoch, sync=False))
            flushes.append(flush_all(logs))  # on the flush thread in the broker
        n = args.partitions
        b, a, f = (statistics.median(x) for x in (before, after, flushes))
        print(f"leader change of {n} partitions (become-leader entry + first append), "
              f"median of {args.rounds} rounds, on {root}")  # fmt: skip
        print(f"  baseline, fsync per change:   {b * 1000:8.1f} ms on the loop "
              f"({b / n * 1e6:7.0f} us/partition)")  # fmt: skip
        print(f"  now, deferred to the flush:   {a * 1000:8.1f} ms on the loop "
              f"({a / n * 1e6:7.0f} us/partition)")  # fmt: skip
        print(f"  ratio now / baseline:         {a / b:8.3f}")
        print(f"  the flush that syncs them:    {f * 1000:8.1f} ms on the flush thread "
              f"(segment + checkpoint fsyncs)")  # fmt: skip
        for log in logs:
            log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
