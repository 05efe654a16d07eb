"""The joint curve model: one network call predicts every trial of a study, and untried ones.

FT-PFN's method (Rakotoarison et al., ICML 2024, the in-context model of ifBO) in a form small
enough to ship and to retrain on two cores: the network is trained once on synthetic studies
(:mod:`.joint_prior`, curves whose shape depends smoothly on the hyperparameters) and, given the
whole study so far (every trial's hyperparameters and partial curve) and configurations not yet
tried, returns each one's predictive quantiles of ``y(m)`` at every later step in one call. A
trial is predicted from its own points *and* from the curves of trials with similar
hyperparameters: one attention layer over the study, whose keys are the hyperparameters, so the
model learns in context how far a neighbour's curve says something about this one.

**Input** (:func:`trial_features`, normalised scale ``[0, 1]``, larger is better): per trial,
its observed values averaged into :data:`BINS` bins of ``t / x_max`` with a mask, its last,
first and best value, ``n / x_max``, whether it has any point, a noise estimate and its recent
slope; its hyperparameter coordinates in ``[0, 1]`` (:func:`coordinates`, at most
:data:`MAX_COORDS`) with a mask of those present.

**Network** (:func:`forward`): an encoder of each trial; attention of each trial over the others
(not itself) plus a learnt "no neighbour" slot, keyed by hyperparameters; the mean encoding of
the study; a head that maps these and a query step's features to :data:`~.predict.LEVELS`
quantiles ``base + mu + s z`` with ``z`` increasing by construction (``base``: the last value,
0 for an untried configuration), clipped to ``[0, 1]``.

**Unknown**: a trial whose curve holds a non-finite value, or with no step left, is unknown
(:class:`~.predict.CurvePrediction`'s NaN answers). An untried configuration is predicted from
its neighbours; with no trial in the study its prediction is the prior's.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.curves.families import FloatArray
from hpctune.curves.fit import check_scale, normalise
from hpctune.curves.predict import DECIMALS, LEVELS, CurvePrediction
from hpctune.study.space import (
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    Param,
    ScheduleParam,
    SearchSpace,
)
from hpctune.study.states import Mode

#: Bins of ``t / x_max`` the observed curve is averaged into.
BINS = 16
#: Hyperparameter coordinates the network takes (more are folded in, see :func:`coordinates`).
MAX_COORDS = 12
#: Summary features of a trial's curve.
SUMMARIES = 8
#: Features of one trial.
N_TRIAL = 2 * BINS + SUMMARIES + 2 * MAX_COORDS
#: Features of one query step.
N_QUERY = 3
#: The median's column.
MID = LEVELS.index(0.5)
#: The shipped weights (package data).
WEIGHTS = "joint.npz"

Weights = Mapping[str, FloatArray]


# -- hyperparameter coordinates ----------------------------------------------------------------


def _coords_of(param: Param, name: str, out: list[tuple[str, Param]]) -> None:
    if isinstance(param, ScheduleParam):
        for arg, sub in param.args.items():
            _coords_of(sub, f"{name}.{arg}", out)
    elif not isinstance(param, FixedParam):
        out.append((name, param))


def space_layout(space: SearchSpace) -> tuple[tuple[str, Param], ...]:
    """The coordinates of ``space``: (dotted name, parameter) of each searched value."""
    coords: list[tuple[str, Param]] = []
    for name, param in space.params.items():
        _coords_of(param, name, coords)
    return tuple(coords)


def _lookup(config: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _scaled(param: Param, value: Any) -> float:
    """``value`` of ``param`` in ``[0, 1]`` (NaN if it cannot be placed)."""
    if isinstance(param, FloatParam | IntParam):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return math.nan
        low, high, x = float(param.low), float(param.high), float(value)
        if param.log:
            if x <= 0 or low <= 0:
                return math.nan
            low, high, x = math.log(low), math.log(high), math.log(x)
        return 0.5 if high == low else min(max((x - low) / (high - low), 0.0), 1.0)
    if isinstance(param, CategoricalParam):
        choices = param.choices
        for i, choice in enumerate(choices):
            if choice == value and type(choice) is type(value):
                return i / max(len(choices) - 1, 1)
        key = json.dumps(value, sort_keys=True)
        keys = [json.dumps(c, sort_keys=True) for c in choices]
        if key not in keys:
            return math.nan
        return keys.index(key) / max(len(choices) - 1, 1)
    return math.nan


def coordinates(
    space: SearchSpace | None,
    configs: Sequence[Mapping[str, Any]],
    layout: Sequence[tuple[str, Param]] | None = None,
) -> FloatArray:
    """Each configuration's coordinates in ``[0, 1]``: (len(configs), :data:`MAX_COORDS`), NaN
    where a parameter is absent (conditional) or cannot be placed.

    Numbers are scaled over their range (log scale where the space says so), a categorical's
    choices are spread evenly over ``[0, 1]`` in the space's order, fixed values are no
    coordinate. Beyond :data:`MAX_COORDS` coordinates the extra ones are averaged into the last.
    Without a space, the numeric values are ranked over ``configs``. ``layout``:
    :func:`space_layout` of ``space``, computed once by a caller that asks often.
    """
    out = np.full((len(configs), MAX_COORDS), np.nan)
    if not configs:
        return out
    columns: list[FloatArray] = []
    if space is not None:
        for name, param in layout if layout is not None else space_layout(space):
            col = np.full(len(configs), np.nan)
            for i, config in enumerate(configs):
                found, value = _lookup(config, name)
                if found:
                    col[i] = _scaled(param, value)
            columns.append(col)
    else:
        names = sorted({k for c in configs for k, v in c.items() if _is_number(v)})
        for name in names:
            raw = np.array(
                [float(c[name]) if _is_number(c.get(name)) else np.nan for c in configs]
            )
            finite = np.isfinite(raw)
            col = np.full(len(configs), np.nan)
            if finite.sum() > 1:
                ranks = raw[finite].argsort().argsort()
                col[finite] = ranks / (finite.sum() - 1)
            columns.append(col)
    if len(columns) > MAX_COORDS:
        extra = np.stack(columns[MAX_COORDS - 1 :], axis=1)
        with np.errstate(all="ignore"):
            folded = np.nanmean(extra, axis=1) if np.isfinite(extra).any() else extra[:, 0]
        columns = [*columns[: MAX_COORDS - 1], folded]
    for j, col in enumerate(columns):
        out[:, j] = col
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- features ----------------------------------------------------------------------------------


def trial_features(u: FloatArray, n: np.ndarray, x_max: int, coords: FloatArray) -> FloatArray:
    """The network's input (B, :data:`N_TRIAL`) for rows ``u`` (B, T >= max n), valid up to
    each row's ``n`` (0 for an untried configuration), and coordinates (B, :data:`MAX_COORDS`).

    Values must already be normalised and clipped to ``[0, 1]``.
    """
    b = u.shape[0]
    width = max(u.shape[1], 1)
    t = np.arange(width)[None, :]
    seen = t < n[:, None]
    vals = np.where(seen, u[:, :width] if u.shape[1] else np.zeros((b, 1)), 0.0)
    index = np.clip(np.floor((t + 0.5) / x_max * BINS).astype(int), 0, BINS - 1)
    index = np.broadcast_to(index, (b, width))
    sums = np.zeros((b, BINS))
    counts = np.zeros((b, BINS))
    rows = np.broadcast_to(np.arange(b)[:, None], (b, width))
    np.add.at(sums, (rows[seen], index[seen]), vals[seen])
    np.add.at(counts, (rows[seen], index[seen]), 1.0)
    binned = sums / np.maximum(counts, 1.0)
    mask = (counts > 0).astype(float)
    has = n > 0
    last_i = np.maximum(n - 1, 0)
    r = np.arange(b)
    last = np.where(has, vals[r, last_i], 0.0)
    first = np.where(has, vals[:, 0], 0.0)
    best = np.where(has, np.where(seen, vals, -np.inf).max(axis=1), 0.0)
    d2 = np.abs(vals[:, 2:] - 2 * vals[:, 1:-1] + vals[:, :-2]) if width >= 3 else None
    if d2 is not None:
        ok = seen[:, 2:]
        masked = np.where(ok, d2, np.inf)
        counts2 = ok.sum(axis=1)
        ordered = np.sort(masked, axis=1)
        mid = np.maximum(counts2 - 1, 0) // 2
        noise = np.where(counts2 > 0, ordered[np.arange(b), mid], 0.0)
    else:
        noise = np.zeros(b)
    k = np.maximum(np.ceil(n / 3), 1).astype(int)
    back = vals[r, np.maximum(n - 1 - k, 0)]
    slope = np.where(n >= 2, (last - back) / np.maximum(k, 1) * x_max / 10.0, 0.0)
    summaries = np.stack(
        [
            last,
            first,
            best,
            n / x_max,
            has.astype(float),
            np.log(noise + 1e-3),
            np.clip(slope, -5.0, 5.0),
            best - last,
        ],
        axis=1,
    )
    present = np.isfinite(coords)
    hp = np.where(present, coords, 0.0)
    return np.concatenate([binned, mask, summaries, hp, present.astype(float)], axis=1)


def query_features(n: np.ndarray, x_max: int, m: np.ndarray) -> FloatArray:
    """Features (B, Q, :data:`N_QUERY`) of query steps ``m`` (B, Q) after ``n`` of ``x_max``."""
    nn = np.broadcast_to(n[:, None].astype(float), m.shape)
    mf = m.astype(float)
    return np.stack([mf / x_max, (mf - nn) / x_max, nn / x_max], axis=-1)


# -- the network -------------------------------------------------------------------------------


def _relu(x: FloatArray) -> FloatArray:
    return np.maximum(x, 0.0)


def _softplus(x: FloatArray) -> FloatArray:
    out: FloatArray = np.logaddexp(0.0, x)
    return out


def _linear(w: Weights, name: str, x: FloatArray) -> FloatArray:
    out: FloatArray = x @ w[f"{name}.weight"].T + w[f"{name}.bias"]
    return out


def encode(w: Weights, feats: FloatArray, group: np.ndarray) -> FloatArray:
    """The study-aware representation (B, H) of each trial: its encoding, its attention over the
    other trials of its ``group`` (a study id per row) and its study's mean encoding."""
    x = (feats - w["x_mean"]) / w["x_sd"]
    e = _relu(_linear(w, "enc2", _relu(_linear(w, "enc1", x))))
    hp = feats[:, -2 * MAX_COORDS :]
    keys_in = np.concatenate([hp, hp[:, :MAX_COORDS] ** 2], axis=1)
    q = _linear(w, "query", keys_in)
    k = _linear(w, "key", keys_in)
    v = _linear(w, "value", e)
    heads = int(w["heads"][0])
    dim = q.shape[1] // heads
    b = feats.shape[0]
    same = group[:, None] == group[None, :]
    np.fill_diagonal(same, False)
    parts = []
    for h in range(heads):
        sl = slice(h * dim, (h + 1) * dim)
        logits = q[:, sl] @ k[:, sl].T / math.sqrt(dim)
        logits = np.where(same, logits, -np.inf)
        null = np.full((b, 1), float(w["null_logit"][h]))
        full = np.concatenate([logits, null], axis=1)
        top = full.max(axis=1, keepdims=True)
        p = np.exp(full - top)
        p /= p.sum(axis=1, keepdims=True)
        parts.append(p[:, :-1] @ v[:, sl] + p[:, -1:] * w["null_value"][None, sl])
    att = np.concatenate(parts, axis=1)
    _, inverse, sizes = np.unique(group, return_inverse=True, return_counts=True)
    pooled = np.zeros((sizes.size, e.shape[1]))
    np.add.at(pooled, inverse, e)
    pooled = pooled[inverse] / sizes[inverse, None]
    out: FloatArray = _relu(_linear(w, "mix", np.concatenate([e, att, pooled], axis=1)))
    return out


