"""``python -m odradek.demo``: run the activity pipeline against a running odradek broker."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from odradek.demo import DEFAULTS, DemoConfig


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
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.events_per_second <= 0 or args.partitions <= 0:
        parser.error("--duration, --events-per-second and --partitions must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
    )
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
