"""Prediction quality of the learning-curve model on real learning curves, against two baselines.

    python benchmarks/curves_eval.py            # full run: both traces, every complete curve
    python benchmarks/curves_eval.py --quick    # CI smoke run: 3 curves per trace, small budget
    python benchmarks/curves_eval.py --json     # only the JSON line

**Data.** Two real workloads recorded with hpctune itself (``hpctune launch --local``, then
``Trace.from_study``): ``benchmarks/traces/digits.h5`` (validation accuracy of an MLP on
scikit-learn's digits, mode max, 128 configurations x 30 epochs; ``make_digits_trace.py``) and
``benchmarks/traces/diabetes.h5`` (validation MSE of an MLP regressor on scikit-learn's diabetes
data, mode min, metric_bounds [0, 2], 128 configurations x 40 epochs, of which 126 ran to the
end; ``make_diabetes_trace.py``). Only complete curves are used. ``--max-curves K`` keeps K
curves per trace, evenly spaced over the configurations (the full run keeps all).

**Task.** Each curve is cut after 10 %, 25 % and 50 % of its epochs (n = round(f x epochs), at
least 3: digits n = 3, 8, 15; diabetes n = 4, 10, 20) and the value at the last epoch is
predicted from the first n points.

**Methods** (all fitted on the curve normalised by the trace's metric_bounds, larger is better;
``--methods`` picks some):

* ``domhan``: hpctune's model (Domhan et al. 2015; 11 families, MCMC with the HyperDrive budget
  100 x 700, seeds ``curve_fit_seed(0, config, n)``), fitted in a process pool of 2 workers
  (``CurveFitter``), summarised by ``CurvePrediction`` (predictive quantiles, noise included).
  An unknown fit (degenerate prefix) falls back to the ``last`` baseline (counted in ``unknown``).
* ``last``: the last observed value as the point prediction; for intervals, the LPD and the AUC
  a random walk from it: N(y_n, s^2 (m - n)) with s the standard deviation of the observed
  one-step changes (at least 0.001 of the range).
* ``pow3``: one least-squares fit of pow3, c - a x^(-alpha) (scipy ``least_squares``, three
  starts); point = its value at the last epoch; intervals from N(point, r^2) with r the residual
  standard deviation (sum of squares / max(n - 3, 1), at least 0.005 of the range): the noise of
  the fit only, without its parameter uncertainty.

* ``amortised+recal``, ``amortised+recal16``, ``amortised+recal8``: the amortised prediction
  recalibrated in the study (``hpctune.curves.calibration``, quantile recalibration after
  Kuleshov et al. 2018): for each curve and cut, the PITs of the true final value under the
  same-cut predictions of *other* curves of the same trace only, all of them (leave-one-out) or
  16 or 8 drawn at random (seed ``(RECAL_SEED, K, cut)``), give a map of quantile levels applied
  to the curve's prediction; how many finished trials a study needs. ``amortised+spread*``: the
  same, symmetric (each PIT z also counted as 1 - z): the median stays, only the spread changes.
  The pseudo-count of the uniform prior (``--prior-count``, default
  ``hpctune.curves.calibration.PRIOR_COUNT`` = 2) was chosen on this script with 10 seeds of the
  random draws: leave-one-out meets the coverage goals for any count from 0 to 10; with 8 or
  16 PITs the full recalibration meets them on every trace and seed for counts up to 2 (3: 9 of
  10 seeds at K = 8; 10: 0 to 5 of 10 seeds on digits and digits-loss, whose too wide intervals
  the prior then keeps); the symmetric one for counts up to 10.

**Metrics** (per trace, cut and method; in the metric's own units): ``mae`` mean absolute error
of the point prediction (the predictive median for ``domhan``); ``cov50``/``cov90`` share of
true final values inside the central 50 %/90 % predictive interval (calibrated: 0.5/0.9);
``lpd`` mean log predictive density of the true final value (``domhan``: from the stored
predictive quantiles, a piecewise-uniform density between the 27 levels with exponential tails
beyond 0.1 %/99.9 % that continue the outer buckets' density; baselines: their Gaussian);
``auc`` area under the ROC curve of P(final at least as good as the threshold) for separating
the configurations whose true final value reaches the top-10 % threshold (the 90th percentile
of the trace's true final values, direction-aware) from the others.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402 - the thread settings above must precede numpy's import
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402
from scipy.optimize import least_squares  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TRACE_DIR = REPO / "benchmarks" / "traces"
FRACTIONS = (0.1, 0.25, 0.5)
#: Curve models (fitted through ``CurveFitter``) and baselines; the first model is judged.
MODELS = ("amortised", "domhan")
#: In-study recalibrations of a model (``hpctune.curves.calibration``): method -> (model, K,
#: symmetric), from the PITs of all other curves of the trace (K None, leave-one-out) or of K of
#: them drawn at random; "recal" is the full recalibration, "spread" the symmetric one.
RECAL: dict[str, tuple[str, int | None, bool]] = {
    "amortised+recal": ("amortised", None, False),
    "amortised+recal16": ("amortised", 16, False),
    "amortised+recal8": ("amortised", 8, False),
    "amortised+spread": ("amortised", None, True),
    "amortised+spread16": ("amortised", 16, True),
    "amortised+spread8": ("amortised", 8, True),
}
METHODS = ("amortised", "domhan", "last", "pow3", *RECAL)
QUICK_CURVES = 3
#: Seed of the K other curves drawn for each curve by the ``+recalK`` methods.
RECAL_SEED = 0


def all_traces() -> dict[str, Path]:
    """Every trace of ``benchmarks/traces/`` by name (its file name without ``.h5``)."""
    return {path.stem: path for path in sorted(TRACE_DIR.glob("*.h5"))}


@dataclass(frozen=True)
class Workload:
    """The complete curves of one trace and how to normalise them."""

    name: str
    curves: np.ndarray  # (configs, epochs), complete rows only
    ids: np.ndarray  # configuration index of each row
    bounds: tuple[float, float]
    mode: str

    @property
    def epochs(self) -> int:
        """Epochs of a full curve."""
        return int(self.curves.shape[1])

    def to_u(self, y: np.ndarray | float) -> np.ndarray:
        """Normalised values (larger is better)."""
        low, high = self.bounds
        u = (np.asarray(y, dtype=float) - low) / (high - low)
        return u if self.mode == "max" else 1.0 - u

    def from_u(self, u: np.ndarray | float) -> np.ndarray:
        """Raw values from normalised ones."""
        low, high = self.bounds
        v = np.asarray(u, dtype=float)
        return low + (high - low) * (v if self.mode == "max" else 1.0 - v)

    @property
    def span(self) -> float:
        """high - low."""
        return self.bounds[1] - self.bounds[0]


def load_workload(name: str, path: Path, max_curves: int | None) -> Workload:
    """The complete curves of a trace, ``max_curves`` of them evenly spaced if given."""
    from hpctune.simulator.traces import Trace

    trace = Trace.load(path)
    complete = np.flatnonzero(trace.lengths() == trace.num_epochs)
    if max_curves is not None and max_curves < len(complete):
        complete = complete[np.linspace(0, len(complete) - 1, max_curves).round().astype(int)]
    return Workload(
        name, trace.curves[complete], complete, trace.metric_bounds or (0.0, 1.0), trace.mode
    )


def cut_points(epochs: int, fraction: float) -> int:
    """Observed points for a cut: round(fraction x epochs), at least 3."""
    return max(3, math.floor(fraction * epochs + 0.5))


# -- predictive distributions -------------------------------------------------------------------


@dataclass(frozen=True)
class Predictive:
    """A predictive distribution of one final value on the normalised scale.

    Either Gaussian (``mean``, ``sd``) or quantile-based (``levels``, ``q``).
    """

    mean: float = math.nan
    sd: float = math.nan
    levels: np.ndarray | None = None
    q: np.ndarray | None = None

    def quantile(self, p: float) -> float:
        """The p-quantile (normalised)."""
        if self.q is None:
            return float(self.mean + self.sd * stats.norm.ppf(p))
        assert self.levels is not None
        return float(np.interp(p, self.levels, self.q))

    def sf(self, u: float) -> float:
        """P(value >= u) (normalised, larger is better).

        From quantiles: linear between the stored levels, and beyond the outer ones the
        exponential tails of :func:`quantile_log_density` (the distribution the LPD scores), so
        that curves beyond 99.9 % are still ranked by how far beyond they are.
        """
        if self.q is None:
            return float(stats.norm.sf(u, self.mean, self.sd))
        assert self.levels is not None
        return quantile_sf(self.levels, self.q, u)

    def log_density(self, u: float) -> float:
        """log density at ``u`` (normalised units)."""
        if self.q is None:
            return float(stats.norm.logpdf(u, self.mean, self.sd))
        assert self.levels is not None
        return quantile_log_density(self.levels, self.q, u)


def quantile_log_density(levels: np.ndarray, q: np.ndarray, u: float, dq: float = 1e-5) -> float:
    """log density of the distribution with quantiles ``q`` at ``levels``, at ``u``.

    Piecewise uniform between stored levels (bucket widths at least ``dq``, the stored rounding);
    beyond the outer levels an exponential tail of mass ``levels[0]`` (``1 - levels[-1]``) whose
    density at the edge equals the outer bucket's.
    """
    q = np.maximum.accumulate(np.asarray(q, dtype=float))
    widths = np.maximum(np.diff(q), dq)
    density = np.diff(levels) / widths
    if u < q[0]:
        d0 = density[0]
        return float(math.log(d0) - d0 / levels[0] * (q[0] - u))
    if u > q[-1]:
        d1 = density[-1]
        return float(math.log(d1) - d1 / (1.0 - levels[-1]) * (u - q[-1]))
    i = int(np.clip(np.searchsorted(q, u, side="right") - 1, 0, len(density) - 1))
    return float(math.log(density[i]))


def quantile_sf(levels: np.ndarray, q: np.ndarray, u: float, dq: float = 1e-5) -> float:
    """P(value >= u) of the distribution of :func:`quantile_log_density` (same tails)."""
    q = np.maximum.accumulate(np.asarray(q, dtype=float))
    density = np.diff(levels) / np.maximum(np.diff(q), dq)
    if u > q[-1]:
        tail = 1.0 - levels[-1]
        return float(tail * math.exp(-density[-1] / tail * (u - q[-1])))
    if u < q[0]:
        return float(1.0 - levels[0] * math.exp(-density[0] / levels[0] * (q[0] - u)))
    return float(1.0 - np.interp(u, q, levels))


def last_value(work: Workload, u: np.ndarray) -> Predictive:
    """The ``last`` baseline: a random walk from the last observed value."""
    n = len(u)
    steps = np.diff(u)
    s = float(np.std(steps, ddof=1)) if len(steps) > 1 else abs(float(steps[0]))
    s = max(s, 1e-3)
    return Predictive(mean=float(u[-1]), sd=s * math.sqrt(work.epochs - n))


def pow3_fit(work: Workload, u: np.ndarray) -> Predictive:
    """The ``pow3`` baseline: one least-squares fit of c - a x^(-alpha)."""
    x = np.arange(1, len(u) + 1, dtype=float)

    def residuals(theta: np.ndarray) -> np.ndarray:
        c, a, alpha = theta
        return c - a * x ** (-alpha) - u

    best = None
    for alpha in (0.3, 1.0, 2.0):
        start = np.array([u[-1] + 0.02, u[-1] + 0.02 - u[0], alpha])
        fit = least_squares(
            residuals, start, bounds=([-1.0, -3.0, 1e-3], [2.0, 3.0, 10.0]), method="trf"
        )
        if best is None or fit.cost < best.cost:
            best = fit
    assert best is not None
    c, a, alpha = best.x
    point = float(c - a * work.epochs ** (-alpha))
    ssr = 2.0 * float(best.cost)
    sd = max(math.sqrt(ssr / max(len(u) - 3, 1)), 0.005)
    return Predictive(mean=point, sd=sd)


# -- metrics ------------------------------------------------------------------------------------


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties averaged); NaN with one class only."""
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        return math.nan
    ranks = stats.rankdata(scores)
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def evaluate(
    work: Workload, predictive: list[Predictive], n: int, threshold: float
) -> dict[str, float]:
    """The metrics of one method on one cut."""
    finals = work.curves[:, -1]
    u_true = work.to_u(finals)
    u_thr = float(work.to_u(threshold))
    point = np.array([work.from_u(p.quantile(0.5)) for p in predictive])
    inside = {}
    for name, (lo, hi) in {"cov50": (0.25, 0.75), "cov90": (0.05, 0.95)}.items():
        lows = np.array([p.quantile(lo) for p in predictive])
        highs = np.array([p.quantile(hi) for p in predictive])
        inside[name] = float(np.mean((lows <= u_true) & (u_true <= highs)))
    lpd = np.array([p.log_density(float(u)) for p, u in zip(predictive, u_true, strict=True)])
    lpd -= math.log(work.span)  # density per raw unit
    labels = u_true >= u_thr
    scores = np.array([p.sf(u_thr) for p in predictive])
    return {
        "mae": float(np.mean(np.abs(point - finals))),
        **inside,
        "lpd": float(np.mean(lpd)),
        "auc": auc(scores, labels),
    }