def head(w: Weights, rep: FloatArray, qf: FloatArray, base: FloatArray) -> FloatArray:
    """Quantiles (B, Q, len(LEVELS)) on the normalised scale, before clipping."""
    b, nq, _ = qf.shape
    z_in = np.concatenate([np.repeat(rep[:, None, :], nq, axis=1), qf], axis=-1)
    hidden = _relu(_linear(w, "head1", z_in.reshape(b * nq, -1)))
    hidden = _relu(_linear(w, "head2", hidden))
    raw = _linear(w, "out", hidden).reshape(b, nq, -1)
    mu = raw[..., 0]
    scale = np.exp(np.clip(raw[..., 1], -9.0, 2.0))
    steps = _softplus(raw[..., 2:])  # len(LEVELS) - 1 gaps
    up = np.cumsum(steps[..., MID:], axis=-1)
    down = np.cumsum(steps[..., :MID][..., ::-1], axis=-1)[..., ::-1]
    z = np.concatenate([-down, np.zeros((b, nq, 1)), up], axis=-1)
    out: FloatArray = base[:, None, None] + mu[..., None] + scale[..., None] * z
    return out


@functools.cache
def _shipped() -> dict[str, FloatArray]:
    ref = resources.files("hpctune.curves") / "data" / WEIGHTS
    with resources.as_file(ref) as path, np.load(path) as data:
        return {k: np.asarray(data[k], dtype=np.float64) for k in data.files}


