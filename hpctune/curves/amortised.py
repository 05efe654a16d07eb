"""The amortised curve model: a small network maps an observed curve to predictive quantiles.

LC-PFN's method (Adriaensen et al., NeurIPS 2023; REFERENCE.md §6.2): instead of sampling a
posterior for every curve (Domhan et al.'s MCMC, :mod:`.fit`), a network trained once on curves
drawn from a prior (:mod:`.prior`) answers "what will y(m) be, given y(1..n)" in one forward pass.
hpctune's network is a multilayer perceptron, not LC-PFN's transformer, small enough to ship
(:data:`WEIGHTS`, about 300 kB) and to retrain in well under an hour on two cores
(:mod:`.training`); inference is plain NumPy, many curves at once.

**Input** (:func:`features`, on the normalised scale, values clipped to ``[0, 1]``): the curve
centred on its last value ``c`` and divided by a scale ``s`` (the range of its last third, at
least a tenth of its whole range and 0.003), averaged into :data:`BINS` bins of the horizon's
fraction ``t / x_max`` with a mask of observed bins, its last :data:`LAST` values, and a few
summaries (levels, ranges, noise, slope, ``n / x_max``, the horizon).

**Output** (:func:`forward`): for each query epoch ``m`` the predictive quantiles of ``y(m)``
(noise included) at :data:`~.predict.LEVELS`, as ``c + s z`` with ``z`` increasing by
construction (softplus steps away from the median), clipped to ``[0, 1]``: a bounded metric never
gets a quantile outside its bounds (the quantiles of the clipped variable are the clipped
quantiles). Queries are :data:`QUERIES` epochs spread over ``n+1..x_max``; the other epochs'
quantiles are interpolated linearly.

**Unknown** (as :func:`~.fit.fit_curve`): fewer than 3 points, a non-finite value, or no epoch
left. Unlike Domhan's model it predicts a constant curve (flat so far).

As a curve model (:class:`~.curve_model.CurveModel`, ``[curves] model = "amortised"``, the
default): :class:`AmortisedModel`.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hpctune.curves.families import FloatArray
from hpctune.curves.fit import MAX_HORIZON, MIN_POINTS, check_scale, degenerate, normalise
from hpctune.curves.fitter import unknown_prediction
from hpctune.curves.predict import DECIMALS, LEVELS, CurvePrediction
from hpctune.study.states import Mode

if TYPE_CHECKING:
    from hpctune.curves.fitter import CurveRequest, FitOptions

logger = logging.getLogger(__name__)

#: Bins of the horizon fraction t / x_max the observed curve is averaged into.
BINS = 32
#: Last observed values given to the network one by one.
LAST = 5
#: Summary features (see :func:`features`).
SUMMARIES = 12
#: Features of one curve.
N_FEATURES = 2 * BINS + 2 * LAST + SUMMARIES
#: Features of one query epoch.
N_QUERY = 4
#: Query epochs per curve at inference (the rest are interpolated).
QUERIES = 24
#: Horizons beyond this are treated as this one in the features (the prior's largest is 200).
HORIZON_CAP = 400.0
#: The median's column in the network's output.
MID = LEVELS.index(0.5)
#: The shipped weights (package data).
WEIGHTS = "amortised.npz"
Z_CLIP = 30.0


def scales(u: FloatArray, n: np.ndarray) -> tuple[FloatArray, FloatArray]:
    """Centre ``c`` (last value) and scale ``s`` of each row's first ``n`` values.

    ``u`` is (B, T) with NaN after each row's ``n``; ``s`` is the range of the last third (at
    least 3 points), at least a tenth of the whole observed range and 0.003.
    """
    rows = np.arange(u.shape[0])
    t = np.arange(u.shape[1])[None, :]
    seen = t < n[:, None]
    c = u[rows, n - 1]
    k = np.maximum(3, np.ceil(n / 3)).astype(int)
    recent = seen & (t >= (n - k)[:, None])
    big, small = np.where(seen, u, -np.inf), np.where(seen, u, np.inf)
    whole = big.max(axis=1) - small.min(axis=1)
    late = np.where(recent, u, -np.inf).max(axis=1) - np.where(recent, u, np.inf).min(axis=1)
    s = np.maximum(np.maximum(late, 0.1 * whole), 0.003)
    return c, s


def features(u: FloatArray, n: np.ndarray, x_max: np.ndarray) -> FloatArray:
    """The network's input (B, :data:`N_FEATURES`) for rows ``u`` (B, T), NaN after ``n``.

    Values must already be normalised and clipped to [0, 1]; ``3 <= n < x_max``.
    """
    b, width = u.shape
    rows = np.arange(b)
    t = np.arange(width)[None, :]
    seen = t < n[:, None]
    c, s = scales(u, n)
    z = np.clip((np.where(seen, u, 0.0) - c[:, None]) / s[:, None], -Z_CLIP, Z_CLIP)
    z = np.where(seen, z, 0.0)
    xm = x_max.astype(float)
    index = np.clip(np.floor((t + 0.5) / xm[:, None] * BINS).astype(int), 0, BINS - 1)
    sums = np.zeros((b, BINS))
    counts = np.zeros((b, BINS))
    flat_rows = np.broadcast_to(rows[:, None], (b, width))[seen]
    np.add.at(sums, (flat_rows, index[seen]), z[seen])
    np.add.at(counts, (flat_rows, index[seen]), 1.0)
    binned = sums / np.maximum(counts, 1.0)
    mask = (counts > 0).astype(float)
    back = np.clip(n[:, None] - 1 - np.arange(LAST)[None, :], 0, None)  # last values, newest first
    last_z = z[rows[:, None], back]
    last_at = (n[:, None] - 1 - back) / xm[:, None]
    seen_u = np.where(seen, u, np.nan)
    diffs = np.diff(seen_u, axis=1)
    noise = np.nanmedian(np.abs(np.diff(diffs, axis=1)), axis=1) / s  # robust 2nd differences
    noise = np.nan_to_num(noise, nan=0.0)
    k = np.maximum(3, np.ceil(n / 3)).astype(int)
    first_recent = u[rows, n - k]
    slope = (c - first_recent) / s / np.maximum(k - 1, 1) * np.minimum(xm, HORIZON_CAP) / 10.0
    whole = np.nanmax(seen_u, axis=1) - np.nanmin(seen_u, axis=1)
    horizon = np.minimum(xm, HORIZON_CAP)
    summaries = np.stack(
        [
            c,
            u[:, 0],
            np.nanmin(seen_u, axis=1),
            np.nanmax(seen_u, axis=1),
            np.log(s),
            np.log(whole + 1e-4),
            np.log(noise + 1e-3),
            np.clip(slope, -Z_CLIP, Z_CLIP),
            n / xm,
            np.log(n),
            np.log(horizon),
            (np.nanmax(seen_u, axis=1) - c) / s,  # how far below its best the curve is now
        ],
        axis=1,
    )
    summaries[:, -1] = np.clip(summaries[:, -1], 0.0, Z_CLIP)
    return np.concatenate([binned, mask, last_z, last_at, summaries], axis=1)


def query_features(n: np.ndarray, x_max: np.ndarray, m: np.ndarray) -> FloatArray:
    """Features (B, Q, :data:`N_QUERY`) of query epochs ``m`` (B, Q) after ``n`` of ``x_max``."""
    nn = n[:, None].astype(float)
    xm = x_max[:, None].astype(float)
    mf = m.astype(float)
    return np.stack(
        [mf / xm, (mf - nn) / xm, np.log(mf / nn), np.minimum((mf - nn) / nn, 10.0)], axis=-1
    )


def query_epochs(n: int, x_max: int, count: int = QUERIES) -> np.ndarray:
    """Up to ``count`` epochs in n+1..x_max: the first few, then evenly spread, and x_max."""
    left = x_max - n
    if left <= count:
        return np.arange(n + 1, x_max + 1)
    head = np.arange(n + 1, n + 5)
    rest = np.linspace(n + 5, x_max, count - 4).round().astype(int)
    return np.unique(np.concatenate([head, rest]))


def _softplus(x: FloatArray) -> FloatArray:
    out: FloatArray = np.logaddexp(0.0, x)
    return out


def monotone(raw: FloatArray) -> FloatArray:
    """Increasing ``z`` quantiles (..., L) from raw outputs: softplus steps from the median."""
    mid = raw[..., MID : MID + 1]
    up = np.cumsum(_softplus(raw[..., MID + 1 :]), axis=-1)
    down = np.cumsum(_softplus(raw[..., :MID][..., ::-1]), axis=-1)[..., ::-1]
    return np.concatenate([mid - down, mid, mid + up], axis=-1)


Weights = Mapping[str, FloatArray]


def forward(weights: Weights, x: FloatArray, q: FloatArray) -> FloatArray:
    """The network: curve features ``x`` (B, F) and query features ``q`` (B, Q, N_QUERY) to
    increasing ``z`` quantiles (B, Q, L). Mirrors :class:`~.training.Net`."""
    h = (x - weights["x_mean"]) / weights["x_sd"]
    h = np.maximum(h @ weights["e1.weight"].T + weights["e1.bias"], 0.0)
    h = np.maximum(h @ weights["e2.weight"].T + weights["e2.bias"], 0.0)
    b, nq, _ = q.shape
    hq = np.concatenate([np.broadcast_to(h[:, None, :], (b, nq, h.shape[1])), q], axis=-1)
    g = np.maximum(hq @ weights["h1.weight"].T + weights["h1.bias"], 0.0)
    g = np.maximum(g @ weights["h2.weight"].T + weights["h2.bias"], 0.0)
    raw = g @ weights["out.weight"].T + weights["out.bias"]
    return monotone(raw)


@functools.lru_cache(maxsize=4)
def load_weights(path: str | None = None) -> dict[str, FloatArray]:
    """The network's weights: the shipped ones, or those of an ``.npz`` file at ``path``."""
    if path is None:
        ref = resources.files("hpctune.curves") / "data" / WEIGHTS
        with resources.as_file(ref) as file, np.load(file) as data:
            return {k: np.asarray(data[k], dtype=np.float64) for k in data.files}
    with np.load(Path(path)) as data:
        return {k: np.asarray(data[k], dtype=np.float64) for k in data.files}


