"""The joint curve model on every trace: ranking, calibration and error of final-value forecasts.

    OPENBLAS_NUM_THREADS=1 python benchmarks/joint_eval.py            # every trace, the table
    OPENBLAS_NUM_THREADS=1 python benchmarks/joint_eval.py --json     # one JSON object

**Task** (``benchmarks/curves_eval.py``'s): every complete curve of a trace is cut after 10 %,
25 % and 50 % of its steps (n = round(f x steps), at least 3) and its value at the last step is
predicted. The joint model (:mod:`hpctune.curves.joint`) predicts all configurations of the
trace in one call, as a study would hold them: every configuration observed up to the same n,
with its hyperparameters (the trace's search space). No recalibration.

**Baselines**: ``last``, the last observed value (point prediction; for the AUC, ranking by it);
``amortised``, hpctune's per-curve network (:mod:`hpctune.curves.amortised`, each curve alone).

**Metrics** (per trace and cut, in the metric's units): ``mae`` of the predictive median,
``cov50``/``cov90`` the share of true final values inside the central 50 %/90 % interval,
``auc`` of P(final at least as good as the top-10 % threshold: the 90th percentile of the true
final values, direction-aware) for separating the configurations that reach it from the others
(``last``: ranked by the last value). Speed: study-wide predictions (every trial, every later
step) per CPU-second at 100 and 1,000 trials of synthetic curves of 60 steps.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.curves.amortised import predict_curves
from hpctune.curves.joint import StudyCurves, coordinates, predict_study, prediction_of
from hpctune.simulator.nearest import trace_space
from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "benchmarks" / "traces"
CUTS = (0.10, 0.25, 0.50)


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for ``positive`` (ties count half)."""
    pos, neg = scores[positive], scores[~positive]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def evaluate(trace: Trace) -> dict[str, Any]:
    """Every cut's metrics for the joint model and the baselines on ``trace``."""
    complete = np.flatnonzero(trace.lengths() == trace.num_epochs)
    curves = trace.curves[complete]
    final = curves[:, -1]
    sign = trace.sign
    bounds = trace.metric_bounds or (0.0, 1.0)
    threshold = float(sign * np.quantile(sign * final, 0.9))
    positive = sign * final >= sign * threshold
    coords = coordinates(trace_space(trace), [trace.hparams[i] for i in complete])
    x_max = trace.num_epochs
    out: dict[str, Any] = {}
    for cut in CUTS:
        n = max(round(cut * x_max), 3)
        study = StudyCurves([c[:n] for c in curves], coords, x_max, bounds, trace.mode)
        quantiles, _ = predict_study(study)
        joint = [prediction_of(q, n, x_max, bounds, trace.mode) for q in quantiles]
        amortised = predict_curves(
            [c[:n] for c in curves], x_max=x_max, bounds=bounds, mode=trace.mode
        )
        row: dict[str, Any] = {"n": n}
        for name, preds in (("joint", joint), ("amortised", amortised)):
            q = np.array([p.quantiles((0.05, 0.25, 0.5, 0.75, 0.95))[-1] for p in preds])
            p_top = np.array([p.prob_final_at_least(threshold) for p in preds])
            row[name] = {
                "mae": float(np.mean(np.abs(q[:, 2] - final))),
                "cov50": float(np.mean((final >= q[:, 1]) & (final <= q[:, 3]))),
                "cov90": float(np.mean((final >= q[:, 0]) & (final <= q[:, 4]))),
                "auc": auc(np.nan_to_num(p_top, nan=0.0), positive),
            }
        last = curves[:, n - 1]
        row["last"] = {
            "mae": float(np.mean(np.abs(last - final))),
            "auc": auc(sign * last, positive),
        }
        out[f"{int(cut * 100)}%"] = row
    return out


def speed(trials: int, rng: np.random.Generator) -> float:
    """Study-wide predictions per CPU-second for ``trials`` trials of up to 60 steps."""
    x_max = 60
    curves = []
    for _ in range(trials):
        n = int(rng.integers(1, x_max))
        curves.append(0.9 - 0.8 * np.exp(-np.arange(1, n + 1) / rng.uniform(2, 20)))
    coords = rng.random((trials, 12))
    study = StudyCurves(curves, coords, x_max, (0.0, 1.0), "max")
    predict_study(study)  # warm
    repeats = 5
    start = time.process_time()
    for _ in range(repeats):
        predict_study(study)
    return repeats / (time.process_time() - start)


def main() -> None:
    """Evaluate every trace and print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {p.stem: evaluate(Trace.load(p)) for p in sorted(args.traces.glob("*.h5"))}
    rng = np.random.default_rng(0)
    rates = {str(k): speed(k, rng) for k in (100, 1000)}
    if args.json:
        print(json.dumps({"traces": results, "study_predictions_per_cpu_s": rates}))
        return
    print(
        "| trace | cut | n | AUC joint / amortised / last | MAE joint / amortised / last "
        "| cov90 joint / amortised | cov50 joint / amortised |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, cuts in results.items():
        for cut, r in cuts.items():
            j, a, last = r["joint"], r["amortised"], r["last"]
            print(
                f"| {name} | {cut} | {r['n']} | {j['auc']:.3f} / {a['auc']:.3f} / "
                f"{last['auc']:.3f} | {j['mae']:.4g} / {a['mae']:.4g} / {last['mae']:.4g} | "
                f"{j['cov90']:.2f} / {a['cov90']:.2f} | {j['cov50']:.2f} / {a['cov50']:.2f} |"
            )
    print(
        "study-wide predictions per CPU-second: "
        + ", ".join(f"{k} trials: {v:.1f}" for k, v in rates.items())
    )


if __name__ == "__main__":
    main()
