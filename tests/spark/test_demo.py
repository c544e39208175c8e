"""The demo pipeline: its events, its windowed counts, and one short end-to-end run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from odradek.demo.events import (
    EVENT_TYPES,
    PAGES,
    ActivityGenerator,
    closing_time,
    event_time,
    heartbeat,
)


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


@pytest.mark.spark
@pytest.mark.integration
def test_demo_runs_end_to_end(spark_broker, tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "odradek.demo",
        "--bootstrap-server", spark_broker.bootstrap, "--master", "local[2]",
        "--duration", "4", "--events-per-second", "100", "--trigger-seconds", "1",
        "--warehouse", str(tmp_path / "warehouse"), "--checkpoint", str(tmp_path / "checkpoint"),
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    produced = int(next(x for x in lines if x.startswith("events produced")).split()[-1])
    counted = int(next(x for x in lines if x.startswith("events counted")).split()[-1])
    assert produced > 300 and counted == produced
    assert (tmp_path / "warehouse" / "page_minute_counts" / "_spark_metadata").is_dir()
