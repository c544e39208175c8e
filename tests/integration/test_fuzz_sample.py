"""A bounded sample of the fuzzing campaign (bench/fuzz_broker.py) runs with the suite.

Every API and version the broker advertises and every record-batch mutation class with
every codec gets ten cases, each followed by health checks; the run must end without a
finding (traceback in the broker log, failed round trip, RSS growth, known data changed).
The documented long run is the same script with ``--cases 1000000``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_fuzz_sample_has_no_findings(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "fuzz_broker.py"),
            "--cases",
            "2150",
            "--chunk",
            "10",
            "--seed",
            "7",
            "--time-limit",
            "50",
            "--verify-every",
            "100",
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert "findings: 0 new" in run.stdout
    cases = int(run.stdout.split("\ncases: ")[1].split()[0])
    assert cases >= 1000, run.stdout[-3000:]
