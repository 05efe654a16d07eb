"""Smoke test of benchmarks/policy_scale.py: it compares two trees and prints sane figures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "policy_scale.py"


ARGS = ["--quick", "--json", "--ref", "HEAD", "--policies", "median", "pbt", "--budget", "0.5"]


def test_quick_run_prints_positive_figures_for_both_trees() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *ARGS],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, "--json prints only the JSON line"
    data = json.loads(lines[0])
    assert data["quick"] is True
    for side in ("before", "after"):
        figures = data[side]["figures"]
        assert set(figures) == {"median:200", "median:1000", "pbt:200", "pbt:1000"}
        for key, values in figures.items():
            names = ["slot_free"] + (["boundary", "boundary_cold_pass"] if "median" in key else [])
            for name in names:
                assert math.isfinite(values[name]), (side, key, name)
                assert values[name] > 0, (side, key, name)