def _cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children (the fit pool's processes).

    From getrusage, which counts microseconds: os.times counts clock ticks (10 ms), and a quick
    run's amortised fits take less than one tick."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _predictive(prediction: Any, fallback: Predictive) -> tuple[Predictive, bool]:
    """The final value's predictive of a prediction; the fallback if it is unknown."""
    if prediction.unknown:
        return fallback, True
    q = prediction.u_quantiles[-1]
    return Predictive(levels=np.asarray(prediction.levels), q=q), False


def recalibrated(
    predictions: list[Any],
    finals: np.ndarray,
    fallbacks: list[Predictive],
    others: int | None,
    prior_count: float,
    seed: Any = RECAL_SEED,
    symmetric: bool = False,
) -> list[Predictive]:
    """Each curve's prediction recalibrated on the final values' PITs of other curves only.

    ``others`` None: all other curves (leave-one-out); else that many of them drawn at random
    (all if fewer), with ``np.random.default_rng(seed)``. Unknown predictions (their PIT is NaN,
    and they fall back to ``fallbacks``) lend no PIT. ``symmetric``: spread only.
    """
    from hpctune.curves.calibration import Recalibration, pit

    pits = np.array([pit(p, p.x_max, float(y)) for p, y in zip(predictions, finals, strict=True)])
    rng = np.random.default_rng(seed)
    out = []
    for i, (prediction, fallback) in enumerate(zip(predictions, fallbacks, strict=True)):
        rest = np.delete(np.arange(len(predictions)), i)
        if others is not None and others < len(rest):
            rest = rng.choice(rest, size=others, replace=False)
        recal = Recalibration.from_pits(pits[rest], prior_count, symmetric=symmetric)
        out.append(_predictive(recal.apply(prediction), fallback)[0])
    return out


def run(
    max_curves: int | None,
    budget: Any,
    workers: int,
    fractions: tuple[float, ...],
    methods: tuple[str, ...] = METHODS,
    traces: dict[str, Path] | None = None,
    prior_count: float | None = None,
) -> dict[str, Any]:
    """Fit and score every workload, cut and method."""
    from hpctune.curves import CurveFitter, CurveRequest, FitOptions
    from hpctune.curves.calibration import PRIOR_COUNT
    from hpctune.curves.service import curve_fit_seed

    prior_count = PRIOR_COUNT if prior_count is None else prior_count
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    workloads: dict[str, Any] = {}
    bases = {RECAL[m][0] for m in methods if m in RECAL}
    models = [m for m in methods if m in MODELS]
    models += [m for m in MODELS if m in bases and m not in models]
    cost = {m: {"fits": 0, "cpu_seconds": 0.0, "seconds": 0.0} for m in models}
    for name, path in (traces or all_traces()).items():
        work = load_workload(name, path, max_curves)
        finals = work.curves[:, -1]
        threshold = float(np.quantile(finals, 0.9 if work.mode == "max" else 0.1))
        workloads[name] = {
            "path": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path),
            "curves": len(work.curves),
            "epochs": work.epochs,
            "mode": work.mode,
            "bounds": list(work.bounds),
            "threshold": threshold,
            "positives": int(np.sum(work.to_u(finals) >= work.to_u(threshold))),
        }
        for fraction in fractions:
            n = cut_points(work.epochs, fraction)
            prefixes = [work.to_u(row[:n]) for row in work.curves]
            requests = [
                CurveRequest(
                    key=int(cid),
                    y=tuple(row[:n]),
                    x_max=work.epochs,
                    bounds=work.bounds,
                    mode=work.mode,  # type: ignore[arg-type]
                    seed=curve_fit_seed(0, int(cid), n),
                )
                for cid, row in zip(work.ids, work.curves, strict=True)
            ]
            lasts = [last_value(work, u) for u in prefixes]
            predictive: dict[str, list[Predictive]] = {}
            unknown: dict[str, int] = {}
            raw: dict[str, list[Any]] = {}
            for model in models:
                options = FitOptions(model=model, budget=budget)  # type: ignore[arg-type]
                fitter = CurveFitter(workers=workers if model == "domhan" else 0, options=options)
                cpu0, t0 = _cpu_seconds(), time.perf_counter()
                fitted = fitter.fit(requests)
                cost[model]["cpu_seconds"] += _cpu_seconds() - cpu0
                cost[model]["seconds"] += time.perf_counter() - t0
                cost[model]["fits"] += len(requests)
                pairs = [
                    _predictive(fitted[r.key], fallback)
                    for r, fallback in zip(requests, lasts, strict=True)
                ]
                predictive[model] = [p for p, _ in pairs]
                unknown[model] = sum(u for _, u in pairs)
                raw[model] = [fitted[r.key] for r in requests]
            for method in methods:
                if method in RECAL:
                    base, others, symmetric = RECAL[method]
                    seed = (RECAL_SEED, others or 0, round(1000 * fraction))
                    predictive[method] = recalibrated(
                        raw[base], finals, lasts, others, prior_count, seed, symmetric
                    )
                    unknown[method] = unknown[base]
            if "last" in methods:
                predictive["last"] = lasts
            if "pow3" in methods:
                predictive["pow3"] = [pow3_fit(work, u) for u in prefixes]
            for method in methods:
                row = {"workload": name, "fraction": fraction, "n": n, "method": method}
                row.update(evaluate(work, predictive[method], n, threshold))
                row["unknown"] = unknown.get(method, 0)
                results.append(row)
    for figures in cost.values():
        figures["fits_per_cpu_second"] = (
            figures["fits"] / figures["cpu_seconds"] if figures["cpu_seconds"] > 0 else math.nan
        )
    return {
        "format": "hpctune.curves_eval/2",
        "budget": budget if isinstance(budget, str) else vars(budget),
        "workers": workers,
        "methods": list(methods),
        "recal": {"prior_count": prior_count, "seed": RECAL_SEED},
        "workloads": workloads,
        "results": results,
        "summary": summarise(results, methods),
        "cost": cost,
        "seconds": round(time.perf_counter() - started, 2),
    }


