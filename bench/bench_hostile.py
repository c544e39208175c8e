"""A normal client's round trips while hostile peers load the broker.

Run from the repository root: ``.venv/bin/python bench/bench_hostile.py`` (``--help`` for
the knobs). It starts its own broker subprocess and measures, with one well-behaved client
sending one ApiVersions request at a time (``tests.helpers.hostile.Pinger``):

1. **200 hostile connections.** Round-trip p50/p99 alone, then while a separate process
   keeps 200 connections busy (a third slow-loris partial frames, a third huge declared
   frames, a third floods of pipelined tiny requests); the ratio of each to the baseline.
2. **One huge request.** Round trips while one Produce listing ``--partitions``
   partitions is decoded, handled and answered on another connection: p50/p99/max, how
   long the huge request took, and the broker's peak RSS growth meanwhile.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.broker import BrokerProcess  # noqa: E402
from tests.helpers.hostile import (  # noqa: E402
    Pinger,
    percentile,
    produce_frame,
    read_response,
    rss_mb,
)


def _ms(values: list[float], fraction: float) -> float:
    return percentile(values, fraction) * 1e3


def hostile_connections(broker: BrokerProcess, connections: int, seconds: float) -> None:
    pinger = Pinger(broker.port)
    pinger.sample(0.3)
    alone = pinger.sample(seconds)
    load = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.hostile", str(broker.port), str(connections),
         str(seconds + 1)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )  # fmt: skip
    assert load.stdout is not None
    load.stdout.readline()  # "ready"
    loaded = pinger.sample(seconds)
    floods = load.communicate(timeout=60)[0].split()[-1]
    pinger.close()
    print(f"{connections} hostile connections ({floods} flood requests answered meanwhile)")
    print(f"  alone:  p50 {_ms(alone, 0.5):7.2f} ms  p99 {_ms(alone, 0.99):7.2f} ms")
    print(f"  loaded: p50 {_ms(loaded, 0.5):7.2f} ms  p99 {_ms(loaded, 0.99):7.2f} ms")
    print(
        f"  ratio:  p50 x{_ms(loaded, 0.5) / _ms(alone, 0.5):.1f}  "
        f"p99 x{_ms(loaded, 0.99) / _ms(alone, 0.99):.1f}"
    )


def huge_request(broker: BrokerProcess, partitions: int) -> None:
    assert broker.proc is not None
    pinger = Pinger(broker.port)
    alone = pinger.sample(1.0)
    frame = produce_frame(partitions)
    before = rss_mb(broker.proc.pid)
    took: list[float] = []

    def hostile() -> None:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=300) as sock:
            started = time.perf_counter()
            sock.sendall(frame)
            read_response(sock)
            took.append(time.perf_counter() - started)

    thread = threading.Thread(target=hostile)
    thread.start()
    times, peak = [], before
    while thread.is_alive():
        times.append(pinger.round_trip())
        peak = max(peak, rss_mb(broker.proc.pid))
        time.sleep(0.01)
    thread.join()
    pinger.close()
    print(f"one Produce listing {partitions} partitions ({len(frame) / 1e6:.1f} MB), "
          f"answered in {took[0]:.1f} s")  # fmt: skip
    print(f"  alone:      p50 {_ms(alone, 0.5):7.2f} ms  p99 {_ms(alone, 0.99):7.2f} ms")
    print(
        f"  meanwhile:  p50 {_ms(times, 0.5):7.2f} ms  p99 {_ms(times, 0.99):7.2f} ms  "
        f"max {max(times) * 1e3:7.0f} ms  ({len(times)} round trips)"
    )
    print(f"  broker RSS: {before:.0f} MiB -> peak {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--partitions", type=int, default=500_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            hostile_connections(broker, args.connections, args.seconds)
            if args.partitions:
                huge_request(broker, args.partitions)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
