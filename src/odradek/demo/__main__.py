"""``python -m odradek.demo``: run the activity pipeline against a running odradek broker."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from types import FrameType

from odradek.demo import DEFAULTS, DemoConfig

# How long stopping may take after Ctrl-C before the process just exits (Spark's checkpoint
# survives that: a batch that did not commit is run again on the next start).
STOP_SECONDS = 5.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m odradek.demo",
        description="Generate page views and clicks into odradek, count them per page and "
        "minute with Spark Structured Streaming, write Parquet and a results topic.",
    )
    parser.add_argument("--bootstrap-server", default=DEFAULTS.bootstrap_server)
    parser.add_argument("--master", default=DEFAULTS.master, help="Spark master URL")
    parser.add_argument(
        "--duration", type=float, default=DEFAULTS.duration, help="seconds of generated traffic"
    )
    parser.add_argument("--events-per-second", type=int, default=DEFAULTS.events_per_second)
    parser.add_argument("--warehouse", type=Path, default=DEFAULTS.warehouse)
    parser.add_argument("--checkpoint", type=Path, default=DEFAULTS.checkpoint)
    parser.add_argument("--partitions", type=int, default=DEFAULTS.partitions,
                        help="partitions of the events topic when it is created")  # fmt: skip
    parser.add_argument("--trigger-seconds", type=float, default=DEFAULTS.trigger_seconds)
    parser.add_argument("--seed", type=int, default=None, help="seed of the event generator")
    parser.add_argument("--log-file", type=Path, default=DEFAULTS.log_file,
                        help="where Spark's JVM writes its log")  # fmt: skip
    # `odradek demo` says itself that it was interrupted (one line for the whole demo).
    parser.add_argument("--quiet-interrupt", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.events_per_second <= 0 or args.partitions <= 0:
        parser.error("--duration, --events-per-second and --partitions must be positive")
    return args


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """First Ctrl-C or SIGTERM: stop. Later ones must not cut the clean-up (the ``finally``
    blocks that stop the generator and the queries) short with a traceback, and a clean-up that
    hangs (a query waiting on a stuck task) must not keep the process alive."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_soon(130, STOP_SECONDS)
    raise KeyboardInterrupt


def _children() -> list[int]:
    """Our direct child processes (Spark's JVM is one: spark-submit execs java)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # pid (comm) state ppid ...; comm may hold spaces and parentheses
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid():
            found.append(int(stat.parent.name))
    return found


def _stop_jvm() -> None:
    """SIGTERM to the JVM: it runs its shutdown hooks (temporary files) and exits. Without it
    the JVM would exit only once it notices that our end of its stdin pipe closed, which it
    does not check while it is still starting."""
    for pid in _children():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def _exit_now(code: int) -> None:
    _stop_jvm()
    os._exit(code)


def _exit_soon(code: int, seconds: float) -> None:
    """Exit with ``code`` after ``seconds`` whatever the main thread is stuck in."""
    timer = threading.Timer(seconds, _exit_now, (code,))
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (what `odradek demo` and most supervisors send) stops the demo like Ctrl-C.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _main(args)
    except KeyboardInterrupt:
        _stop_jvm()
        if not args.quiet_interrupt:
            print("interrupted: the demo pipeline stopped", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:
        # One line here (a Java error's first line can run long, the rest is a stack trace);
        # the whole story goes to the log, next to Spark's.
        log_file = args.log_file.resolve()
        with contextlib.suppress(OSError), open(log_file, "a") as log:
            traceback.print_exc(file=log)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        print(f"error: {first} (details in {log_file})", file=sys.stderr, flush=True)
        _stop_jvm()
        return 1


def _main(args: argparse.Namespace) -> int:
    from odradek.demo.pipeline import run

    cfg = DemoConfig(
        bootstrap_server=args.bootstrap_server,
        master=args.master,
        duration=args.duration,
        events_per_second=args.events_per_second,
        warehouse=args.warehouse.resolve(),
        checkpoint=args.checkpoint.resolve(),
        partitions=args.partitions,
        trigger_seconds=args.trigger_seconds,
        seed=args.seed,
        log_file=args.log_file.resolve(),
    )
    return run(cfg)


if __name__ == "__main__":
    code = main()
    # The finally blocks of run() have stopped the queries; the JVM exits with this process.
    sys.exit(code)