def summarise(results: list[dict[str, Any]], methods: tuple[str, ...]) -> dict[str, Any]:
    """Per workload and method: the metrics' means over the cuts, and the goals of issue 17.

    Goals (for the first model method): mean cov90 >= 0.85, mean cov50 in [0.40, 0.60], mean MAE
    no worse than ``last`` and ``pow3``, mean AUC at least ``last``'s.
    """
    out: dict[str, Any] = {}
    for workload in dict.fromkeys(r["workload"] for r in results):
        means: dict[str, dict[str, float]] = {}
        for method in methods:
            rows = [r for r in results if r["workload"] == workload and r["method"] == method]
            means[method] = {
                key: float(np.nanmean([r[key] for r in rows]))
                for key in ("mae", "cov50", "cov90", "lpd", "auc")
            }
        model = next((m for m in methods if m in MODELS), None)
        goals = _goals(means, model) if model is not None else {}
        out[workload] = {"means": means, "goals": {"model": model, **goals}}
        recal = {m: _goals(means, m) for m in methods if m in RECAL}
        if recal:  # the same goals for each recalibrated model
            out[workload]["recal_goals"] = recal
    return out


def _goals(means: dict[str, dict[str, float]], method: str) -> dict[str, bool]:
    """Issue 17's goals for one method's means."""
    m = means[method]
    goals = {"cov90 >= 0.85": m["cov90"] >= 0.85, "cov50 in 0.40-0.60": 0.40 <= m["cov50"] <= 0.60}
    for base in ("last", "pow3"):
        if base in means:
            goals[f"mae <= {base}"] = m["mae"] <= means[base]["mae"]
    if "last" in means:
        goals["auc >= last"] = m["auc"] >= means["last"]["auc"] - 1e-12
    return goals


