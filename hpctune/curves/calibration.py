"""In-study recalibration of curve predictions from other trials' curves.

Quantile recalibration (Kuleshov, Fenner and Ermon, ICML 2018): if a model's predictive CDFs F_i
are miscalibrated in the same way on every curve of a study, the probability integral transforms
(PITs) z_i = F_i(y_i) of finished curves are not uniform, and their distribution function R
repairs every other prediction: R(F(y)) is calibrated. Curves that ran to the end lend their
PITs to the curves still running ("predictions that borrow strength from other trials' curves").

**PIT convention** (:func:`pit`): on the normalised scale (larger is better), the probability
the prediction gave to values *at most as good as* the realised one, F(u) = P(U <= u); for mode
"min" that is the probability of a loss at least as large. Between the stored
:data:`~.predict.LEVELS` the quantile function is linear (as in
:meth:`~.predict.CurvePrediction.prob_at_least`). Beyond the outermost stored quantiles the
distribution continues with exponential tails of mass 0.1 % whose density at the edge is the
outer bucket's (buckets at least :data:`TAIL_DQ` wide): the distribution whose log density
``benchmarks/curves_eval.py`` scores. A flat stretch of the quantile function is an atom; a
realised value on it gets the middle of the atom's levels (the mid-distribution function), so
that an atom hit by the realised value counts neither as all below nor as all above.

**Recalibration** (:class:`Recalibration`): from k PITs z_(1) <= ... <= z_(k), the empirical
distribution function through the plotting positions (0, 0), (z_(i), i / (k + 1)), (1, 1),
linear in between (a uniform sample at its expected order statistics i / (k + 1) gives exactly
the identity), mixed with the uniform one with pseudo-count ``prior_count`` c:

    R(p) = (k F_k(p) + c p) / (k + c).

With few PITs R stays close to the identity, with many it follows the data. A *symmetric*
recalibration (``from_pits(..., symmetric=True)``) adds 1 - z for every PIT z: it keeps each
prediction's median and corrects only the spread, with half the variance, which suits a study
with few finished trials (with 8 of them a full recalibration moves medians by noise).

R is strictly increasing, so the calibrated quantile at level L is the original quantile at
level R^-1(L) (:meth:`Recalibration.level`). PITs piling up at 0 and 1 (intervals too narrow)
make R steep at the ends, so R^-1(0.05) < 0.05 and R^-1(0.95) > 0.95: the interval widens; PITs
bunched around 0.5 (intervals too wide) narrow it. Levels beyond the stored ones (0.1 %-99.9 %)
are read from the exponential tails (down to :data:`MIN_LEVEL`), so a prediction can widen
beyond its outermost quantiles without piling several levels onto one value. (Clipping the
levels to the stored ones instead gives the same coverage on ``benchmarks/curves_eval.py`` but
atoms in the tails: leave-one-out mean log predictive density -334 instead of 0.98 on its
diabetes trace, -377 instead of 0.65 on digits-cnn.)

:data:`PRIOR_COUNT` (2) was chosen on ``benchmarks/curves_eval.py`` (the ``amortised+recal``
methods): see its docstring.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import overload

import numpy as np

from hpctune.curves.families import FloatArray
from hpctune.curves.fit import normalise
from hpctune.curves.options import RECALIBRATIONS
from hpctune.curves.predict import DECIMALS, CurvePrediction

#: Pseudo-count of the uniform distribution the PITs' distribution is shrunk towards.
PRIOR_COUNT = 2.0
#: Smallest width of a bucket between stored quantiles for the tails' density (the rounding).
TAIL_DQ = 10.0**-DECIMALS
#: Levels are kept inside [MIN_LEVEL, 1 - MIN_LEVEL] where the tails are extrapolated.
MIN_LEVEL = 1e-9


def _tail_rates(q: FloatArray, levels: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Densities of the outer buckets (lower, upper) of quantile rows ``q`` (..., levels)."""
    low = (levels[1] - levels[0]) / np.maximum(q[..., 1] - q[..., 0], TAIL_DQ)
    high = (levels[-1] - levels[-2]) / np.maximum(q[..., -1] - q[..., -2], TAIL_DQ)
    return low, high


