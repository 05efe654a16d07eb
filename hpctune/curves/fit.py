"""Fit one learning curve: normalise, ML start, emcee ensemble sampling, thinned posterior.

The procedure is Domhan et al.'s (IJCAI 2015; REFERENCE.md §6.1) with HyperDrive's reduced MCMC
budget (Rasley et al., Middleware 2017, §5.2). :func:`fit_curve` never raises on bad data: too
few points, non-finite values, a constant curve, no horizon left or every ML fit failing give an
*unknown* :class:`CurvePosterior` (``strict=True`` raises :class:`~hpctune.errors.CurveFitError`
instead).

**Seeding emcee without global state.** ``emcee.EnsembleSampler.__init__`` copies NumPy's global
state into a private ``RandomState`` (it reads, never writes it). :func:`fit_curve` overrides that
copy the supported way: the initial ``emcee.State`` carries ``random_state`` =
``np.random.RandomState(seed).get_state()`` with ``seed`` drawn from the caller's
``np.random.Generator``; ``sample()`` installs it before the first move (emcee docs, "State").
The result is a function of the generator only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import emcee
import numpy as np

from hpctune.curves.families import FloatArray, get_families
from hpctune.curves.model import (
    CombinationModel,
    InitWeights,
    Monotonicity,
    build_model,
    initial_walkers,
    ml_start,
)
from hpctune.errors import CurveFitError
from hpctune.study.states import Mode

logger = logging.getLogger(__name__)


#: Fewer observed points than this give an unknown result: two points fix only a line, so the
#: posterior would be the prior's; three show curvature. (HyperDrive evaluates every b = 10.)
MIN_POINTS = 3
#: Largest supported horizon (the posterior keeps n_keep x x_max values).
MAX_HORIZON = 100_000


@dataclass(frozen=True)
class Budget:
    """MCMC budget: ``nsamples`` steps of ``nwalkers`` walkers, the first ``burn_in`` discarded.

    ``nsamples`` counts every step, burn-in included, as in the reference (HyperDrive's 100 x 700
    = 70,000 evaluations). ``nwalkers`` is raised to 2 x the dimension when smaller (reference).
    """

    nwalkers: int
    nsamples: int
    burn_in: int

    def __post_init__(self) -> None:
        if self.nwalkers < 2 or self.nsamples < 1 or not 0 <= self.burn_in < self.nsamples:
            raise ValueError(
                "a Budget needs nwalkers >= 2, nsamples >= 1 and 0 <= burn_in < nsamples, "
                f"but got {self}"
            )


#: Named budgets. ``hyperdrive``: 100 walkers x 700 steps (HyperDrive §5.2, which states no
#: burn-in); we discard the first 300 and keep 400: started from the Laplace ensemble, the
#: ensemble's median log-probability reaches its long-run level by ~300 steps (12 prior curves,
#: 2000-step runs; from the reference's 1e-4 ball it takes 400-700 steps just to expand). On 100
#: prior curves, burn-in 150 / 300 / 500 gave 84 / 86 / 86 % coverage of the 90 % interval.
#: ``domhan``: the reference's 100 x 3600 with burn-in 600.
BUDGETS: Mapping[str, Budget] = MappingProxyType(
    {
        "hyperdrive": Budget(nwalkers=100, nsamples=700, burn_in=300),
        "domhan": Budget(nwalkers=100, nsamples=3600, burn_in=600),
    }
)


def resolve_budget(budget: str | Budget) -> Budget:
    """A :class:`Budget` from a name in :data:`BUDGETS` or itself.

    Raises:
        ValueError: An unknown name (the message lists the valid ones).
    """
    if isinstance(budget, Budget):
        return budget
    if budget not in BUDGETS:
        raise ValueError(f"unknown MCMC budget {budget!r}; valid names are {sorted(BUDGETS)}")
    return BUDGETS[budget]


def check_scale(bounds: tuple[float, float], mode: str) -> tuple[float, float]:
    """Validate ``bounds`` and ``mode``; return ``(low, high)`` as floats.

    Raises:
        ValueError: Non-finite or empty bounds, or a mode other than "max"/"min".
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', but got {mode!r}")
    low, high = float(bounds[0]), float(bounds[1])
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"bounds must be finite with low < high, but got {bounds!r}")
    return low, high


def normalise(y: FloatArray | float, bounds: tuple[float, float], mode: str) -> FloatArray:
    """Map raw values to [0, 1], larger is better ("min" curves are flipped)."""
    low, high = check_scale(bounds, mode)
    u = (np.asarray(y, dtype=float) - low) / (high - low)
    return u if mode == "max" else 1.0 - u


def denormalise(u: FloatArray | float, bounds: tuple[float, float], mode: str) -> FloatArray:
    """Inverse of :func:`normalise`."""
    low, high = check_scale(bounds, mode)
    v = np.asarray(u, dtype=float)
    return low + (high - low) * (v if mode == "max" else 1.0 - v)


