"""The 11 parametric learning-curve families of Domhan, Springenberg and Hutter (IJCAI 2015).

Each family is a small frozen :class:`Family` in the read-only registry :data:`FAMILIES`. Formulas
and maximum-likelihood starting points (``reference_start``) follow the reference implementation
(``pylrpredictor/curvefunctions.py``, REFERENCE.md §6.1); x is the epoch index starting at 1.

**Sampling coordinates.** Every family is parametrised by the coordinates the MCMC moves in, not by
its natural parameters: a parameter with a log-normal or log-uniform prior is sampled as its
logarithm (``log_kappa`` for κ), and pow4's asymptote ``c`` as ``log1m_c = ln(1 - c)``. The
affine-invariant ensemble sampler then sees roughly Gaussian, unbounded directions instead of
quantities spanning several orders of magnitude. :meth:`Family.to_natural` and
:meth:`Family.from_natural` convert.

**Priors.** Proper priors: LC-PFN's "peaked" priors per family (Adriaensen et al., NeurIPS 2023,
``lcpfn/curves.py``; REFERENCE.md §6.2), written in sampling coordinates. They were designed for
curves in [0, 1] over epochs 1..100, which is what :mod:`hpctune.curves` fits after normalising
(larger is better). The uniform priors are also the parameter bounds used by the ML fit and the
sampler; normal priors are unbounded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
PriorKind = Literal["uniform", "normal"]
Transform = Literal["identity", "log", "log1m"]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class Param:
    """One parameter of a family, in sampling coordinates.

    Attributes:
        name: Name of the sampling coordinate (``"log_kappa"``).
        natural: Name of the natural parameter (``"kappa"``).
        transform: natural = z (``identity``), exp(z) (``log``) or 1 - exp(z) (``log1m``).
        prior: ``uniform`` on [p1, p2] or ``normal`` with mean p1 and standard deviation p2.
        p1: Lower bound or mean.
        p2: Upper bound or standard deviation.
    """

    name: str
    natural: str
    transform: Transform
    prior: PriorKind
    p1: float
    p2: float

    @property
    def bounds(self) -> tuple[float, float]:
        """Support of the prior: [p1, p2] for uniform, the real line for normal."""
        if self.prior == "uniform":
            return (self.p1, self.p2)
        return (-math.inf, math.inf)

    @property
    def center(self) -> float:
        """Midpoint of a uniform prior, mean of a normal one."""
        return 0.5 * (self.p1 + self.p2) if self.prior == "uniform" else self.p1

    @property
    def scale(self) -> float:
        """Width of a uniform prior, standard deviation of a normal one."""
        return self.p2 - self.p1 if self.prior == "uniform" else self.p2

    def to_natural(self, z: FloatArray) -> FloatArray:
        """Map sampling coordinates to natural values."""
        if self.transform == "log":
            return np.exp(z)
        if self.transform == "log1m":
            return -np.expm1(z)
        return np.asarray(z, dtype=float)

    def from_natural(self, value: float) -> float:
        """Map a natural value to its sampling coordinate (``nan`` outside the domain)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.transform == "log":
                return float(np.log(value)) if value > 0 else math.nan
            if self.transform == "log1m":
                return float(np.log1p(-value)) if value < 1 else math.nan
        return float(value)


@dataclass(frozen=True)
class Grid:
    """Epochs at which curves are evaluated, with the features every family reuses.

    Attributes are 2-D rows of shape (1, T) so that ``theta[:, [i]]`` (S, 1) broadcasts to (S, T).
    """

    x: FloatArray
    log_x: FloatArray
    inv_x: FloatArray
    inv_log1p_x: FloatArray

    @classmethod
    def of(cls, x: ArrayLike) -> Grid:
        """Precompute the features of epochs ``x`` (all >= 1)."""
        xs = np.asarray(x, dtype=float).reshape(1, -1)
        return cls(x=xs, log_x=np.log(xs), inv_x=1.0 / xs, inv_log1p_x=1.0 / np.log1p(xs))

    @property
    def size(self) -> int:
        """Number of epochs T."""
        return int(self.x.shape[1])


