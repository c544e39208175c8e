"""The demo: its events, its windowed counts, one short run of `odradek demo` with its progress
lines, and Ctrl-C at several moments (each must end everything within seconds, quietly)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import IO

import pytest

from odradek.demo.events import (
    EVENT_TYPES,
    PAGES,
    ActivityGenerator,
    closing_time,
    event_time,
    heartbeat,
)
from tests.helpers.broker import free_port


def test_events_are_json_page_views_and_clicks() -> None:
    generator = ActivityGenerator(seed=1)
    events = [generator.event(1_700_000_000_000) for _ in range(500)]
    for event in events:
        body = json.loads(event.value)
        assert body["type"] in EVENT_TYPES and body["page"] in PAGES
        assert event.key == body["user_id"].encode()
        assert ("element" in body) == (body["type"] == "click")
        assert 1_700_000_000_000 - 8_000 < body["ts"] <= 1_700_000_000_000
    assert {e.type for e in events} == set(EVENT_TYPES)
    assert any(e.ts < 1_700_000_000_000 for e in events)  # some arrive late
    again = ActivityGenerator(seed=1)
    assert [again.event(1_700_000_000_000).value for _ in range(500)] == [e.value for e in events]


def test_heartbeat_closes_the_last_window() -> None:
    assert event_time(heartbeat(123)) == 123
    assert event_time(b"not json") is None and event_time(None) is None
    # An event at 10:00:59.999 is in the 10:00 window, which closes at 10:01:00 + 20 s.
    minute = 1_700_000_040_000 - 1_700_000_040_000 % 60_000
    assert closing_time(minute + 59_999, 60_000, 20_000) == minute + 80_000
    assert closing_time(minute, 60_000, 20_000) == minute + 80_000


@pytest.mark.spark
def test_counts_per_minute_ignore_heartbeats(spark) -> None:
    from odradek.demo.pipeline import counts_per_minute

    generator = ActivityGenerator(seed=3)
    base = 1_700_000_040_000 - 1_700_000_040_000 % 60_000
    events = [generator.event(base + i * 300) for i in range(400)]  # two minutes
    values = [e.value for e in events] + [heartbeat(base + 10 * 60_000)]
    frame = spark.createDataFrame([(v,) for v in values], "value binary")
    got = {
        (r.minute.replace(tzinfo=UTC), r.page): (r.views, r.clicks)
        for r in counts_per_minute(frame).collect()
    }
    want: dict[tuple[datetime, str], list[int]] = {}
    for e in events:
        minute = datetime.fromtimestamp(e.ts // 60_000 * 60, tz=UTC)
        counts = want.setdefault((minute, e.page), [0, 0])
        counts[0 if e.type == "page_view" else 1] += 1
    assert got == {k: tuple(v) for k, v in want.items()}


PROGRESS = re.compile(
    r"^progress: \d+s (?P<phase>[A-Za-z ]+) \| events produced (?P<produced>\d+)(?P<queries>.*)$"
)
QUERY = re.compile(r"(\w+): (\d+) micro-batches, (\d+) rows read, (\d+) rows written, watermark")
# What must never reach the terminal: Python tracebacks, Java stack frames and exception
# lines, py4j's connection noise.
NOISE = re.compile(r"Traceback|^\s+at [\w$.]+\(|Exception in thread|\w+\.\w+Exception|py4j", re.M)
STOP_BOUND_S = 20.0  # generous: the demo stops in 1-5 s


class Demo:
    """``odradek demo`` in tmp_path (its data, warehouse, checkpoints and log go there) on a
    free port, in a session of its own so that SIGINT can go to its process group, as a
    terminal's Ctrl-C does; stdout is a pipe, so progress comes as plain lines. Threads read
    both pipes, so that a silent demo cannot hang the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        command = [
            sys.executable, "-m", "odradek", "demo", "--bootstrap-server",
            f"127.0.0.1:{free_port()}", "--master", "local[2]", "--duration", "10",
            "--events-per-second", "100",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )  # fmt: skip
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(pipe, lines), daemon=True)
            for pipe, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(pipe: IO[str], lines: list[str]) -> None:
        for line in pipe:
            lines.append(line.rstrip("\n"))

    def wait_for(self, wanted: Callable[[str], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(wanted(x) for x in list(self.out)):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                text = "\n".join(self.out + self.err)
                raise AssertionError(f"the demo never showed what was awaited:\n{text}")
            time.sleep(0.1)

    def interrupt(self) -> float:
        """Ctrl-C; returns how long the demo took to exit."""
        started = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=STOP_BOUND_S + 10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise
        took = time.monotonic() - started
        for reader in self._readers:
            reader.join(10)
        # The demo exits after a SIGTERM to Spark's JVM, whose shutdown hooks (SparkContext
        # stop, temporary files) may take seconds on a loaded machine: wait for it, bounded.
        # A process left running for good (the broker, before the fix) still fails this.
        deadline = time.monotonic() + 30
        while (left := processes_in(self.dir)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"processes left running in the demo's directory: {left}"
        return took

    @property
    def text(self) -> str:
        return "\n".join(self.out + self.err)


def processes_in(directory: Path) -> list[str]:
    """Command lines of the processes whose working directory is ``directory``."""
    found = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        with contextlib.suppress(OSError):
            if cwd.resolve() == directory.resolve():
                found.append((cwd.parent / "cmdline").read_text().replace("\0", " ")[:120])
    return found


def figures(line: str) -> dict[str, tuple[int, int, int]]:
    match = PROGRESS.match(line)
    assert match, line
    return {q: (int(b), int(r), int(w)) for q, b, r, w in QUERY.findall(match["queries"])}


@pytest.mark.spark
@pytest.mark.integration
def test_demo_shows_progress_and_ctrl_c_stops_the_broker_it_left_running(tmp_path: Path) -> None:
    demo = Demo(tmp_path)
    demo.wait_for(lambda x: x.startswith("the broker keeps running"), 400)
    took = demo.interrupt()
    assert demo.proc.returncode == 130, demo.text
    assert demo.err == ["interrupted: stopped the broker"], demo.text
    assert took < STOP_BOUND_S
    assert not NOISE.search(demo.text), demo.text
    lines = demo.out

    progress = [x for x in lines if x.startswith("progress:")]
    phases = [PROGRESS.match(x)["phase"] for x in progress]  # type: ignore[index]
    assert "streaming" in phases and phases[-1] == "done", progress
    produced = int(next(x for x in lines if x.startswith("events produced")).split()[-1])
    counted = int(next(x for x in lines if x.startswith("events counted")).split()[-1])
    topic_rows = int(next(x for x in lines if x.startswith("rows in topic")).split()[-1])
    assert counted == produced
    assert (tmp_path / "warehouse" / "page_minute_counts" / "_spark_metadata").is_dir()
    assert int(PROGRESS.match(progress[-1])["produced"]) == produced >= 900  # type: ignore[index]
    final = figures(progress[-1])
    assert set(final) == {"counts_to_parquet", "counts_to_topic"}
    for batches, rows_read, rows_written in final.values():
        # Every event plus the closing heartbeat was read; one row per page and minute written.
        assert batches >= 2 and rows_read == produced + 1 and rows_written == topic_rows > 0
    assert "watermark 1970" not in progress[-1] and "watermark -" not in progress[-1]


@pytest.mark.spark
@pytest.mark.integration
@pytest.mark.parametrize(
    "moment",
    ["right after start", "starting Spark", "streaming"],
)
def test_ctrl_c_stops_the_demo_quietly(tmp_path: Path, moment: str) -> None:
    demo = Demo(tmp_path)
    if moment == "right after start":
        demo.wait_for(lambda x: x.startswith("logs of the broker"), 60)
    else:
        demo.wait_for(lambda x: x.startswith("progress: ") and f"s {moment} |" in x, 300)
    took = demo.interrupt()
    assert demo.proc.returncode in (0, 130), demo.text
    assert len(demo.err) == 1 and demo.err[0].startswith("interrupted: stopped"), demo.text
    assert not NOISE.search(demo.text), demo.text
    assert took < STOP_BOUND_S


def _progress(run: str, batch: int, rows: int, written: int, watermark: str) -> SimpleNamespace:
    """The fields of a StreamingQueryProgress that the display reads."""
    return SimpleNamespace(
        runId=run, batchId=batch, numInputRows=rows, sink=SimpleNamespace(numOutputRows=written),
        eventTime={"watermark": watermark},
    )  # fmt: skip


def test_progress_counts_each_batch_once_and_fills_gaps(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from odradek.demo.progress import ProgressTracker, render_line

    epoch, later = "1970-01-01T00:00:00.000Z", "2026-11-24T01:04:00.000Z"
    history = [_progress("r", 7, 100, 0, epoch)]  # a resumed run: batch ids do not start at 0
    topic = SimpleNamespace(name="to_topic", lastProgress=None, recentProgress=history)
    files = SimpleNamespace(name="to_files", lastProgress=None, recentProgress=[])
    out = tmp_path / "out"
    out.mkdir()
    pq.write_table(pa.table({"x": [1, 2]}), out / "part-0-old.parquet")  # an earlier run's
    tracker = ProgressTracker(100, lambda: 42)
    tracker.watch(topic)
    tracker.watch(files, out)
    tracker.phase = "streaming"

    snap = tracker.poll()
    assert [(q.batches, q.rows_read, q.rows_written) for q in snap.queries] == [(0, 0, 0)] * 2
    topic.lastProgress = history[0]
    tracker.poll()
    tracker.poll()  # the same batch again: not counted twice
    history += [_progress("r", 8, 50, 0, later), _progress("r", 9, 0, 3, later)]
    topic.lastProgress = history[-1]  # two batches completed between polls
    files.lastProgress = _progress("f", 0, 150, -1, later)  # the file sink reports no rows
    pq.write_table(pa.table({"x": [1, 2, 3]}), out / "part-1-new.parquet")
    snap = tracker.poll()
    by_name = {q.name: q for q in snap.queries}
    assert (by_name["to_topic"].batches, by_name["to_topic"].rows_read) == (3, 150)
    assert by_name["to_topic"].rows_written == 3 and by_name["to_files"].rows_written == 3
    line = render_line(snap)
    assert PROGRESS.match(line) and line.startswith("progress: ")
    assert figures(line) == {"to_topic": (3, 150, 3), "to_files": (1, 150, 3)}
    assert line.count("watermark 2026-11-24 01:04:00 UTC") == 2
    assert "events produced 42" in line


def test_the_driver_binds_loopback_unless_the_cluster_is_elsewhere() -> None:
    from odradek.demo.session import driver_host

    for master in ("local[*]", "local[2]", "spark://127.0.0.1:7077", "spark://localhost:7077"):
        assert driver_host(master) == "127.0.0.1", master
    # Workers on other hosts must reach the driver: Spark's own choice of address stands.
    assert driver_host("spark://10.0.0.1:7077") is None
    assert driver_host("spark://127.0.0.1:7077,10.0.0.2:7077") is None


def test_py4j_records_on_the_root_logger_are_dropped() -> None:
    """py4j reports a Ctrl-C that lands inside a call with logging.exception() on the root
    logger; the demo's filter keeps that traceback off the terminal, and nothing else."""
    import logging

    from odradek.demo.session import _not_from_py4j

    def record(path: str) -> logging.LogRecord:
        return logging.LogRecord("root", logging.ERROR, path, 1, "message", None, None)

    site = f"{os.sep}venv{os.sep}site-packages{os.sep}"
    assert not _not_from_py4j(record(f"{site}py4j{os.sep}java_gateway.py"))
    assert _not_from_py4j(record(f"{site}odradek{os.sep}demo{os.sep}pipeline.py"))
    assert _not_from_py4j(record(f"{site}py4j_extras.py"))