def predict_curves(
    curves: Sequence[Sequence[float]],
    x_max: int | Sequence[int],
    *,
    bounds: tuple[float, float] | Sequence[tuple[float, float]] = (0.0, 1.0),
    mode: Mode | Sequence[Mode] = "max",
    min_points: int = MIN_POINTS,
    weights: Weights | None = None,
) -> list[CurvePrediction]:
    """Predict many curves at once (one vectorised pass per horizon); results in input order.

    Args:
        curves: Observed values at epochs 1..n of each curve (raw scale).
        x_max: Horizon of every curve, or one per curve.
        bounds: ``(low, high)`` of the raw scale, for all or per curve.
        mode: ``"max"`` or ``"min"``, for all or per curve.
        min_points: Fewer points give an unknown prediction (at least 3).
        weights: The network (default: the shipped one).

    Raises:
        ValueError: Invalid bounds, mode, x_max or min_points.
    """
    count = len(curves)
    horizons = [int(x_max)] * count if isinstance(x_max, int) else [int(v) for v in x_max]
    scale_list: list[tuple[float, float]] = (
        [(float(bounds[0]), float(bounds[1]))] * count  # type: ignore[arg-type]
        if isinstance(bounds[0], int | float)
        else [(float(b[0]), float(b[1])) for b in bounds]  # type: ignore[index]
    )
    modes: list[Mode] = [mode] * count if isinstance(mode, str) else list(mode)
    if not len(horizons) == len(scale_list) == len(modes) == count:
        raise ValueError("x_max, bounds and mode must be given once or once per curve")
    if min_points < 3:
        raise ValueError(f"min_points must be >= 3, but got {min_points}")
    net = load_weights() if weights is None else weights
    out: list[CurvePrediction | None] = [None] * count
    groups: dict[int, list[tuple[int, FloatArray]]] = {}
    for i, (values, horizon, scale, how) in enumerate(
        zip(curves, horizons, scale_list, modes, strict=True)
    ):
        low, high = check_scale(scale, how)
        if not 1 <= horizon <= MAX_HORIZON:
            raise ValueError(f"x_max must be in [1, {MAX_HORIZON}], but got {horizon}")
        raw = np.asarray(values, dtype=float).ravel()
        reason = degenerate(raw, horizon, min_points)
        if reason:
            out[i] = CurvePrediction.unknown_result(raw.size, horizon, (low, high), how, reason)
            continue
        u = np.clip(normalise(raw, (low, high), how), 0.0, 1.0)
        groups.setdefault(horizon, []).append((i, u))
    for horizon, members in groups.items():
        for i, pred in zip(
            [i for i, _ in members],
            _predict_group([u for _, u in members], horizon, net),
            strict=True,
        ):
            out[i] = CurvePrediction(
                n=pred[0],
                x_max=horizon,
                bounds=scale_list[i],
                mode=modes[i],
                u_quantiles=pred[1],
                sigma=pred[2],
            )
    return [p for p in out if p is not None]