CurveFn = Callable[[Grid, FloatArray], FloatArray]


@dataclass(frozen=True)
class Family:
    """A parametric learning-curve family: formula, parameters, reference start and prior.

    Attributes:
        name: Registry key (``"pow3"``).
        formula: The formula in natural parameters.
        params: The parameters, in sampling coordinates, in the column order of ``theta``.
        reference_start: Natural ML starting values of the reference implementation
            (``model_defaults``; 1.0 where it has none).
        curve: Vectorised evaluation on a precomputed :class:`Grid`.
    """

    name: str
    formula: str
    params: tuple[Param, ...]
    reference_start: tuple[float, ...]
    curve: CurveFn

    def __post_init__(self) -> None:
        # each registry entry documents its own formula: FAMILIES["pow3"].__doc__
        object.__setattr__(self, "__doc__", self.formula)

    @property
    def n_params(self) -> int:
        """Number of parameters P."""
        return len(self.params)

    @property
    def param_names(self) -> tuple[str, ...]:
        """Names of the sampling coordinates."""
        return tuple(p.name for p in self.params)

    @property
    def lower(self) -> FloatArray:
        """Lower bounds of the sampling coordinates (P,)."""
        return np.array([p.bounds[0] for p in self.params])

    @property
    def upper(self) -> FloatArray:
        """Upper bounds of the sampling coordinates (P,)."""
        return np.array([p.bounds[1] for p in self.params])

    def evaluate(self, x: ArrayLike, theta: FloatArray) -> FloatArray:
        """Evaluate the family for a whole ensemble of parameter vectors.

        Args:
            x: Epochs (T,), all >= 1.
            theta: Sampling coordinates (S, P) or (P,).

        Returns:
            Curve values (S, T) (or (T,) for a single ``theta``); non-finite where undefined.
        """
        return self.evaluate_grid(Grid.of(x), theta)

    def evaluate_grid(self, grid: Grid, theta: FloatArray) -> FloatArray:
        """Like :meth:`evaluate` on a precomputed grid (the fast path used by the model)."""
        th = np.asarray(theta, dtype=float)
        single = th.ndim == 1
        with np.errstate(all="ignore"):
            out = self.curve(grid, np.atleast_2d(th))
        return out[0] if single else out

    def in_bounds(self, theta: FloatArray) -> NDArray[np.bool_]:
        """Whether each row of ``theta`` (S, P) lies in the prior's support."""
        th = np.atleast_2d(theta)
        return np.asarray(np.all((th >= self.lower) & (th <= self.upper), axis=1), dtype=bool)

    def log_prior(self, theta: FloatArray) -> FloatArray:
        """Normalised log prior density of each row of ``theta`` (S, P); -inf outside support."""
        th = np.atleast_2d(np.asarray(theta, dtype=float))
        total = np.zeros(th.shape[0])
        for i, p in enumerate(self.params):
            z = th[:, i]
            if p.prior == "uniform":
                inside = (z >= p.p1) & (z <= p.p2)
                total += np.where(inside, -math.log(p.p2 - p.p1), -np.inf)
            else:
                total += -0.5 * ((z - p.p1) / p.p2) ** 2 - math.log(p.p2) - _LOG_SQRT_2PI
        return total

    def sample_prior(self, rng: np.random.Generator, size: int) -> FloatArray:
        """Draw ``size`` parameter vectors (size, P) from the prior."""
        cols = [
            rng.uniform(p.p1, p.p2, size) if p.prior == "uniform" else rng.normal(p.p1, p.p2, size)
            for p in self.params
        ]
        return np.stack(cols, axis=1)

    def to_natural(self, theta: FloatArray) -> dict[str, FloatArray]:
        """Natural parameter values of ``theta`` (S, P) by natural name."""
        th = np.atleast_2d(theta)
        return {p.natural: p.to_natural(th[:, i]) for i, p in enumerate(self.params)}

    def from_natural(self, **values: float) -> FloatArray:
        """Sampling coordinates (P,) of natural values given by name (``nan`` if out of domain)."""
        return np.array([p.from_natural(values[p.natural]) for p in self.params])

    def start(self) -> FloatArray:
        """The reference ML start in sampling coordinates, projected into the prior's support.

        A value outside the domain of the transform (pow4's b = 0, exp4's b = -0.8 under a
        log-normal prior) is replaced by the prior's centre; others are clipped into the bounds.
        """
        z = self.from_natural(
            **{p.natural: v for p, v in zip(self.params, self.reference_start, strict=True)}
        )
        out = np.empty(self.n_params)
        for i, p in enumerate(self.params):
            lo, hi = p.bounds
            margin = 1e-6 * p.scale
            out[i] = (
                p.center if not math.isfinite(z[i]) else min(max(z[i], lo + margin), hi - margin)
            )
        return out

    def center(self) -> FloatArray:
        """The prior's centre in sampling coordinates (fallback ML start)."""
        return np.array([p.center for p in self.params])


