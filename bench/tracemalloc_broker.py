"""Run the broker under tracemalloc, dumping a snapshot every few seconds (leak hunting).

``python bench/tracemalloc_broker.py DIR SECONDS server --override ...`` runs
``python -m odradek server --override ...`` with tracemalloc on (15 frames, from SECONDS
after start) and writes ``DIR/snapshot-NNNN.tm`` every SECONDS.
``bench/soak.py --tracemalloc DIR`` starts the broker this way. Compare two snapshots
(largest growth first):

    python bench/tracemalloc_broker.py --diff DIR/snapshot-0010.tm DIR/snapshot-0100.tm
"""

from __future__ import annotations

import runpy
import sys
import threading
import tracemalloc
from pathlib import Path


def dump_every(directory: Path, seconds: float) -> None:
    # Tracing starts once the broker is up: tracing imports would slow startup past the
    # launcher's timeout, and what leaks is allocated while serving, not while starting.
    threading.Event().wait(seconds)
    tracemalloc.start(15)
    number = 0
    while True:
        tracemalloc.take_snapshot().dump(str(directory / f"snapshot-{number:04d}.tm"))
        number += 1
        threading.Event().wait(seconds)


def diff(old: str, new: str, top: int = 25) -> None:
    before = tracemalloc.Snapshot.load(old)
    after = tracemalloc.Snapshot.load(new)
    for stat in after.compare_to(before, "traceback")[:top]:
        print(f"{stat.size_diff / 1024:+10.1f} KiB {stat.count_diff:+8d} blocks")
        for line in stat.traceback.format()[-8:]:
            print(f"      {line}")


def main() -> None:
    if sys.argv[1] == "--diff":
        diff(sys.argv[2], sys.argv[3])
        return
    directory, seconds = Path(sys.argv[1]), float(sys.argv[2])
    directory.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=dump_every, args=(directory, seconds), daemon=True).start()
    sys.argv = ["odradek", *sys.argv[3:]]
    runpy.run_module("odradek", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