@dataclass(frozen=True, eq=False)
class CurvePosterior:
    """Thinned posterior of one fit (normalised scale, larger is better).

    Attributes:
        n: Number of observed points (epochs 1..n).
        x_max: Horizon.
        bounds: ``(low, high)`` of the raw scale.
        mode: ``"max"`` or ``"min"``.
        unknown: True when no fit was possible; ``f`` and ``sigma`` are then empty.
        reason: Why the result is unknown (empty otherwise).
        f: Samples of f_comb on epochs 1..x_max, shape (S, x_max), float32.
        sigma: Matching noise standard deviations (S,), float32.
        families: Families that survived the ML fit.
        weights: Posterior mean of their normalised weights.
        acceptance: Acceptance fraction of the sampler (estimated at the kept steps).
        budget: The MCMC budget used.
    """

    n: int
    x_max: int
    bounds: tuple[float, float]
    mode: Mode
    unknown: bool = False
    reason: str = ""
    f: FloatArray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    sigma: FloatArray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    families: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    acceptance: float = math.nan
    budget: Budget | None = None

    @property
    def n_samples(self) -> int:
        """Number of kept posterior samples S."""
        return int(self.sigma.size)


def _unknown(
    reason: str, n: int, x_max: int, bounds: tuple[float, float], mode: Mode, strict: bool
) -> CurvePosterior:
    if strict:
        raise CurveFitError(f"cannot fit the learning curve: {reason}")
    logger.debug("curve fit unknown: %s", reason)
    return CurvePosterior(n=n, x_max=x_max, bounds=bounds, mode=mode, unknown=True, reason=reason)


def fit_curve(
    y: Sequence[float] | FloatArray,
    *,
    x_max: int,
    rng: np.random.Generator,
    bounds: tuple[float, float] = (0.0, 1.0),
    mode: Mode = "max",
    budget: str | Budget = "hyperdrive",
    recency_weighting: bool = True,
    families: Sequence[str] | None = None,
    monotonicity: Monotonicity = "soft",
    sanity: tuple[float, float] = (0.0, 1.0),
    init_weights: InitWeights = "equal",
    init: Literal["laplace", "ball"] = "laplace",
    min_points: int = MIN_POINTS,
    n_keep: int = 500,
    strict: bool = False,
) -> CurvePosterior:
    """Fit the Domhan et al. curve model to ``y`` observed at epochs 1..n.

    Args:
        y: Observed metric values at epochs 1..n (raw scale).
        x_max: Horizon: the last epoch to predict (> n for a known result).
        rng: The only source of randomness (walker ball and emcee's seed).
        bounds: ``(low, high)`` of the raw scale, mapped to [0, 1].
        mode: ``"max"`` (larger is better) or ``"min"`` (flipped before fitting).
        budget: ``"hyperdrive"`` (100 x 700, burn-in 300), ``"domhan"`` (100 x 3600, burn-in
            600) or a :class:`Budget`.
        recency_weighting: Weight the likelihood by omega_t = 10^(t/n) (mean-normalised).
        families: Family names (default: all 11).
        monotonicity: ``"soft"`` (f_k(1) <= f_k(x_max)), ``"hard"`` or ``"none"``.
        sanity: Allowed range of each f_k(x_max) on the normalised scale.
        init_weights: ``"equal"`` or ``"nnls"`` starting weights (equal calibrates better).
        init: Initial ensemble: ``"laplace"`` draws walkers from the Laplace approximation at
            the MAP-refined start; ``"ball"`` is the reference's small ball (relative 1e-4),
            which needs ~400-700 steps just to expand (too many for the 700-step budget).
        min_points: Fewer finite observations give an unknown result (at least 3).
        n_keep: Posterior samples to keep (rounded up to whole ensemble snapshots).
        strict: Raise :class:`~hpctune.errors.CurveFitError` instead of returning unknown.

    Returns:
        The thinned posterior, or an unknown one for degenerate input.

    Raises:
        ValueError: Invalid arguments (bounds, mode, budget, family names, x_max, min_points).
        CurveFitError: Only with ``strict=True``, where an unknown result would be returned.
    """
    scale = check_scale(bounds, mode)
    fams = get_families(None if families is None else list(families))
    spec = resolve_budget(budget)
    x_max = _check_points(min_points, x_max)
    raw = np.asarray(y, dtype=float).ravel()
    n = int(raw.size)
    degenerate_reason = degenerate(raw, x_max, min_points)
    if degenerate_reason:
        return _unknown(degenerate_reason, n, x_max, scale, mode, strict)
    u = normalise(raw, scale, mode)
    if float(np.ptp(u)) < 1e-9:
        return _unknown("constant curve", n, x_max, scale, mode, strict)

    full = build_model(
        fams,
        u,
        x_max,
        recency_weighting=recency_weighting,
        sanity=sanity,
        monotonicity=monotonicity,
    )
    started = ml_start(full, init_weights)
    if started is None:
        return _unknown("every family's ML fit failed", n, x_max, scale, mode, strict)
    model, start = started
    nwalkers = max(spec.nwalkers, 2 * model.ndim)
    nwalkers += nwalkers % 2
    cov = start.cov if init == "laplace" else None
    p0 = initial_walkers(model, start.theta, nwalkers, rng, cov=cov)
    if not np.all(np.isfinite(model.log_prob(p0))):
        return _unknown("no valid starting ensemble", n, x_max, scale, mode, strict)

    chain, acceptance = _sample(model, p0, spec, n_keep, rng)
    if chain.shape[0] < 2:
        return _unknown("the sampler kept no valid sample", n, x_max, scale, mode, strict)
    f = model.f_comb(chain, np.arange(1, x_max + 1, dtype=float))
    ok = np.all(np.isfinite(f), axis=1)
    if ok.sum() < 2:
        return _unknown("non-finite posterior curves", n, x_max, scale, mode, strict)
    return _posterior(model, chain[ok], f[ok], acceptance, spec, n, scale, mode)


