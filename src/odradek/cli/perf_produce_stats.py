"""The statistics of ``odradek perf produce``: Kafka's ProducerPerformance.Stats lines.

Totals, a reporting window and a sample of latencies (every n-th beyond 500,000 records),
formatted exactly as Kafka's tool prints them (Java's ``NaN`` for an average over nothing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from odradek.cli.perf import java_div, java_fixed

MAX_LATENCY_SAMPLES = 500_000  # as Kafka: a sample of every n-th latency beyond this


@dataclass
class Stats:
    """Kafka's ProducerPerformance.Stats: totals, a reporting window, sampled latencies."""

    num_records: int
    reporting_interval_ms: int
    steady_state: bool = False
    print_windows: bool = True
    emit: Any = None  # where lines go: a callable taking one line
    start: float = field(default_factory=time.monotonic)
    count: int = 0
    bytes: int = 0
    total_latency: int = 0
    max_latency: int = 0
    iteration: int = 0
    latencies: list[int] = field(default_factory=list)
    window_start: float = 0.0
    window_count: int = 0
    window_bytes: int = 0
    window_total_latency: int = 0
    window_max_latency: int = 0

    def __post_init__(self) -> None:
        self.window_start = self.start
        self.sampling = max(1, self.num_records // min(self.num_records, MAX_LATENCY_SAMPLES))

    def record(self, latency_ms: int, size: int, now: float) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        if (now - self.window_start) * 1000 >= self.reporting_interval_ms:
            if self.steady_state and self.count == self.window_count:
                self._print("In steady state.")
            if self.print_windows:
                self._print(self.window_line(now))
            self.window_start = now
            self.window_count = self.window_bytes = 0
            self.window_total_latency = self.window_max_latency = 0
        self.iteration += 1

    def _print(self, line: str) -> None:
        if self.emit is not None:
            self.emit(line)

    def window_line(self, now: float) -> str:
        elapsed_ms = (now - self.window_start) * 1000
        rate = java_div(1000.0 * self.window_count, elapsed_ms)
        mb_rate = java_div(1000.0 * self.window_bytes, elapsed_ms) / (1024 * 1024)
        avg = java_div(self.window_total_latency, self.window_count)
        return (
            f"{self.window_count} records sent, {java_fixed(rate, 1)} records/sec "
            f"({java_fixed(mb_rate, 2)} MB/sec), {java_fixed(avg, 1)} ms avg latency, "
            f"{float(self.window_max_latency):.1f} ms max latency."
        )

    def total_line(self, now: float) -> str:
        elapsed_ms = (now - self.start) * 1000
        rate = java_div(1000.0 * self.count, elapsed_ms)
        mb_rate = java_div(1000.0 * self.bytes, elapsed_ms) / (1024 * 1024)
        avg = java_div(self.total_latency, self.count)
        p50, p95, p99, p999 = percentiles(self.latencies, 0.5, 0.95, 0.99, 0.999)
        return (
            f"{self.count}{' steady state' if self.steady_state else ''} records sent, "
            f"{java_fixed(rate, 6)} records/sec ({java_fixed(mb_rate, 2)} MB/sec), "
            f"{java_fixed(avg, 2)} ms avg latency, {float(self.max_latency):.2f} ms max latency, "
            f"{p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th."
        )


def percentiles(latencies: list[int], *points: float) -> list[int]:
    """Kafka's way: sort the sample, take the element at ``int(p * size)``."""
    if not latencies:
        return [0 for _ in points]
    ordered = sorted(latencies)
    return [ordered[min(int(p * len(ordered)), len(ordered) - 1)] for p in points]


def print_metric_lines(out: Any, stats: Stats, failures: int, client_id: str, now: float) -> None:
    """The tool's own measurements in Kafka's ``--print-metrics`` layout (ToolsUtils)."""
    elapsed_s = max(now - stats.start, 1e-9)
    tags = f"{{client-id={client_id}}}"
    metrics = {
        f"producer-metrics:record-send-total:{tags}": float(stats.count),
        f"producer-metrics:record-send-rate:{tags}": stats.count / elapsed_s,
        f"producer-metrics:record-error-total:{tags}": float(failures),
        f"producer-metrics:record-size-avg:{tags}": java_div(stats.bytes, stats.count),
    }
    width = max(len(name) for name in metrics)
    out.write(f"\n{'Metric Name'.ljust(width)} Value\n")
    for name in sorted(metrics):
        out.write(f"{name.ljust(width)} : {metrics[name]:.3f}\n")
