"""docs/grafana-dashboard.json queries only what a live broker exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.clients import consume_in_group
from tests.helpers.metrics import scrape

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\b((?:kafka|odradek)_[a-z0-9_]+)\b")


def _queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        target["expr"]
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]
    queries += [
        variable["definition"]
        for variable in dashboard["templating"]["list"]
        if variable["type"] == "query"
    ]
    return queries


def test_dashboard_panels_are_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        if panel["type"] != "row":
            assert panel["targets"] and all(METRIC.search(t["expr"]) for t in panel["targets"])


def test_every_metric_the_dashboard_queries_is_exported(tmp_path: Path) -> None:
    names = {name for query in _queries() for name in METRIC.findall(query)}
    assert len(names) > 25
    metrics_port = free_port()
    proc = BrokerProcess(tmp_path / "data", overrides={"metrics.port": str(metrics_port)})
    proc.start()
    try:
        # Traffic that makes every labelled series appear: a topic, a group with a commit.
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        for i in range(50):
            producer.produce("dashboard", value=b"%d" % i)
        assert producer.flush(30) == 0
        consume_in_group(proc.bootstrap, "dashboard", "dashboard-readers", 10, commit=True)
        exported = set(scrape(metrics_port).samples)
    finally:
        proc.stop()
    missing = sorted(names - exported)
    assert missing == [], f"the dashboard queries metrics the broker does not export: {missing}"
