"""The 11 curve families: formulas at hand-computed points, vectorisation, priors, registry."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from hpctune.curves import DEFAULT_FAMILIES, FAMILIES, get_families

E = math.e

# (family, natural parameters, x, expected f(x)) -- the arithmetic is in the comments
HAND_POINTS = [
    ("vap", {"a": -0.5, "b": -1.0, "c": 1.0}, 1.0, 0.22313016014842982),  # exp(-1.5)
    ("vap", {"a": -0.5, "b": -1.0, "c": 1.0}, 2.0, 0.7357588823428847),  # exp(-1 + ln 2) = 2/e
    ("pow3", {"c": 0.8, "a": 0.5, "alpha": 0.5}, 4.0, 0.55),  # 0.8 - 0.5 / 2
    ("pow3", {"c": 0.8, "a": 0.5, "alpha": 0.5}, 1.0, 0.3),  # 0.8 - 0.5
    ("loglog_linear", {"a": 0.5, "b": math.exp(0.5)}, 1.0, 0.5),  # ln(b)
    ("loglog_linear", {"a": 0.5, "b": math.exp(0.5)}, E, 0.7648729073870885),  # ln(0.5 + e^.5)
    ("hill3", {"theta": 0.8, "eta": 2.0, "kappa": 3.0}, 3.0, 0.4),  # 0.8 * 9 / 18
    ("hill3", {"theta": 0.8, "eta": 2.0, "kappa": 3.0}, 6.0, 0.64),  # 0.8 * 36 / 45
    ("log_power", {"a": 0.8, "b": math.log(5.0), "c": -2.0}, 5.0, 0.4),  # 0.8 / (1 + 1)
    ("log_power", {"a": 0.8, "b": math.log(5.0), "c": -2.0}, 10.0, 0.64),  # 0.8 / (1 + 1/4)
    ("pow4", {"c": 0.9, "a": 1.0, "b": 1.0, "alpha": 1.0}, 1.0, 0.4),  # 0.9 - 1/2
    ("pow4", {"c": 0.9, "a": 1.0, "b": 1.0, "alpha": 1.0}, 3.0, 0.65),  # 0.9 - 1/4
    ("mmf", {"alpha": 0.8, "beta": 0.2, "kappa": 0.1, "delta": 2.0}, 10.0, 0.5),  # .8 - .6/2
    ("mmf", {"alpha": 0.8, "beta": 0.2, "kappa": 0.1, "delta": 2.0}, 20.0, 0.68),  # .8 - .6/5
    ("exp4", {"c": 0.9, "a": 1.0, "b": 1.0, "alpha": 1.0}, 1.0, -0.1),  # 0.9 - e^0
    ("exp4", {"c": 0.9, "a": 1.0, "b": 1.0, "alpha": 1.0}, 2.0, 0.5321205588285577),  # .9 - 1/e
    (
        "janoschek",
        {"alpha": 0.8, "beta": 0.2, "kappa": 1.0, "delta": 1.0},
        1.0,
        0.5792723352971346,
    ),
    (
        "janoschek",
        {"alpha": 0.8, "beta": 0.2, "kappa": 1.0, "delta": 1.0},
        2.0,
        0.7187988300580325,
    ),
    ("weibull", {"alpha": 0.8, "beta": 0.2, "kappa": 0.5, "delta": 2.0}, 2.0, 0.5792723352971346),
    ("weibull", {"alpha": 0.8, "beta": 0.2, "kappa": 0.5, "delta": 2.0}, 4.0, 0.7890106166667595),
    ("ilog2", {"c": 0.8, "a": 0.2}, E - 1.0, 0.6),  # 0.8 - 0.2 / ln(e)
    ("ilog2", {"c": 0.8, "a": 0.2}, E**2 - 1.0, 0.7),  # 0.8 - 0.2 / 2
]


def natural_formula(name: str, p: dict[str, float], x: float) -> float:
    """The formulas of REFERENCE.md §6.1, written out independently of the package."""
    if name == "vap":
        return math.exp(p["a"] + p["b"] / x + p["c"] * math.log(x))
    if name == "pow3":
        return p["c"] - p["a"] * x ** (-p["alpha"])
    if name == "loglog_linear":
        return math.log(p["a"] * math.log(x) + p["b"])
    if name == "hill3":
        return p["theta"] * x ** p["eta"] / (p["kappa"] ** p["eta"] + x ** p["eta"])
    if name == "log_power":
        return p["a"] / (1.0 + (x / math.exp(p["b"])) ** p["c"])
    if name == "pow4":
        return p["c"] - (p["a"] * x + p["b"]) ** (-p["alpha"])
    if name == "mmf":
        return p["alpha"] - (p["alpha"] - p["beta"]) / (1.0 + (p["kappa"] * x) ** p["delta"])
    if name == "exp4":
        return p["c"] - math.exp(-p["a"] * x ** p["alpha"] + p["b"])
    if name == "janoschek":
        return p["alpha"] - (p["alpha"] - p["beta"]) * math.exp(-p["kappa"] * x ** p["delta"])
    if name == "weibull":
        return p["alpha"] - (p["alpha"] - p["beta"]) * math.exp(-((p["kappa"] * x) ** p["delta"]))
    if name == "ilog2":
        return p["c"] - p["a"] / math.log(x + 1.0)
    raise KeyError(name)


def test_registry_has_the_eleven_families_in_reference_order() -> None:
    assert list(FAMILIES) == [
        "vap",
        "pow3",
        "loglog_linear",
        "hill3",
        "log_power",
        "pow4",
        "mmf",
        "exp4",
        "janoschek",
        "weibull",
        "ilog2",
    ]
    assert tuple(FAMILIES) == DEFAULT_FAMILIES
    with pytest.raises(TypeError):
        FAMILIES["extra"] = FAMILIES["pow3"]  # type: ignore[index]
    for fam in FAMILIES.values():
        assert "f(x) =" in (fam.__doc__ or "")
        assert len(fam.reference_start) == fam.n_params == len(fam.param_names)


@pytest.mark.parametrize(("name", "natural", "x", "expected"), HAND_POINTS)
def test_family_matches_hand_computed_point(
    name: str, natural: dict[str, float], x: float, expected: float
) -> None:
    fam = FAMILIES[name]
    theta = fam.from_natural(**natural)
    assert fam.evaluate([x], theta)[0] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert natural_formula(name, natural, x) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_every_family_has_hand_points() -> None:
    assert {name for name, *_ in HAND_POINTS} == set(FAMILIES)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_matches_formula_on_prior_draws(name: str) -> None:
    fam = FAMILIES[name]
    rng = np.random.default_rng(3)
    theta = fam.sample_prior(rng, 20)
    x = np.array([1.0, 2.0, 7.0, 30.0, 100.0])
    got = fam.evaluate(x, theta)
    natural = fam.to_natural(theta)
    for s in range(theta.shape[0]):
        p = {k: float(v[s]) for k, v in natural.items()}
        for t, xv in enumerate(x):
            try:
                want = natural_formula(name, p, float(xv))
            except (OverflowError, ValueError, ZeroDivisionError):
                continue
            assert got[s, t] == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_reference_start_gives_a_sensible_increasing_curve(name: str) -> None:
    fam = FAMILIES[name]
    start = fam.start()
    assert np.all(np.isfinite(start))
    assert fam.in_bounds(start)[0]
    assert np.isfinite(fam.log_prior(start)[0])
    x = np.arange(1, 101)
    f = fam.evaluate(x, start)
    assert np.all(np.isfinite(f))
    assert np.all(np.diff(f) >= -1e-12), "non-decreasing on epochs 1..100"
    upper = 1.8 if name == "loglog_linear" else 1.0  # the reference has no start: a = b = 1
    assert 0.3 <= f[-1] <= upper
    # where the reference start is in the domain, it is kept (up to the bound margin)
    if name in ("pow3", "vap", "hill3", "log_power", "mmf", "janoschek", "weibull", "ilog2"):
        natural = fam.to_natural(start)
        for p, value in zip(fam.params, fam.reference_start, strict=True):
            assert float(natural[p.natural][0]) == pytest.approx(value, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(list(FAMILIES)),
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(1, 12),
    x=st.lists(st.floats(1.0, 500.0), min_size=1, max_size=15),
)
def test_vectorised_evaluation_equals_a_loop(
    name: str, seed: int, size: int, x: list[float]
) -> None:
    fam = FAMILIES[name]
    theta = fam.sample_prior(np.random.default_rng(seed), size)
    batch = fam.evaluate(x, theta)
    assert batch.shape == (size, len(x))
    loop = np.stack([fam.evaluate(x, theta[i]) for i in range(size)])
    np.testing.assert_array_equal(batch, loop)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_log_prior_is_the_sum_of_the_documented_densities(name: str) -> None:
    fam = FAMILIES[name]
    theta = fam.sample_prior(np.random.default_rng(5), 50)
    want = np.zeros(50)
    for i, p in enumerate(fam.params):
        if p.prior == "uniform":
            want += stats.uniform(p.p1, p.p2 - p.p1).logpdf(theta[:, i])
        else:
            want += stats.norm(p.p1, p.p2).logpdf(theta[:, i])
    np.testing.assert_allclose(fam.log_prior(theta), want, rtol=1e-12)
    outside = theta.copy()
    uniform = [i for i, p in enumerate(fam.params) if p.prior == "uniform"]
    if uniform:
        outside[:, uniform[0]] = fam.params[uniform[0]].p2 + 1e-9
        assert np.all(fam.log_prior(outside) == -np.inf)
        assert not np.any(fam.in_bounds(outside))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_prior_sampler_matches_its_density(name: str) -> None:
    fam = FAMILIES[name]
    draws = fam.sample_prior(np.random.default_rng(11), 20_000)
    assert np.all(fam.in_bounds(draws))
    for i, p in enumerate(fam.params):
        if p.prior == "uniform":
            assert draws[:, i].min() >= p.p1
            assert draws[:, i].max() <= p.p2
            assert draws[:, i].mean() == pytest.approx(0.5 * (p.p1 + p.p2), abs=0.02 * p.scale)
        else:
            assert draws[:, i].mean() == pytest.approx(p.p1, abs=0.03 * p.p2)
            assert draws[:, i].std() == pytest.approx(p.p2, rel=0.03)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_natural_round_trip(name: str) -> None:
    fam = FAMILIES[name]
    theta = fam.sample_prior(np.random.default_rng(2), 10)
    for row in theta:
        natural = {k: float(v[0]) for k, v in fam.to_natural(row).items()}
        np.testing.assert_allclose(fam.from_natural(**natural), row, rtol=1e-9, atol=1e-12)


def test_get_families_validates_names() -> None:
    assert [f.name for f in get_families(["ilog2", "pow3"])] == ["ilog2", "pow3"]
    assert len(get_families()) == 11
    with pytest.raises(ValueError, match="valid names"):
        get_families(["pow5"])
    with pytest.raises(ValueError, match="distinct"):
        get_families(["pow3", "pow3"])
    with pytest.raises(ValueError, match="non-empty"):
        get_families([])
