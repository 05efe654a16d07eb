"""What POP and EarlyTerm ask of a curve fit (HyperDrive, Rasley et al. 2017, §3.1.1 and §5.3).

A :class:`CurvePrediction` is small and JSON-able (it is stored in the journal): for every future
epoch m = n+1..x_max it keeps quantiles of the posterior predictive of y(m) (noise included) at
:data:`LEVELS`, on the normalised scale. Every query is answered from them, in the caller's
units. "At least as good as" means ``y >= target`` for mode "max" and ``y <= target`` for "min".

**HyperDrive §3.1.1** (epochs counted from now: j = 1 is epoch n+1):

* ``P_j = P(y(n+j) at least as good as y_target | y(1..n))`` (eq. 1, the predictive of the model);
* ``p_1 = P_1``, ``p_j = P_j - P_{j-1}`` (the "probability mass function defined based on
  accumulative distribution"; it can be negative where P_j decreases in j, as in the paper);
* ``M = floor((T_max - T_pass) / Epoch)``, capped at the epochs left (x_max - n);
* confidence ``p = p_1 + ... + p_M`` (= P_M);
* expected remaining epochs ``x = 1 p_1 + 2 p_2 + ... + M p_M`` (eq. 2);
* ``ERT = x * Epoch`` (eq. 3), summed term by term and set to ``T_max - T_pass`` as soon as the
  running sum exceeds it ("we stop summing further for p_m and set ERT = T_max - T_pass").

**EarlyTerm (§5.3, Domhan et al. 2015):** ``P(y(x_max) >= y_best | y(1..n))``; terminate if < 0.05.

**Unknown predictions** (degenerate input, see :func:`~hpctune.curves.fit.fit_curve`) answer NaN
to every query (arrays of NaN). NaN is neutral for threshold rules: ``p >= p_thred`` and
``p < 0.05`` are both False, so an unknown curve is neither promoted nor terminated. Check
:attr:`CurvePrediction.unknown` to treat it explicitly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import ndtri

from hpctune.curves.families import FloatArray
from hpctune.curves.fit import CurvePosterior, check_scale, denormalise, normalise
from hpctune.study.states import Mode

#: Probability levels of the stored predictive quantiles (dense in the tails for P ~ 0.05).
LEVELS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
    0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999,
)  # fmt: skip
#: Quantiles reported by default (5/25/50/75/95 %).
DEFAULT_QUANTILES: tuple[float, ...] = (0.05, 0.25, 0.5, 0.75, 0.95)
#: Decimals kept for normalised quantiles (1e-5 of the range: float32-like precision).
DECIMALS = 5
#: Stratified standard-normal nodes per posterior sample for the predictive's noise.
NOISE_NODES = 10
FORMAT_VERSION = 1
#: Targets at or within this share of the metric's range below its best bound are asked as
#: ``1 - BOUND_TOLERANCE`` on the normalised scale: a value at the bound (an accuracy of exactly
#: 1.0, the maximum return) is reached by values that round to it, and a continuous predictive
#: never puts mass on the bound itself, so asking for the bound exactly would answer 0 for every
#: trial (issue 32).
BOUND_TOLERANCE = 0.002


def _empty() -> FloatArray:
    return np.zeros((0, len(LEVELS)))


@dataclass(frozen=True, eq=False)
class CurvePrediction:
    """Predictive distribution of y(n+1..x_max) for one trial, with POP/EarlyTerm queries.

    Build it with :meth:`from_posterior` (or :meth:`unknown_result`, :meth:`from_dict`).

    Attributes:
        n: Observed epochs (1..n).
        x_max: Horizon.
        bounds: ``(low, high)`` of the raw scale.
        mode: ``"max"`` or ``"min"``.
        unknown: No prediction could be made; every query answers NaN.
        reason: Why it is unknown (empty otherwise).
        levels: Probability levels of ``u_quantiles`` (ascending).
        u_quantiles: Normalised predictive quantiles (x_max - n, len(levels)), larger is better.
        sigma: Posterior median of the noise sd (normalised).
        families: Families in the fitted combination.
    """

    n: int
    x_max: int
    bounds: tuple[float, float]
    mode: Mode
    unknown: bool = False
    reason: str = ""
    levels: tuple[float, ...] = LEVELS
    u_quantiles: FloatArray = field(default_factory=_empty)
    sigma: float = math.nan
    families: tuple[str, ...] = ()
    _memo: dict[float, FloatArray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_posterior(cls, posterior: CurvePosterior) -> CurvePrediction:
        """Summarise a posterior: predictive quantiles of y(m), m = n+1..x_max, noise included.

        The predictive at epoch m is the mixture over posterior samples s of N(f_s(m), sigma_s^2).
        Its quantiles come from f_s(m) + sigma_s e_r with :data:`NOISE_NODES` stratified normal
        nodes e_r = Phi^-1((r + 1/2) / R): deterministic, no generator needed.
        """
        if posterior.unknown or posterior.n_samples == 0:
            return cls.unknown_result(
                posterior.n, posterior.x_max, posterior.bounds, posterior.mode, posterior.reason
            )
        nodes = ndtri((np.arange(NOISE_NODES) + 0.5) / NOISE_NODES)
        f = np.asarray(posterior.f[:, posterior.n :], dtype=float)  # (S, M)
        noise = np.asarray(posterior.sigma, dtype=float)[:, None] * nodes[None, :]  # (S, R)
        parts = []
        for lo in range(0, f.shape[1], 256):
            chunk = f[:, lo : lo + 256]
            pseudo = (chunk[:, None, :] + noise[:, :, None]).reshape(-1, chunk.shape[1])
            parts.append(np.quantile(pseudo, LEVELS, axis=0).T)
        q = np.round(np.concatenate(parts, axis=0), DECIMALS)
        q = np.maximum.accumulate(q, axis=1)
        return cls(
            n=posterior.n,
            x_max=posterior.x_max,
            bounds=posterior.bounds,
            mode=posterior.mode,
            u_quantiles=q,
            sigma=round(float(np.median(posterior.sigma)), 7),
            families=posterior.families,
        )

    @classmethod
    def unknown_result(
        cls, n: int, x_max: int, bounds: tuple[float, float], mode: Mode, reason: str
    ) -> CurvePrediction:
        """An unknown prediction (every query answers NaN)."""
        return cls(n=n, x_max=x_max, bounds=bounds, mode=mode, unknown=True, reason=reason)

    # -- basic views ---------------------------------------------------------------------------

    @property
    def horizon(self) -> int:
        """Number of future epochs M = x_max - n (0 if none)."""
        return max(self.x_max - self.n, 0)

    @property
    def epochs(self) -> np.ndarray:
        """The future epochs n+1..x_max."""
        return np.arange(self.n + 1, self.x_max + 1)

    def _nan(self) -> FloatArray:
        return np.full(self.horizon, math.nan)

    def quantiles(self, levels: Sequence[float] = DEFAULT_QUANTILES) -> FloatArray:
        """Predictive quantiles of y(m) in raw units, shape (x_max - n, len(levels)).

        Interpolated linearly between the stored levels (which include 5/25/50/75/95 %).

        Raises:
            ValueError: A level outside [0.001, 0.999].
        """
        lv = np.asarray(levels, dtype=float)
        if np.any(lv < self.levels[0]) or np.any(lv > self.levels[-1]):
            raise ValueError(
                f"quantile levels must lie in [{self.levels[0]}, {self.levels[-1]}], but got "
                f"{list(levels)}"
            )
        if self.unknown:
            return np.full((self.horizon, lv.size), math.nan)
        u_levels = lv if self.mode == "max" else 1.0 - lv  # "min" flips the scale
        stored = np.asarray(self.levels)
        cols = [
            np.interp(p, stored, np.arange(stored.size)) for p in u_levels
        ]  # fractional column index of each level
        out = np.empty((self.horizon, lv.size))
        for j, c in enumerate(cols):
            i = min(math.floor(c), stored.size - 2)
            t = c - i
            out[:, j] = (1.0 - t) * self.u_quantiles[:, i] + t * self.u_quantiles[:, i + 1]
        return denormalise(out, self.bounds, self.mode)

    @property
    def median(self) -> FloatArray:
        """Predictive median of y(m), m = n+1..x_max, in raw units."""
        return self.quantiles((0.5,))[:, 0]

    # -- HyperDrive queries --------------------------------------------------------------------

    def prob_at_least(self, target: float) -> FloatArray:
        """P(y(m) at least as good as ``target`` | y(1..n)) for m = n+1..x_max (eq. 1, §3.1.1).

        Predictive: the noise is included. Linear interpolation of the stored quantile function;
        beyond the outermost stored levels (0.1 % and 99.9 %) the probability is 1 or 0. A target
        at or within :data:`BOUND_TOLERANCE` of the metric's best bound is asked as that
        tolerance below it (reachable, not 0 for every trial). The result is read-only and
        remembered per target (a few dozen).
        """
        if self.unknown:
            return self._nan()
        key = float(target)
        cached = self._memo.get(key)
        if cached is not None:  # policies ask again for the same target within a decision
            return cached
        t = float(normalise(key, self.bounds, self.mode))
        if 1.0 - BOUND_TOLERANCE < t <= 1.0:  # at the best bound, or within rounding of it
            t = 1.0 - BOUND_TOLERANCE
        q = self.u_quantiles
        lev = np.asarray(self.levels)
        count = np.sum(q <= t, axis=1)  # F(t) lies between levels[count-1] and levels[count]
        inner = (count > 0) & (count < lev.size)
        i = np.clip(count - 1, 0, lev.size - 2)
        rows = np.arange(q.shape[0])
        q_lo, q_hi = q[rows, i], q[rows, i + 1]
        width = np.where(q_hi > q_lo, q_hi - q_lo, 1.0)
        frac = np.clip((t - q_lo) / width, 0.0, 1.0)
        cdf = np.where(
            inner, lev[i] + frac * (lev[i + 1] - lev[i]), np.where(count == 0, 0.0, 1.0)
        )
        out = np.asarray(1.0 - cdf, dtype=float)
        out.setflags(write=False)
        if len(self._memo) < 64:
            self._memo[key] = out
        return out

    def first_reach_mass(self, target: float) -> FloatArray:
        """HyperDrive's p_j (§3.1.1): p_1 = P_1, p_j = P_j - P_{j-1}, j = 1..x_max - n.

        P_j is :meth:`prob_at_least` at epoch n + j. As in the paper, p_j is a difference of
        marginal probabilities, not a first-passage probability; it is negative where P_j falls.
        """
        probs = self.prob_at_least(target)
        return np.diff(probs, prepend=0.0)

    def max_epochs(self, epoch_seconds: float, time_left: float) -> int:
        """M = floor((T_max - T_pass) / Epoch), capped at the epochs left (x_max - n).

        Raises:
            ValueError: ``epoch_seconds`` is not positive or a value is not finite.
        """
        if not (math.isfinite(epoch_seconds) and epoch_seconds > 0):
            raise ValueError(f"epoch_seconds must be finite and > 0, but got {epoch_seconds}")
        if math.isnan(time_left):
            raise ValueError("time_left must not be NaN")
        if time_left <= 0:
            return 0
        return int(min(self.horizon, math.floor(time_left / epoch_seconds)))

    def confidence(self, target: float, epoch_seconds: float, time_left: float) -> float:
        """Prediction confidence p = p_1 + ... + p_M (§3.1.1), M epochs fit in ``time_left``.

        Args:
            target: y_target in raw units.
            epoch_seconds: Measured average epoch duration (Epoch_i).
            time_left: T_max - T_pass in seconds.
        """
        m = self.max_epochs(epoch_seconds, time_left)
        if self.unknown:
            return math.nan
        return float(np.sum(self.first_reach_mass(target)[:m]))

    def expected_remaining_epochs(self, target: float, max_epochs: int | None = None) -> float:
        """x = sum_j j p_j over j = 1..M (eq. 2, §3.1.1); M = ``max_epochs`` or all left."""
        if self.unknown:
            return math.nan
        m = self.horizon if max_epochs is None else max(0, min(int(max_epochs), self.horizon))
        p = self.first_reach_mass(target)[:m]
        return float(np.dot(np.arange(1, m + 1), p))

    def expected_remaining_time(
        self, target: float, epoch_seconds: float, time_left: float
    ) -> float:
        """ERT = x * Epoch (eq. 3, §3.1.1), truncated at T_max - T_pass as the paper does.

        The terms j p_j Epoch are summed in order for j <= M; as soon as the running sum exceeds
        ``time_left`` the result is ``time_left``. (With M from the time budget this cannot
        happen: sum_{j<=J} j p_j = J P_J - sum_{j<J} P_j <= J <= M. A negative sum, possible when
        P_j falls, is reported as 0.)
        """
        m = self.max_epochs(epoch_seconds, time_left)
        if self.unknown:
            return math.nan
        if time_left <= 0:
            return max(float(time_left), 0.0)
        p = self.first_reach_mass(target)[:m]
        running = np.cumsum(np.arange(1, m + 1) * p) * epoch_seconds
        if np.any(running > time_left):
            return float(time_left)
        return float(max(running[-1], 0.0)) if m else 0.0

    def prob_final_at_least(self, y_best: float) -> float:
        """P(y(x_max) at least as good as ``y_best`` | y(1..n)): EarlyTerm's p_val (§5.3)."""
        if self.unknown or self.horizon == 0:
            return math.nan
        return float(self.prob_at_least(y_best)[-1])

    # -- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (the quantiles are already rounded; the round trip is exact)."""
        out: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "n": self.n,
            "x_max": self.x_max,
            "bounds": [self.bounds[0], self.bounds[1]],
            "mode": self.mode,
            "unknown": self.unknown,
            "reason": self.reason,
        }
        if not self.unknown:
            out["levels"] = list(self.levels)
            out["u_quantiles"] = self.u_quantiles.tolist()
            out["sigma"] = self.sigma
            out["families"] = list(self.families)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CurvePrediction:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: Unknown format version or inconsistent content.
        """
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"CurvePrediction format version must be {FORMAT_VERSION}, "
                f"but got {data.get('version')!r}"
            )
        bounds = check_scale((data["bounds"][0], data["bounds"][1]), data["mode"])
        n, x_max = int(data["n"]), int(data["x_max"])
        if data["unknown"]:
            return cls.unknown_result(n, x_max, bounds, data["mode"], str(data["reason"]))
        levels = tuple(float(v) for v in data["levels"])
        q = np.asarray(data["u_quantiles"], dtype=float).reshape(-1, len(levels))
        if q.shape[0] != max(x_max - n, 0):
            raise ValueError(f"expected {x_max - n} rows of quantiles, but got {q.shape[0]}")
        return cls(
            n=n,
            x_max=x_max,
            bounds=bounds,
            mode=data["mode"],
            reason=str(data["reason"]),
            levels=levels,
            u_quantiles=q,
            sigma=float(data["sigma"]),
            families=tuple(str(f) for f in data["families"]),
        )
