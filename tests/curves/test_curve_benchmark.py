"""Smoke test of benchmarks/curves.py: it runs and reports sane figures (no timing limits)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "curves.py"


@pytest.mark.slow
def test_quick_curve_benchmark_prints_positive_finite_figures() -> None:
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
    assert figures["budget"] == "hyperdrive"
    for n in (10, 30, 60):
        median, p90 = figures[f"n{n}_median_s"], figures[f"n{n}_p90_s"]
        assert math.isfinite(median)
        assert median > 0
        assert p90 >= median
        assert figures[f"n{n}_unknown"] == 0
    assert figures["batch_curves"] == 4
    assert figures["batch_workers"] == 2
    assert figures["batch_seconds"] > 0
    assert figures["batch_unknown"] == 0