def pit(prediction: CurvePrediction, epoch: int, value: float) -> float:
    """The predictive CDF at a realised value: P(y(epoch) at most as good as ``value``).

    On the normalised scale (larger is better), interpolated linearly between the stored
    quantile levels, with exponential tails beyond the outermost ones and the middle of an atom's
    levels on a flat stretch (see the module docstring). NaN for an unknown prediction or a
    non-finite value.

    Args:
        prediction: A prediction made after ``prediction.n`` epochs.
        epoch: A future epoch, ``n + 1 <= epoch <= x_max``.
        value: The realised value at ``epoch`` in the caller's (raw) units.

    Raises:
        ValueError: ``epoch`` is not a future epoch of the prediction.
    """
    if not prediction.n < epoch <= prediction.x_max:
        raise ValueError(
            f"epoch must lie in {prediction.n + 1}..{prediction.x_max}, but got {epoch}"
        )
    if prediction.unknown or not math.isfinite(value):
        return math.nan
    u = float(normalise(value, prediction.bounds, prediction.mode))
    q = np.maximum.accumulate(np.asarray(prediction.u_quantiles[epoch - prediction.n - 1]))
    lev = np.asarray(prediction.levels, dtype=float)
    below = int(np.searchsorted(q, u, side="left"))  # quantiles < u
    at_most = int(np.searchsorted(q, u, side="right"))  # quantiles <= u
    if at_most > below:  # u equals the quantiles below..at_most-1: middle of their levels
        return float(0.5 * (lev[below] + lev[at_most - 1]))
    low, high = _tail_rates(q, lev)
    if below == 0:
        return float(lev[0] * math.exp(-float(low) / lev[0] * (q[0] - u)))
    if below == lev.size:
        tail = 1.0 - lev[-1]
        return float(1.0 - tail * math.exp(-float(high) / tail * (u - q[-1])))
    q_lo, q_hi = q[below - 1], q[below]
    frac = (u - q_lo) / (q_hi - q_lo)
    return float(lev[below - 1] + frac * (lev[below] - lev[below - 1]))