def _predict_group(
    curves: list[FloatArray], x_max: int, net: Weights
) -> list[tuple[int, FloatArray, float]]:
    """(n, quantiles (x_max - n, L), noise sd) of normalised curves sharing one horizon."""
    b = len(curves)
    n = np.array([c.size for c in curves])
    width = int(n.max())
    u = np.full((b, width), np.nan)
    for i, c in enumerate(curves):
        u[i, : c.size] = c
    xm = np.full(b, x_max)
    x = features(u, n, xm)
    c, s = scales(u, n)
    epochs = [query_epochs(int(k), x_max) for k in n]
    nq = max(len(e) for e in epochs)
    m = np.array([np.pad(e, (0, nq - len(e)), mode="edge") for e in epochs])
    z = forward(net, x, query_features(n, xm, m))
    qs = np.clip(c[:, None, None] + s[:, None, None] * z, 0.0, 1.0)
    results = []
    for i in range(b):
        future = np.arange(n[i] + 1, x_max + 1)
        e = epochs[i]
        table = np.empty((future.size, len(LEVELS)))
        for j in range(len(LEVELS)):
            table[:, j] = np.interp(future, e, qs[i, : len(e), j])
        table = np.maximum.accumulate(np.round(table, DECIMALS), axis=1)
        d2 = np.diff(curves[i], 2)
        noise = float(np.median(np.abs(d2))) / math.sqrt(6.0) if d2.size else math.nan
        results.append((int(n[i]), table, round(noise, 7)))
    return results


class AmortisedModel:
    """The amortised network as a curve model: a whole batch in one pass, in process."""

    name: ClassVar[str] = "amortised"
    min_points: ClassVar[int] = MIN_POINTS
    batched: ClassVar[bool] = True

    def predict(
        self, requests: Sequence[CurveRequest], options: FitOptions
    ) -> list[CurvePrediction]:
        """:func:`predict_curves` on every request; a request it refuses (bounds, mode,
        horizon) gets an unknown prediction, the others are predicted one by one then."""
        try:
            return predict_curves(
                [r.y for r in requests],
                [r.x_max for r in requests],
                bounds=[r.bounds for r in requests],
                mode=[r.mode for r in requests],
                min_points=options.min_points,
            )
        except ValueError:  # one invalid request (bounds, mode, horizon): predict one by one
            out = []
            for r in requests:
                try:
                    out.extend(
                        predict_curves(
                            [r.y],
                            r.x_max,
                            bounds=r.bounds,
                            mode=r.mode,
                            min_points=options.min_points,
                        )
                    )
                except ValueError as exc:
                    logger.warning("curve prediction of %r refused: %s", r.key, exc)
                    out.append(unknown_prediction(r, f"error: ValueError: {exc}"))
            return out
