"""What the demo is doing, while it does it: a live table on a terminal, plain lines otherwise.

A background thread polls, once a second, the generator's counter and each streaming query's
``lastProgress`` (Spark's ``StreamingQueryProgress``: batch id, input rows, the sink's
``numOutputRows``, the event-time watermark). Micro-batches are counted by batch id, so none is
missed or counted twice even when several complete between two polls (the gap is filled from
``recentProgress``). Spark's file sink reports no row count (``numOutputRows`` is -1), so rows
written to Parquet are read from the footers of the files the sink added during this run.

On a terminal the figures are a ``rich.live`` table redrawn in place; when stdout is a pipe or a
file, one ``progress:`` line is printed every few seconds and at each change of phase instead (and
a last one at the end).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

POLL_SECONDS = 1.0
LINE_SECONDS = 5.0
NO_WATERMARK = "1970-01-01T00:00:00.000Z"  # Spark's watermark before any event was seen


@dataclass
class QueryFigures:
    """One streaming query's totals over the batches of this run."""

    name: str
    batches: int = 0
    rows_read: int = 0
    rows_written: int | None = 0  # None: the sink does not report it
    watermark: str | None = None
    last_batch: int = -1
    _seen: set[tuple[str, int]] = field(default_factory=set, repr=False)

    def add(self, progress: Any) -> None:
        """Count one ``StreamingQueryProgress`` unless its batch was counted already."""
        key = (str(progress.runId), int(progress.batchId))
        if key in self._seen:
            return
        self._seen.add(key)
        self.last_batch = max(self.last_batch, key[1])
        self.batches += 1
        self.rows_read += max(int(progress.numInputRows), 0)
        written = int(progress.sink.numOutputRows)
        if written < 0:
            self.rows_written = None
        elif self.rows_written is not None:
            self.rows_written += written
        mark = (progress.eventTime or {}).get("watermark")
        if mark and mark != NO_WATERMARK:
            self.watermark = mark


class ParquetRows:
    """Rows in the Parquet files a file sink added to ``directory`` since this object was made."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.rows = 0
        self._counted: set[str] = set(self._files())

    def _files(self) -> Iterable[str]:
        if not self.directory.is_dir():
            return []
        return [p.name for p in self.directory.glob("part-*.parquet")]

    def refresh(self) -> int:
        import pyarrow.parquet as pq

        for name in self._files():
            if name in self._counted:
                continue
            try:
                rows = pq.read_metadata(self.directory / name).num_rows
            except (OSError, ValueError):  # still being written: count it next time
                continue
            self._counted.add(name)
            self.rows += rows
        return self.rows


@dataclass
class Snapshot:
    elapsed: float
    phase: str
    produced: int
    rate: int
    queries: list[QueryFigures]


class ProgressTracker:
    """Collects the figures; every method may be called from the polling thread."""

    def __init__(self, rate: int, produced: Callable[[], int]) -> None:
        self.rate = rate
        self._produced = produced
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self.phase = "starting"
        self._queries: list[tuple[Any, QueryFigures, ParquetRows | None]] = []

    def watch(self, query: Any, parquet_dir: Path | None = None) -> None:
        """Follow ``query``; ``parquet_dir`` when its sink is Spark's file sink."""
        rows = ParquetRows(parquet_dir) if parquet_dir is not None else None
        with self._lock:
            self._queries.append((query, QueryFigures(str(query.name)), rows))

    def poll(self) -> Snapshot:
        with self._lock:
            watched = list(self._queries)
        for query, figures, parquet in watched:
            last = query.lastProgress
            if last is not None:
                batch = int(last.batchId)
                if batch > figures.last_batch + 1 or figures.last_batch < 0:
                    # Several batches completed since the last poll (or since the start).
                    for progress in query.recentProgress:
                        figures.add(progress)
                figures.add(last)
            if parquet is not None:
                figures.rows_written = parquet.refresh()
        return Snapshot(
            elapsed=time.monotonic() - self._started,
            phase=self.phase,
            produced=self._produced(),
            rate=self.rate,
            queries=[figures for _, figures, _ in watched],
        )


def _short_watermark(mark: str | None) -> str:
    # "2026-11-24T01:04:00.000Z" -> "2026-11-24 01:04:00 UTC"
    return f"{mark[:10]} {mark[11:19]} UTC" if mark else "-"


def render_line(snap: Snapshot) -> str:
    """The plain form: one line, ``progress:`` first so that logs can be grepped."""
    parts = [
        f"progress: {snap.elapsed:.0f}s {snap.phase}",
        f"events produced {snap.produced}",
    ]
    for q in snap.queries:
        written = "?" if q.rows_written is None else q.rows_written
        parts.append(
            f"{q.name}: {q.batches} micro-batches, {q.rows_read} rows read, "
            f"{written} rows written, watermark {_short_watermark(q.watermark)}"
        )
    return " | ".join(parts)


def render_table(snap: Snapshot) -> Table:
    table = Table(
        title=f"odradek demo: {snap.phase} ({snap.elapsed:.0f}s)",
        caption=f"events produced: {snap.produced:,} (~{snap.rate}/s)",
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("query")
    for column in ("micro-batches", "rows read", "rows written"):
        table.add_column(column, justify="right")
    table.add_column("watermark")
    if not snap.queries:
        table.add_row("(starting)", "-", "-", "-", "-")
    for q in snap.queries:
        written = "?" if q.rows_written is None else f"{q.rows_written:,}"
        mark = _short_watermark(q.watermark)[11:] if q.watermark else "-"  # the time of day
        table.add_row(q.name, f"{q.batches:,}", f"{q.rows_read:,}", written, mark)
    return table


class ProgressDisplay:
    """Runs the polling thread; a context manager that leaves the screen tidy on any exit."""

    def __init__(self, tracker: ProgressTracker) -> None:
        self.tracker = tracker
        # A stream of its own on a copy of fd 1: while PySpark launches the JVM, fd 1 points
        # at the log file (see odradek.demo.session), and the display must go on meanwhile.
        self._out = open(os.dup(sys.stdout.fileno()), "w", buffering=1)  # noqa: SIM115
        self.console = Console(file=self._out)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="odradek-demo-progress", daemon=True
        )
        self._live: Live | None = None
        self._last_line = 0.0
        self._last_phase = ""

    def __enter__(self) -> ProgressDisplay:
        if self.console.is_terminal:
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(final=exc[0] is None)

    def close(self, final: bool = True) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=3.0)
        if final:
            self._show(force=True)
        if self._live is not None:
            self._live.stop()
        self._out.close()

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._show()

    def _show(self, force: bool = False) -> None:
        # Never raise from here: the polling thread races with Spark stopping under it and
        # with close(), and a thread's exception would print a traceback.
        try:
            snap = self.tracker.poll()
            if self._stop.is_set() and not force:
                return
            if self._live is not None:
                self._live.update(render_table(snap), refresh=True)
            elif (
                force
                or snap.phase != self._last_phase
                or time.monotonic() - self._last_line >= LINE_SECONDS
            ):
                self._last_line, self._last_phase = time.monotonic(), snap.phase
                print(render_line(snap), file=self._out, flush=True)
        except Exception:
            return