@dataclass(frozen=True)
class Recalibration:
    """A map of quantile levels learnt from PITs, shrunk towards the identity.

    Build it with :meth:`from_pits`. ``Recalibration()`` (no PITs) is the identity.

    Attributes:
        pits: The PITs, sorted, in [0, 1].
        prior_count: Pseudo-count c of the uniform distribution in R = (k F_k + c U) / (k + c).
    """

    pits: tuple[float, ...] = ()
    prior_count: float = PRIOR_COUNT

    def __post_init__(self) -> None:
        if not (math.isfinite(self.prior_count) and self.prior_count >= 0):
            raise ValueError(f"prior_count must be finite and >= 0, but got {self.prior_count}")
        if not self.pits and self.prior_count == 0:
            raise ValueError("a recalibration needs PITs or a positive prior_count")
        if any(not 0.0 <= z <= 1.0 for z in self.pits) or list(self.pits) != sorted(self.pits):
            raise ValueError("pits must be sorted and lie in [0, 1]; use Recalibration.from_pits")

    @classmethod
    def from_pits(
        cls, pits: Iterable[float], prior_count: float = PRIOR_COUNT, *, symmetric: bool = False
    ) -> Recalibration:
        """From any PITs: NaN (unknown predictions) are dropped, the rest clipped and sorted.

        Args:
            pits: PITs of realised values (:func:`pit`), NaN for unknown predictions.
            prior_count: Pseudo-count of the uniform distribution.
            symmetric: Also use 1 - z for every PIT z (2k values): R(1 - p) = 1 - R(p), so the
                median stays and only the spread is recalibrated, with half the variance.
        """
        values = np.asarray([float(z) for z in pits], dtype=float)
        values = np.clip(values[~np.isnan(values)], 0.0, 1.0)
        if symmetric:
            values = np.concatenate((values, 1.0 - values))
        return cls(tuple(float(z) for z in np.sort(values)), float(prior_count))

    @property
    def count(self) -> int:
        """Number of PITs k."""
        return len(self.pits)

    def _knots(self) -> tuple[FloatArray, FloatArray]:
        """(p, R(p)) at the knots of the piecewise-linear R; R is strictly increasing."""
        k = self.count
        p = np.concatenate(([0.0], np.asarray(self.pits, dtype=float), [1.0]))
        empirical = np.arange(k + 2, dtype=float) / (k + 1)
        r = (k * empirical + self.prior_count * p) / (k + self.prior_count)
        return p, r

    def cdf(self, p: float | FloatArray) -> float | FloatArray:
        """R(p): the calibrated probability of an original level p (right-continuous)."""
        knots, r = self._knots()
        # a run of equal PITs is a jump of R; take its top (np.interp needs increasing x)
        keep = np.append(knots[1:] != knots[:-1], True)
        out = np.interp(p, knots[keep], r[keep])
        return float(out) if np.ndim(out) == 0 else np.asarray(out, dtype=float)

    @overload
    def level(self, p: float) -> float: ...

    @overload
    def level(self, p: FloatArray) -> FloatArray: ...

    def level(self, p: float | FloatArray) -> float | FloatArray:
        """R^-1(p): the original level whose quantile becomes the calibrated level ``p``."""
        knots, r = self._knots()
        out = np.interp(p, r, knots)
        return float(out) if np.ndim(out) == 0 else np.asarray(out, dtype=float)

    def apply(self, prediction: CurvePrediction) -> CurvePrediction:
        """The recalibrated prediction: the quantile at level L is the original one at level(L).

        Original quantiles are interpolated linearly across the stored levels and extrapolated
        into the exponential tails beyond them (not beyond the metric's bounds, [0, 1] on the
        normalised scale, unless the prediction already was); every epoch uses the same map, the
        rest of the prediction is unchanged. An unknown prediction is returned as is.
        """
        if prediction.unknown or prediction.horizon == 0:
            return prediction
        stored = np.asarray(prediction.levels, dtype=float)
        wanted = np.clip(self.level(stored), MIN_LEVEL, 1.0 - MIN_LEVEL)
        inner = np.clip(wanted, stored[0], stored[-1])
        cols = np.interp(inner, stored, np.arange(stored.size, dtype=float))
        i = np.minimum(np.floor(cols).astype(int), stored.size - 2)
        t = cols - i
        q = np.maximum.accumulate(np.asarray(prediction.u_quantiles, dtype=float), axis=1)
        new = (1.0 - t) * q[:, i] + t * q[:, i + 1]
        low, high = _tail_rates(q, stored)
        lo, hi = wanted < stored[0], wanted > stored[-1]
        if np.any(lo):  # q0 - (L0 / d0) log(L0 / p): the lower tail's quantile
            depth = stored[0] * np.log(stored[0] / wanted[lo])
            floor = np.minimum(q[:, :1], 0.0)  # the metric's lower bound, or the prediction's
            new[:, lo] = np.maximum(q[:, :1] - depth[None, :] / low[:, None], floor)
        if np.any(hi):
            tail = 1.0 - stored[-1]
            depth = tail * np.log(tail / (1.0 - wanted[hi]))
            ceiling = np.maximum(q[:, -1:], 1.0)
            new[:, hi] = np.minimum(q[:, -1:] + depth[None, :] / high[:, None], ceiling)
        new = np.maximum.accumulate(np.round(new, DECIMALS), axis=1)
        return dataclasses.replace(prediction, u_quantiles=new)


