"""Smoke test of benchmarks/pbt.py: one seed, 6 epochs, both modes at half the population, sane
figures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_pbt_benchmark_reports_equal_budget_figures(tmp_path: Path) -> None:
    plot = tmp_path / "lr.png"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "pbt.py"),
            "--quick",
            "--json",
            "--out",
            str(tmp_path / "runs"),
            "--plot",
            str(plot),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["quick"] is True
    assert set(figures["summary"]) == {"pbt 4 on 2", "pbt 2 on 2"}
    for run in figures["runs"]:
        pbt, random = run["pbt"], run["random"]
        population = 4 if run["setting"] == "pbt 4 on 2" else 2
        assert pbt["trials"] >= population
        assert random["training_steps"] == population * 6
        assert pbt["training_steps"] >= population * 6  # an older parent may add a session
        assert 0 < pbt["best_val_loss"] <= pbt["best_val_loss_equal_steps"] < 2.5
        assert pbt["lr_schedule"][0][0] == 0
        assert all(math.isfinite(v) for v in (random["best_val_loss"], pbt["final_val_loss"]))
    assert plot.stat().st_size > 10_000