def table(report: dict[str, Any]) -> str:
    """The results as text: every cut, then the means per workload, the goals and the cost."""
    header = ["workload", "cut", "n", "method", "MAE", "cov50", "cov90", "LPD", "AUC", "unknown"]
    rows = [header]
    for r in report["results"]:
        rows.append(
            [
                r["workload"],
                f"{r['fraction']:.0%}",
                str(r["n"]),
                r["method"],
                f"{r['mae']:.4f}",
                f"{r['cov50']:.2f}",
                f"{r['cov90']:.2f}",
                f"{r['lpd']:.2f}",
                "n/a" if math.isnan(r["auc"]) else f"{r['auc']:.3f}",
                str(r["unknown"]),
            ]
        )
    for workload, part in report["summary"].items():
        for method, m in part["means"].items():
            rows.append(
                [
                    workload,
                    "mean",
                    "",
                    method,
                    f"{m['mae']:.4f}",
                    f"{m['cov50']:.2f}",
                    f"{m['cov90']:.2f}",
                    f"{m['lpd']:.2f}",
                    f"{m['auc']:.3f}",
                    "",
                ]
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    for name, w in report["workloads"].items():
        lines.append(
            f"{name}: {w['curves']} curves x {w['epochs']} epochs ({w['mode']}, bounds "
            f"{w['bounds']}), top-10% threshold {w['threshold']:.4f} ({w['positives']} reach it)"
        )
    for name, part in report["summary"].items():
        goals = part["goals"]
        if goals.get("model"):
            met = [f"{k}: {'yes' if v else 'NO'}" for k, v in goals.items() if k != "model"]
            lines.append(f"goals, {goals['model']} on {name}: " + ", ".join(met))
        for method, recal in part.get("recal_goals", {}).items():
            met = [f"{k}: {'yes' if v else 'NO'}" for k, v in recal.items()]
            lines.append(f"goals, {method} on {name}: " + ", ".join(met))
    cost = report["cost"]
    for model, c in cost.items():
        lines.append(
            f"{model}: {c['fits']} fits, {c['cpu_seconds']:.1f} CPU-s "
            f"({c['seconds']:.1f} s wall), "
            f"{c['fits_per_cpu_second']:.1f} fits per CPU-second"
        )
    if "amortised" in cost and "domhan" in cost:
        ratio = cost["amortised"]["fits_per_cpu_second"] / cost["domhan"]["fits_per_cpu_second"]
        lines.append(f"amortised / domhan fits per CPU-second: {ratio:.0f}x")
    lines.append(f"total {report['seconds']:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the evaluation; print the table and one JSON line."""
    from hpctune.curves import Budget

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI smoke run")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--max-curves", type=int, default=None, help="curves per trace")
    parser.add_argument("--workers", type=int, default=2, help="processes of the domhan fits")
    parser.add_argument("--budget", choices=["hyperdrive", "domhan"], default="hyperdrive")
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated, of {', '.join(METHODS)} (the first model is judged)",
    )
    parser.add_argument(
        "--prior-count",
        type=float,
        default=None,
        help="pseudo-count of the +recal methods (default: hpctune.curves.calibration's)",
    )
    parser.add_argument(
        "--trace", action="append", type=Path, default=None, help="a trace (default: all)"
    )
    args = parser.parse_args(argv)
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown methods {unknown}; valid: {', '.join(METHODS)}")
    budget: Any = args.budget
    max_curves = args.max_curves
    workers = args.workers
    if args.quick:  # small budget, few curves, no pool to spawn for every cut
        budget = Budget(nwalkers=32, nsamples=100, burn_in=50)
        max_curves = QUICK_CURVES if max_curves is None else max_curves
        workers = 0
    traces = None if args.trace is None else {p.stem: p for p in args.trace}
    report = run(max_curves, budget, workers, FRACTIONS, methods, traces, args.prior_count)
    if not args.json:
        print(table(report))
    print(json.dumps(report, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
