"""Settings of the demo pipeline (kept free of PySpark imports so ``--help`` is instant)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EVENTS_TOPIC = "activity-events"
RESULTS_TOPIC = "page-minute-counts"
# Counts are per event-time minute; a window closes once the watermark (the largest event
# time seen minus this delay) passes its end.
WINDOW_MS = 60_000
WATERMARK_MS = 20_000


@dataclass(frozen=True)
class DemoConfig:
    bootstrap_server: str = "127.0.0.1:9092"
    master: str = "local[*]"
    duration: float = 75.0
    events_per_second: int = 200
    warehouse: Path = Path("warehouse")
    checkpoint: Path = Path("checkpoints")
    events_topic: str = EVENTS_TOPIC
    results_topic: str = RESULTS_TOPIC
    partitions: int = 4
    trigger_seconds: float = 5.0
    seed: int | None = None
    log_file: Path = Path("odradek-demo.log")  # Spark's JVM log


DEFAULTS = DemoConfig()