@dataclass
class StudyCalibration:
    """Recalibration inside a study from the PITs of the study's own curves.

    A prediction made after n points is checked against the value its trial reached later: the
    PIT of the trial's latest observed value (at the trial's latest prediction, or where it
    ended) under the earlier prediction. The finished trials in a study come too late (in the
    measured traces no trial reaches ``max_steps`` before the target is reached), so the PITs
    are of the latest value rather than the final one: their horizon is shorter than the one
    the policy asks about, and the trials observed further are the ones the policy kept.

    A new prediction after n points is recalibrated with the PITs of the other trials'
    predictions made after n points (the miscalibration of a model depends on how much of a
    curve it saw), when it arrives; with no such PIT it is left as it is.

    Attributes:
        symmetric: Recalibrate the spread only (:meth:`Recalibration.from_pits`).
        prior_count: Pseudo-count of the uniform distribution.
    """

    symmetric: bool = True
    prior_count: float = PRIOR_COUNT
    _predictions: dict[int, list[CurvePrediction]] = dataclasses.field(default_factory=dict)
    _pits: dict[int, dict[int, float]] = dataclasses.field(default_factory=dict)  # n -> trial
    _maps: dict[int, Recalibration] = dataclasses.field(default_factory=dict)

    @classmethod
    def named(cls, name: str) -> StudyCalibration | None:
        """The recalibration ``[curves] recalibrate`` names; ``None`` for ``"none"``."""
        if name not in RECALIBRATIONS:
            raise ValueError(f"recalibrate must be one of {RECALIBRATIONS}, but got {name!r}")
        return None if name == "none" else cls(symmetric=name == "spread")

    def add(self, trial_id: int, prediction: CurvePrediction) -> CurvePrediction:
        """Keep a trial's new prediction; return it recalibrated with the current PITs."""
        self._predictions.setdefault(trial_id, []).append(prediction)
        return self.apply(prediction)

    def observe(self, trial_id: int, epoch: int, value: float) -> None:
        """The trial's value at ``epoch`` (its latest): its predictions made before ``epoch``
        lend their PITs at it, replacing the ones of an earlier observation."""
        for prediction in self._predictions.get(trial_id, ()):
            if not prediction.n < epoch <= prediction.x_max:
                continue
            z = pit(prediction, epoch, value)
            pits = self._pits.setdefault(prediction.n, {})
            if math.isfinite(z):
                pits[trial_id] = z
            else:
                pits.pop(trial_id, None)
            self._maps.pop(prediction.n, None)

    def close(self, trial_id: int) -> None:
        """The trial ended (after its last :meth:`observe`): its PITs stay, its predictions go."""
        self._predictions.pop(trial_id, None)

    def latest(self, trial_id: int) -> CurvePrediction:
        """An open trial's latest prediction, not recalibrated."""
        return self._predictions[trial_id][-1]

    @property
    def open_trials(self) -> list[int]:
        """The trials whose predictions are kept until they end."""
        return list(self._predictions)

    def pit_count(self, n: int | None = None) -> int:
        """PITs held, in all or for predictions made after ``n`` points."""
        if n is not None:
            return len(self._pits.get(n, ()))
        return sum(len(p) for p in self._pits.values())

    def mapping(self, n: int) -> Recalibration:
        """The map for predictions made after ``n`` points (the identity without PITs)."""
        mapping = self._maps.get(n)
        if mapping is None:
            pits = self._pits.get(n, {}).values()
            mapping = Recalibration.from_pits(pits, self.prior_count, symmetric=self.symmetric)
            self._maps[n] = mapping
        return mapping

    def apply(self, prediction: CurvePrediction) -> CurvePrediction:
        """``prediction`` recalibrated with the PITs of predictions made after as many points."""
        if not self._pits.get(prediction.n):
            return prediction
        return self.mapping(prediction.n).apply(prediction)
