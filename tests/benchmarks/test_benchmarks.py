"""Smoke test of the journal benchmark: it runs and reports sane figures (no timing limits)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "journal.py"

FIGURES = [
    "report_b1_p50_us",
    "report_b1_p99_us",
    "report_b10_p50_us",
    "report_b10_p99_us",
    "ingest_writers",
    "ingest_records",
    "ingest_seconds",
    "ingest_records_per_s",
    "ingest_writers_seconds",
    "ingest_records_per_cpu_s",
    "ingest_iterations",
    "load_trials",
    "load_epochs",
    "load_build_s",
    "load_open_s",
    "load_curves_s",
    "load_other_metric_curves_s",
    "load_total_s",
]


def test_quick_benchmark_prints_positive_finite_figures() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, "--json prints only the JSON line"
    figures = json.loads(lines[0])
    assert figures["quick"] is True
    for name in FIGURES:
        value = figures[name]
        assert isinstance(value, int | float), name
        assert not isinstance(value, bool), name
        assert math.isfinite(value), (name, value)
        assert value > 0, (name, value)
    assert figures["report_b1_p99_us"] >= figures["report_b1_p50_us"]
    assert figures["report_b10_p99_us"] >= figures["report_b10_p50_us"]
    # every writer's start, reports and end were ingested
    per_writer = figures["ingest_records"] / figures["ingest_writers"]
    assert per_writer == int(per_writer)
    assert per_writer > 2
