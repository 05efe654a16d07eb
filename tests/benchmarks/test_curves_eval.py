"""Smoke test of the curve-prediction evaluation (benchmarks/curves_eval.py --quick), and its
density-from-quantiles and AUC helpers against closed forms."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy import stats

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "curves_eval.py"


def _module() -> ModuleType:
    saved = dict(os.environ)  # the script pins thread counts in os.environ when imported
    try:
        return importlib.import_module("benchmarks.curves_eval")
    finally:
        os.environ.clear()
        os.environ.update(saved)


# eight traces: about 70 s alone, over 3 minutes beside the rest of the suite on 2 cores
@pytest.mark.timeout(660)
def test_quick_run_reports_every_metric_for_every_trace_cut_and_method() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, "--json prints only the JSON line"
    report = json.loads(lines[0])
    assert report["format"] == "hpctune.curves_eval/2"
    traces = {p.stem for p in (REPO / "benchmarks" / "traces").glob("*.h5")}
    assert set(report["workloads"]) == traces >= {"digits", "diabetes", "charlm"}
    assert report["workloads"]["diabetes"]["mode"] == "min"
    assert report["workloads"]["diabetes"]["bounds"] == [0.0, 2.0]
    rows = report["results"]
    recal = tuple(f"amortised+{kind}{k}" for kind in ("recal", "spread") for k in ("", "16", "8"))
    methods = ("amortised", "domhan", "last", "pow3", *recal)
    assert len(rows) == len(traces) * 3 * len(methods)
    assert {(r["workload"], r["n"]) for r in rows} >= {
        ("digits", 3),
        ("digits", 8),
        ("digits", 15),
        ("diabetes", 4),
        ("diabetes", 10),
        ("diabetes", 20),
    }
    for row in rows:
        assert row["method"] in methods
        assert row["mae"] >= 0
        assert 0 <= row["cov50"] <= row["cov90"] + 1e-12 <= 1 + 1e-12
        assert math.isfinite(row["lpd"])
        assert 0 <= row["auc"] <= 1
    # with half of each curve seen, both models' errors are small (a tenth of the metric's
    # range) on every workload but cartpole, whose episode returns are noisier than that (its
    # last value is off by a third of the range); there both models beat the last value
    last = {
        r["workload"]: r["mae"] for r in rows if r["method"] == "last" and r["fraction"] == 0.5
    }
    for row in rows:
        if row["method"] in ("amortised", "domhan") and row["fraction"] == 0.5:
            low, high = report["workloads"][row["workload"]]["bounds"]
            if row["workload"] == "cartpole":
                assert row["mae"] < last["cartpole"], row
            else:
                assert row["mae"] < 0.1 * (high - low), row
    # the summary judges the amortised model, and the cost compares both models' CPU time
    for part in report["summary"].values():
        assert part["goals"]["model"] == "amortised"
        assert set(part["means"]) == set(methods)
        assert set(part["recal_goals"]) == set(recal)
    assert report["recal"]["prior_count"] > 0
    cost = report["cost"]
    fits = 3 * sum(w["curves"] for w in report["workloads"].values())
    assert cost["amortised"]["fits"] == cost["domhan"]["fits"] == fits == len(traces) * 3 * 3
    assert cost["amortised"]["fits_per_cpu_second"] > cost["domhan"]["fits_per_cpu_second"]


def test_density_from_quantiles_and_auc_match_closed_forms() -> None:
    module = _module()
    from hpctune.curves import LEVELS

    levels = np.asarray(LEVELS)
    q = stats.norm.ppf(levels, loc=0.6, scale=0.05)
    for u, tol in ((0.58, 0.05), (0.6, 0.05), (0.63, 0.05), (0.7, 0.3), (0.45, 0.6)):
        # piecewise uniform between the stored levels: close to the normal's log density,
        # the closer the denser the levels
        got = module.quantile_log_density(levels, q, u)
        assert got == pytest.approx(stats.norm.logpdf(u, 0.6, 0.05), abs=tol)
    # the tails decay and stay continuous at the outer levels
    edge = module.quantile_log_density(levels, q, float(q[-1]))
    assert module.quantile_log_density(levels, q, float(q[-1]) + 1e-9) == pytest.approx(edge)
    assert module.quantile_log_density(levels, q, 1.0) < edge - 5
    scores = np.array([0.1, 0.4, 0.35, 0.8])
    labels = np.array([False, False, True, True])
    assert module.auc(scores, labels) == pytest.approx(0.75)
    assert math.isnan(module.auc(scores, np.array([True] * 4)))


def test_a_curve_is_recalibrated_without_its_own_final_value() -> None:
    module = _module()
    from hpctune.curves import predict_curves

    rng = np.random.default_rng(3)
    curves = [list(0.6 - 0.4 * np.exp(-np.arange(1, 6) / rng.uniform(1, 4))) for _ in range(12)]
    preds = predict_curves(curves, 30)
    finals = rng.uniform(0.5, 0.9, size=12)
    fallbacks = [module.Predictive(mean=0.5, sd=0.1)] * 12
    for others, symmetric in ((None, False), (8, False), (None, True), (4, True)):
        got = module.recalibrated(preds, finals, fallbacks, others, 2.0, 0, symmetric)
        moved = finals.copy()
        moved[5] = 0.01  # curve 5's own final value, far below every prediction
        again = module.recalibrated(preds, moved, fallbacks, others, 2.0, 0, symmetric)
        np.testing.assert_array_equal(got[5].q, again[5].q)
        # the others see it (leave-one-out: all of them; K of 11: the ones that drew it)
        changed = [i for i in range(12) if not np.array_equal(got[i].q, again[i].q)]
        assert changed
        if others is None:
            assert changed == [i for i in range(12) if i != 5]