def _c(theta: FloatArray, i: int) -> FloatArray:
    """Column ``i`` of ``theta`` as an (S, 1) view."""
    return theta[:, i : i + 1]


def _vap(g: Grid, t: FloatArray) -> FloatArray:
    """vap: exp(a + b/x + c ln x)."""
    return np.exp(_c(t, 0) + _c(t, 1) * g.inv_x + np.exp(_c(t, 2)) * g.log_x)


def _pow3(g: Grid, t: FloatArray) -> FloatArray:
    """pow3: c - a x^(-alpha)."""
    return _c(t, 0) - _c(t, 1) * np.exp(-np.exp(_c(t, 2)) * g.log_x)


def _loglog_linear(g: Grid, t: FloatArray) -> FloatArray:
    """loglog_linear: ln(a ln x + b)."""
    return np.log(np.exp(_c(t, 0)) * g.log_x + np.exp(_c(t, 1)))


def _hill3(g: Grid, t: FloatArray) -> FloatArray:
    """hill3: theta x^eta / (kappa^eta + x^eta)."""
    # θ x^η / (κ^η + x^η) = θ / (1 + exp(η (ln κ - ln x)))
    return _c(t, 0) / (1.0 + np.exp(np.exp(_c(t, 1)) * (_c(t, 2) - g.log_x)))


def _log_power(g: Grid, t: FloatArray) -> FloatArray:
    """log_power: a / (1 + (x / e^b)^c)."""
    # a / (1 + (x / e^b)^c) = a / (1 + exp(c (ln x - b)))
    return _c(t, 0) / (1.0 + np.exp(_c(t, 2) * (g.log_x - _c(t, 1))))


def _pow4(g: Grid, t: FloatArray) -> FloatArray:
    """pow4: c - (a x + b)^(-alpha)."""
    c = -np.expm1(_c(t, 0))
    power: FloatArray = np.exp(
        -np.exp(_c(t, 2)) * np.log(np.exp(_c(t, 1)) * g.x + np.exp(_c(t, 3)))
    )
    return c - power


def _mmf(g: Grid, t: FloatArray) -> FloatArray:
    """mmf: alpha - (alpha - beta) / (1 + (kappa x)^delta)."""
    a, b = _c(t, 0), _c(t, 1)
    return a - (a - b) / (1.0 + np.exp(np.exp(_c(t, 3)) * (_c(t, 2) + g.log_x)))


def _exp4(g: Grid, t: FloatArray) -> FloatArray:
    """exp4: c - exp(-a x^alpha + b)."""
    decay: FloatArray = np.exp(np.exp(_c(t, 3)) - np.exp(_c(t, 1) + np.exp(_c(t, 2)) * g.log_x))
    return _c(t, 0) - decay


def _janoschek(g: Grid, t: FloatArray) -> FloatArray:
    """janoschek: alpha - (alpha - beta) exp(-kappa x^delta)."""
    a, b = _c(t, 0), _c(t, 1)
    return a - (a - b) * np.exp(-np.exp(_c(t, 2) + np.exp(_c(t, 3)) * g.log_x))


