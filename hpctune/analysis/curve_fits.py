"""``hpctune fit-curves``: fit learning curves of a trace or a study and report the final value.

For each selected curve (a configuration of a trace, a trial of a study) the first N observed
points are fitted (default: all observed) and the predictive distribution of the metric at the
last step (``x_max``: the trace's epochs, the study's ``max_steps``) is summarised: median,
5/25/75/95 % quantiles and P(final at least as good as the threshold) ("at least as good":
``>=`` for mode max, ``<=`` for mode min). Seeds are :func:`~hpctune.curves.service.curve_fit_seed`
of (seed, curve id, N), with the study's seed for a study, so a study's fits reproduce the
controller's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.curves.fitter import CurveFitter, CurveRequest, FitOptions
from hpctune.curves.predict import CurvePrediction
from hpctune.curves.service import curve_fit_seed
from hpctune.errors import UsageError
from hpctune.journal.reader import read_study
from hpctune.simulator.traces import Trace
from hpctune.study.states import Mode

#: Quantile levels reported per curve, with their JSON keys.
REPORTED = (("q05", 0.05), ("q25", 0.25), ("median", 0.5), ("q75", 0.75), ("q95", 0.95))


@dataclass(frozen=True)
class CurveSet:
    """Curves to fit: ids, observed values (steps 1..len), horizon and scale.

    Attributes:
        kind: ``"trace"`` or ``"study"``.
        path: Where they come from.
        ids: Configuration index (trace) or trial id (study) of each curve.
        curves: Observed values of each curve at steps 1..len (finite prefix).
        x_max: The last step (trace epochs, study ``max_steps``).
        bounds: ``(low, high)`` of the metric.
        mode: ``"max"`` or ``"min"``.
        metric: The metric's name.
        seed: Seed base of the fits.
    """

    kind: str
    path: Path
    ids: tuple[int, ...]
    curves: tuple[np.ndarray, ...]
    x_max: int
    bounds: tuple[float, float]
    mode: Mode
    metric: str
    seed: int

    @property
    def sign(self) -> float:
        """+1 for max, -1 for min."""
        return 1.0 if self.mode == "max" else -1.0

    def top_threshold(self, share: float = 0.1) -> float:
        """The value the best ``share`` of curves reach (by their best observed value)."""
        best = [self.sign * float(np.max(self.sign * c)) for c in self.curves if len(c)]
        if not best:
            raise UsageError(f"{self.path}: no curve has a finite value; nothing to fit")
        q = 1.0 - share if self.mode == "max" else share
        return float(np.quantile(best, q))


def load_curves(
    path: Path, *, bounds: tuple[float, float] | None = None, seed: int | None = None
) -> CurveSet:
    """Read the curves of a trace file or a study directory.

    Raises:
        UsageError: ``path`` is neither, or ``bounds`` are invalid.
        TraceError: A malformed trace file.
    """
    path = Path(path)
    if path.is_dir():
        if not (path / "journal.zarr").exists():
            raise UsageError(
                f"{path} is not a study directory (no journal.zarr in it) nor a trace file"
            )
        study = read_study(path)
        ids, curves = [], []
        for trial in study.trials:
            values = np.asarray(study.curve(trial.trial_id).values, dtype=float)
            ids.append(trial.trial_id)
            curves.append(_finite_prefix(values))
        spec_bounds = study.spec.get("metric_bounds", (0.0, 1.0))
        kind, x_max, mode, metric = "study", int(study.spec["max_steps"]), study.mode, study.metric
        base_seed = int(study.spec.get("seed", 0))
        default_bounds = (float(spec_bounds[0]), float(spec_bounds[1]))
    elif path.exists():
        trace = Trace.load(path)
        ids = list(range(trace.num_configs))
        curves = [_finite_prefix(row) for row in trace.curves]
        kind, x_max, mode, metric = "trace", trace.num_epochs, trace.mode, trace.metric
        base_seed = 0
        default_bounds = trace.metric_bounds or (0.0, 1.0)
    else:
        raise UsageError(f"{path} does not exist; give a trace file (.h5) or a study directory")
    scale = default_bounds if bounds is None else (float(bounds[0]), float(bounds[1]))
    if not (math.isfinite(scale[0]) and math.isfinite(scale[1]) and scale[0] < scale[1]):
        raise UsageError(f"--bounds must be two finite numbers LOW < HIGH, but got {scale}")
    return CurveSet(
        kind=kind,
        path=path,
        ids=tuple(ids),
        curves=tuple(curves),
        x_max=x_max,
        bounds=scale,
        mode=mode,
        metric=metric,
        seed=base_seed if seed is None else seed,
    )


def _finite_prefix(values: np.ndarray) -> np.ndarray:
    bad = np.flatnonzero(~np.isfinite(values))
    return np.asarray(values[: bad[0]] if len(bad) else values, dtype=float)


def fit_curves(
    curves: CurveSet,
    *,
    trials: Sequence[int] = (),
    at_epoch: int | None = None,
    threshold: float | None = None,
    workers: int = 0,
    budget: str = "hyperdrive",
    model: str = "amortised",
    on_fitted: Callable[[int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[int, CurvePrediction]]:
    """Fit the selected curves; return the report rows and the predictions by id.

    ``on_fitted(n)`` is called after every ``n`` curves fitted (a progress bar).

    Raises:
        UsageError: An unknown id, ``at_epoch`` < 1, ``workers`` < 0, no curve selected.
    """
    if at_epoch is not None and at_epoch < 1:
        raise UsageError(f"--at-epoch must be >= 1, but got {at_epoch}")
    if workers < 0:
        raise UsageError(f"--workers must be >= 0, but got {workers}")
    known = dict(zip(curves.ids, curves.curves, strict=True))
    missing = [t for t in trials if t not in known]
    if missing:
        raise UsageError(
            f"no curve {missing[0]} in {curves.path}: ids run from {min(curves.ids)} to "
            f"{max(curves.ids)}"
            if curves.ids
            else f"{curves.path} holds no curves"
        )
    selected = list(dict.fromkeys(trials)) if trials else list(curves.ids)
    if not selected:
        raise UsageError(f"{curves.path} holds no curves to fit")
    thr = round(curves.top_threshold(), 6) if threshold is None else float(threshold)
    requests = []
    for cid in selected:
        y = known[cid] if at_epoch is None else known[cid][:at_epoch]
        requests.append(
            CurveRequest(
                key=cid,
                y=tuple(y),
                x_max=curves.x_max,
                bounds=curves.bounds,
                mode=curves.mode,
                seed=curve_fit_seed(curves.seed, cid, len(y)),
            )
        )
    fitter = CurveFitter(workers=workers, options=FitOptions(model=model, budget=budget))
    predictions = {int(k): v for k, v in fitter.fit(requests, on_fitted).items()}  # type: ignore[call-overload]
    rows = [
        _row(curves, request, predictions[int(request.key)], thr)  # type: ignore[call-overload]
        for request in requests
    ]
    return rows, predictions


def _row(
    curves: CurveSet, request: CurveRequest, prediction: CurvePrediction, threshold: float
) -> dict[str, Any]:
    cid = int(request.key)  # type: ignore[call-overload]
    full = dict(zip(curves.ids, curves.curves, strict=True))[cid]
    n = len(request.y)
    row: dict[str, Any] = {
        "trial": cid,
        "n": n,
        "x_max": curves.x_max,
        "metric": curves.metric,
        "mode": curves.mode,
        "bounds": list(curves.bounds),
        "last": _num(request.y[-1]) if n else None,
        "final": _num(full[curves.x_max - 1]) if len(full) >= curves.x_max else None,
        "unknown": prediction.unknown,
        "reason": prediction.reason,
        "threshold": threshold,
        "seed": request.seed,
    }
    if prediction.unknown or prediction.horizon == 0:
        row.update({key: None for key, _ in REPORTED})
        row["p_threshold"] = None
    else:
        q = prediction.quantiles([level for _, level in REPORTED])[-1]
        row.update({key: _num(v) for (key, _), v in zip(REPORTED, q, strict=True)})
        row["p_threshold"] = _num(prediction.prob_final_at_least(threshold))
    return row


def _num(value: float) -> float | None:
    value = float(value)
    return round(value, 6) if math.isfinite(value) else None


def format_table(curves: CurveSet, rows: list[dict[str, Any]]) -> str:
    """The text report: one line per curve."""
    relation = ">=" if curves.mode == "max" else "<="
    threshold = rows[0]["threshold"] if rows else math.nan
    lines = [
        f"{curves.kind} {curves.path}: {curves.metric} ({curves.mode}), bounds "
        f"{list(curves.bounds)}, predicted at step {curves.x_max}; threshold {threshold:.6g}"
    ]
    header = ["trial", "n", "last", "median", "q05", "q25", "q75", "q95"]
    header += [f"P(final {relation} thr)", "final"]
    table = [header]
    notes = []
    for row in rows:
        cells = [str(row["trial"]), str(row["n"]), _fmt(row["last"])]
        if row["median"] is None:
            cells += ["unknown", "-", "-", "-", "-", "-"]
            notes.append(f"trial {row['trial']}: {row['reason'] or 'no step left to predict'}")
        else:
            cells += [_fmt(row[k]) for k in ("median", "q05", "q25", "q75", "q95")]
            cells.append(_fmt(row["p_threshold"], 3))
        cells.append(_fmt(row["final"]))
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join([*lines, *(f"unknown {note}" for note in notes)])


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def plot_curves(
    curves: CurveSet,
    rows: list[dict[str, Any]],
    predictions: dict[int, CurvePrediction],
    out: Path,
) -> Path:
    """Draw one panel per curve: observed points, posterior median, 50/90 % bands, threshold.

    Raises:
        UsageError: matplotlib is not installed.
    """
    from hpctune.plotting import pyplot

    plt = pyplot()
    full = dict(zip(curves.ids, curves.curves, strict=True))
    cols = min(4, len(rows))
    nrows = math.ceil(len(rows) / cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(3.6 * cols, 2.6 * nrows), squeeze=False, sharex=True
    )
    for ax in axes.ravel()[len(rows) :]:
        ax.set_visible(False)
    for ax, row in zip(axes.ravel(), rows, strict=False):
        y = full[row["trial"]]
        n = row["n"]
        ax.plot(np.arange(1, n + 1), y[:n], "o", ms=3, color="C0", label="fitted")
        if len(y) > n:
            ax.plot(np.arange(n + 1, len(y) + 1), y[n:], "x", ms=3, color="0.6", label="hidden")
        prediction = predictions[row["trial"]]
        if not prediction.unknown and prediction.horizon:
            q = prediction.quantiles((0.05, 0.25, 0.5, 0.75, 0.95))
            x = prediction.epochs
            ax.fill_between(x, q[:, 0], q[:, 4], color="C1", alpha=0.2, lw=0, label="90%")
            ax.fill_between(x, q[:, 1], q[:, 3], color="C1", alpha=0.4, lw=0, label="50%")
            ax.plot(x, q[:, 2], color="C1", lw=1.5, label="median")
        ax.axhline(row["threshold"], color="C3", ls="--", lw=1, label="threshold")
        title = f"trial {row['trial']} (n={n})"
        if row["p_threshold"] is not None:
            title += f"  P={row['p_threshold']:.2f}"
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=8)
    axes[0][0].legend(fontsize=7, loc="best")
    fig.supxlabel("step")
    fig.supylabel(curves.metric)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