def load_weights(path: str | Path | None = None) -> dict[str, FloatArray]:
    """The network's weights: the shipped ones, or those of ``path`` (an ``.npz``)."""
    if path is None:
        return _shipped()
    with np.load(path) as data:
        return {k: np.asarray(data[k], dtype=np.float64) for k in data.files}


# -- predicting a study ------------------------------------------------------------------------


@dataclass(frozen=True)
class StudyCurves:
    """The study the joint model conditions on, on the raw scale.

    Attributes:
        curves: Each trial's values at steps 1..n (a list of 1-D arrays; NaN-free).
        coords: Each trial's coordinates (:func:`coordinates`), (len(curves), MAX_COORDS).
        x_max: The last step.
        bounds: ``(low, high)`` of the metric.
        mode: ``"max"`` or ``"min"``.
    """

    curves: Sequence[FloatArray]
    coords: FloatArray
    x_max: int
    bounds: tuple[float, float]
    mode: Mode


def _normalised(study: StudyCurves) -> tuple[FloatArray, np.ndarray]:
    width = max([len(c) for c in study.curves] + [1])
    u = np.zeros((len(study.curves), width))
    n = np.zeros(len(study.curves), dtype=int)
    for i, c in enumerate(study.curves):
        c = np.asarray(c, dtype=float)[: study.x_max]
        if c.size:
            u[i, : c.size] = np.clip(normalise(c, study.bounds, study.mode), 0.0, 1.0)
        n[i] = c.size
    return u, n