def _weibull(g: Grid, t: FloatArray) -> FloatArray:
    """weibull: alpha - (alpha - beta) exp(-(kappa x)^delta)."""
    a, b = _c(t, 0), _c(t, 1)
    return a - (a - b) * np.exp(-np.exp(np.exp(_c(t, 3)) * (_c(t, 2) + g.log_x)))


def _ilog2(g: Grid, t: FloatArray) -> FloatArray:
    """ilog2: c - a / ln(x + 1)."""
    return _c(t, 0) - _c(t, 1) * g.inv_log1p_x


def _u(name: str, natural: str, lo: float, hi: float, transform: Transform = "identity") -> Param:
    return Param(name, natural, transform, "uniform", lo, hi)


def _n(
    name: str, natural: str, mean: float, sd: float, transform: Transform = "identity"
) -> Param:
    return Param(name, natural, transform, "normal", mean, sd)


VAP = Family(
    "vap",
    "vapor pressure: f(x) = exp(a + b/x + c ln x); a ~ U(-2, 0), b ~ U(-4, 0), ln c ~ U(-8, 0)",
    (_u("a", "a", -2.0, 0.0), _u("b", "b", -4.0, 0.0), _u("log_c", "c", -8.0, 0.0, "log")),
    (-0.622028, -0.470050, 0.042322),
    _vap,
)
POW3 = Family(
    "pow3",
    "pow3: f(x) = c - a x^(-α); c ~ U(0, 1.25), a ~ U(-0.6, 0.6), ln α ~ N(0, 2)",
    (_u("c", "c", 0.0, 1.25), _u("a", "a", -0.6, 0.6), _n("log_alpha", "alpha", 0.0, 2.0, "log")),
    (0.84, 0.52, 0.01),
    _pow3,
)
LOGLOG_LINEAR = Family(
    "loglog_linear",
    "log log linear: f(x) = ln(a ln x + b); ln a ~ N(-2, 1), ln b ~ U(0, 1)",
    (_n("log_a", "a", -2.0, 1.0, "log"), _u("log_b", "b", 0.0, 1.0, "log")),
    (1.0, 1.0),
    _loglog_linear,
)
HILL3 = Family(
    "hill3",
    "Hill3 (dr_hill_zero_background): f(x) = θ x^η / (κ^η + x^η); "
    "θ ~ N(0.8, 0.1), ln η ~ N(1, 1), ln κ ~ N(1, 2)",
    (
        _n("theta", "theta", 0.8, 0.1),
        _n("log_eta", "eta", 1.0, 1.0, "log"),
        _n("log_kappa", "kappa", 1.0, 2.0, "log"),
    ),
    (0.772320, 0.586449, 2.460843),
    _hill3,
)
LOG_POWER = Family(
    "log_power",
    "log power: f(x) = a / (1 + (x / e^b)^c); a ~ N(0.8, 0.1), b ~ N(1, 1), c ~ U(-3, 0)",
    (_n("a", "a", 0.8, 0.1), _n("b", "b", 1.0, 1.0), _u("c", "c", -3.0, 0.0)),
    (0.77, 2.98, -0.51),
    _log_power,
)
POW4 = Family(
    "pow4",
    "pow4: f(x) = c - (a x + b)^(-α); ln(1 - c) ~ U(-5, 0), ln a ~ N(-3, 2), ln α ~ N(0, 1), "
    "ln b ~ U(0, 1)",
    (
        _u("log1m_c", "c", -5.0, 0.0, "log1m"),
        _n("log_a", "a", -3.0, 2.0, "log"),
        _n("log_alpha", "alpha", 0.0, 1.0, "log"),
        _u("log_b", "b", 0.0, 1.0, "log"),
    ),
    (0.8, 200.0, 0.1, 0.0),
    _pow4,
)
MMF = Family(
    "mmf",
    "Morgan-Mercer-Flodin: f(x) = α - (α - β) / (1 + (κ x)^δ); α ~ N(0.8, 0.1), "
    "β ~ N(0.2, 0.1), ln κ ~ N(0, 2), ln δ ~ N(0, 1)",
    (
        _n("alpha", "alpha", 0.8, 0.1),
        _n("beta", "beta", 0.2, 0.1),
        _n("log_kappa", "kappa", 0.0, 2.0, "log"),
        _n("log_delta", "delta", 0.0, 1.0, "log"),
    ),
    (0.7, 0.1, 0.01, 5.0),
    _mmf,
)
EXP4 = Family(
    "exp4",
    "exp4: f(x) = c - exp(-a x^α + b); c ~ N(0.8, 0.1), ln a ~ N(-2, 1), ln α ~ N(0, 1), "
    "ln b ~ N(0, 0.5)",
    (
        _n("c", "c", 0.8, 0.1),
        _n("log_a", "a", -2.0, 1.0, "log"),
        _n("log_alpha", "alpha", 0.0, 1.0, "log"),
        _n("log_b", "b", 0.0, 0.5, "log"),
    ),
    (0.7, 0.8, 0.3, -0.8),
    _exp4,
)
JANOSCHEK = Family(
    "janoschek",
    "Janoschek: f(x) = α - (α - β) exp(-κ x^δ); α ~ U(0, 1), β ~ U(0, 2), ln κ ~ N(-2, 1), "
    "ln δ ~ N(0, 0.5)",
    (
        _u("alpha", "alpha", 0.0, 1.0),
        _u("beta", "beta", 0.0, 2.0),
        _n("log_kappa", "kappa", -2.0, 1.0, "log"),
        _n("log_delta", "delta", 0.0, 0.5, "log"),
    ),
    (0.73, 0.07, 0.355, 0.46),
    _janoschek,
)
WEIBULL = Family(
    "weibull",
    "Weibull: f(x) = α - (α - β) exp(-(κ x)^δ); α ~ U(0, 1.5), β ~ U(0, 1), ln κ ~ N(-2, 1), "
    "ln δ ~ N(0, 0.5)",
    (
        _u("alpha", "alpha", 0.0, 1.5),
        _u("beta", "beta", 0.0, 1.0),
        _n("log_kappa", "kappa", -2.0, 1.0, "log"),
        _n("log_delta", "delta", 0.0, 0.5, "log"),
    ),
    (0.7, 0.1, 0.01, 1.0),
    _weibull,
)
ILOG2 = Family(
    "ilog2",
    "ilog2: f(x) = c - a / ln(x + 1); c ~ U(0, 1), a ~ U(-0.5, 0.5)",
    (_u("c", "c", 0.0, 1.0), _u("a", "a", -0.5, 0.5)),
    (0.78, 0.43),
    _ilog2,
)

#: All 11 families by name (read-only), in the order of REFERENCE.md §6.1.
FAMILIES: Mapping[str, Family] = MappingProxyType(
    {
        f.name: f
        for f in (
            VAP,
            POW3,
            LOGLOG_LINEAR,
            HILL3,
            LOG_POWER,
            POW4,
            MMF,
            EXP4,
            JANOSCHEK,
            WEIBULL,
            ILOG2,
        )
    }
)

#: Names of the default ensemble: all 11 (Domhan's termination script and HyperDrive §3.1.1).
DEFAULT_FAMILIES: tuple[str, ...] = tuple(FAMILIES)


def get_families(names: tuple[str, ...] | list[str] | None = None) -> tuple[Family, ...]:
    """Look families up by name (all 11 when ``names`` is None).

    Raises:
        ValueError: A name is unknown (the message lists the valid ones) or repeated.
    """
    if names is None:
        return tuple(FAMILIES.values())
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown curve families {unknown}; valid names are {sorted(FAMILIES)}")
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"curve families must be distinct and non-empty, but got {list(names)}")
    return tuple(FAMILIES[n] for n in names)