def _posterior(
    model: CombinationModel,
    chain: FloatArray,
    f: FloatArray,
    acceptance: float,
    spec: Budget,
    n: int,
    scale: tuple[float, float],
    mode: Mode,
) -> CurvePosterior:
    """The posterior of the samples ``chain`` and their curves ``f`` (one row per sample)."""
    return CurvePosterior(
        n=n,
        x_max=f.shape[1],
        bounds=scale,
        mode=mode,
        f=f.astype(np.float32),
        sigma=np.exp(chain[:, model.sigma_index]).astype(np.float32),
        families=tuple(fam.name for fam in model.families),
        weights=tuple(round(float(w), 6) for w in model.weights(chain).mean(axis=0)),
        acceptance=acceptance,
        budget=spec,
    )


def _check_points(min_points: int, x_max: int) -> int:
    """``x_max`` as an int, checked with ``min_points``.

    Raises:
        ValueError: ``min_points`` < 3, or ``x_max`` not in [1, MAX_HORIZON].
    """
    if min_points < 3:
        raise ValueError(f"min_points must be >= 3, but got {min_points}")
    if not 1 <= int(x_max) <= MAX_HORIZON:
        raise ValueError(f"x_max must be in [1, {MAX_HORIZON}], but got {x_max}")
    return int(x_max)


def degenerate(raw: FloatArray, x_max: int, min_points: int = MIN_POINTS) -> str:
    """Why the observed values ``raw`` cannot be fitted (``""``: they can).

    Both curve models' rule, but for one case :func:`fit_curve` adds: a constant curve, which
    Domhan's model cannot fit, while the amortised model predicts it (a curve flat so far, at
    chance or diverged, may stay flat or start to learn; its prior has both).
    """
    n = int(raw.size)
    if n < min_points:
        return f"{n} observed points, at least {min_points} needed"
    if not np.all(np.isfinite(raw)):
        return "non-finite observed values"
    if n >= x_max:
        return f"no epoch left to predict (n={n} >= x_max={x_max})"
    return ""


def _sample(
    model: CombinationModel, p0: FloatArray, spec: Budget, n_keep: int, rng: np.random.Generator
) -> tuple[FloatArray, float]:
    """Run emcee from the ensemble ``p0``: burn in, then keep about ``n_keep`` samples in whole
    thinned snapshots of the ensemble; return the samples of finite log-probability and the
    acceptance fraction."""
    nwalkers, ndim = p0.shape
    snapshots = min(max(1, math.ceil(n_keep / nwalkers)), spec.nsamples - spec.burn_in)
    thin = (spec.nsamples - spec.burn_in) // snapshots
    burn = spec.nsamples - snapshots * thin
    seed = int(rng.integers(0, 2**32))
    state = emcee.State(p0, random_state=np.random.RandomState(seed).get_state())
    sampler = emcee.EnsembleSampler(nwalkers, ndim, model.log_prob, vectorize=True)
    if burn:
        state = sampler.run_mcmc(state, burn, store=False, skip_initial_state_check=True)
    sampler.run_mcmc(state, snapshots, thin_by=thin, skip_initial_state_check=True)
    # emcee counts acceptances at stored steps only: an estimate from snapshots x nwalkers moves
    acceptance = float(np.mean(sampler.acceptance_fraction))
    chain = sampler.get_chain(flat=True)
    logp = sampler.get_log_prob(flat=True)
    return chain[np.isfinite(logp)], acceptance