def predict_study(
    study: StudyCurves,
    candidates: FloatArray | None = None,
    *,
    weights: Weights | None = None,
) -> tuple[FloatArray, FloatArray | None]:
    """Predictive quantiles of every trial and candidate at every step, in one call.

    Args:
        study: The trials and their curves.
        candidates: Coordinates of configurations not tried yet (C, MAX_COORDS), or ``None``.
        weights: The network (default: the shipped one).

    Returns:
        ``(trials, cands)``: normalised quantiles (larger is better, clipped to ``[0, 1]``) of
        shape (len(curves), x_max, len(LEVELS)) for steps 1..x_max (rows up to a trial's ``n``
        are its observed values, repeated across levels), and (C, x_max, len(LEVELS)) for the
        candidates (``None`` without). A trial with a non-finite value gets NaN rows.
    """
    w = weights if weights is not None else load_weights()
    check_scale(study.bounds, study.mode)
    x_max = int(study.x_max)
    u, n = _normalised(study)
    bad = ~np.all(np.isfinite(u), axis=1)
    u = np.nan_to_num(u, nan=0.0)
    coords = np.asarray(study.coords, dtype=float).reshape(len(study.curves), MAX_COORDS)
    c = 0 if candidates is None else len(candidates)
    if c:
        cand = np.asarray(candidates, dtype=float).reshape(c, MAX_COORDS)
        u = np.concatenate([u, np.zeros((c, u.shape[1]))], axis=0)
        n = np.concatenate([n, np.zeros(c, dtype=int)])
        coords = np.concatenate([coords, cand], axis=0)
    feats = trial_features(u, n, x_max, coords)
    rep = encode(w, feats, np.zeros(len(n), dtype=int))
    m = np.broadcast_to(np.arange(1, x_max + 1)[None, :], (len(n), x_max))
    base = np.where(n > 0, u[np.arange(len(n)), np.maximum(n - 1, 0)], 0.0)
    q = np.clip(head(w, rep, query_features(n, x_max, m), base), 0.0, 1.0)
    q = np.maximum.accumulate(q, axis=-1)
    observed = m <= n[:, None]
    if observed.any():
        rows, cols = np.nonzero(observed)
        q[rows, cols, :] = u[rows, cols][:, None]
    t = len(study.curves)
    trials = q[:t]
    trials[bad[:t]] = np.nan
    return trials, (q[t:] if c else None)


def prediction_of(
    quantiles: FloatArray, n: int, x_max: int, bounds: tuple[float, float], mode: Mode
) -> CurvePrediction:
    """A :class:`~.predict.CurvePrediction` from one row of :func:`predict_study`'s output."""
    if n >= x_max:
        return CurvePrediction.unknown_result(n, x_max, bounds, mode, "no step left")
    future = quantiles[n:x_max]
    if not np.all(np.isfinite(future)):
        return CurvePrediction.unknown_result(n, x_max, bounds, mode, "non-finite values")
    return CurvePrediction(
        n=n,
        x_max=x_max,
        bounds=bounds,
        mode=mode,
        u_quantiles=np.round(future, DECIMALS),
        sigma=float(np.round((future[0, -5] - future[0, 4]) / 3.29, 7)),
        families=("joint",),
    )
