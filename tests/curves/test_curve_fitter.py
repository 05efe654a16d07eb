"""CurveFitter: pool == in-process for the same seeds, ordering, isolation of broken requests."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from hpctune.curves import Budget, CurveFitter, CurveRequest, FitOptions, fit_many

OPTIONS = FitOptions(
    model="domhan", budget=Budget(nwalkers=40, nsamples=120, burn_in=60), n_keep=100
)


def _requests() -> list[CurveRequest]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(5):
        n = 8 + 3 * i
        x = np.arange(1, n + 1)
        acc = 0.9 - 0.6 * x ** -(0.3 + 0.1 * i) + rng.normal(0, 0.01, n)
        out.append(CurveRequest(key=f"trial-{i}", y=tuple(acc), x_max=40, seed=100 + i))
    loss = 2.0 - 1.5 * (1 - np.exp(-np.arange(1, 13) / 5)) + rng.normal(0, 0.02, 12)
    out.append(
        CurveRequest(key=("loss", 7), y=tuple(loss), x_max=40, bounds=(0.0, 2.5), mode="min")
    )
    out.append(CurveRequest(key="short", y=(0.1, 0.2), x_max=40, seed=3))
    return out


def _dicts(results: dict[object, object]) -> dict[object, object]:
    return {k: v.to_dict() for k, v in results.items()}  # type: ignore[attr-defined]


def test_pool_equals_in_process_for_the_same_seeds() -> None:
    requests = _requests()
    serial = CurveFitter(workers=0, options=OPTIONS).fit(requests)
    pooled = CurveFitter(workers=2, options=OPTIONS).fit(requests)
    one_per_task = CurveFitter(workers=2, options=OPTIONS, chunk_size=1).fit(requests)
    assert list(serial) == [r.key for r in requests]
    assert _dicts(pooled) == _dicts(serial)
    assert _dicts(one_per_task) == _dicts(serial)
    assert not serial["trial-0"].unknown
    assert not serial[("loss", 7)].unknown
    assert serial["short"].unknown
    # order and grouping do not matter: each request carries its seed
    shuffled = CurveFitter(options=OPTIONS).fit(list(reversed(requests)))
    assert _dicts(shuffled) == _dicts(serial)
    # and the seed does
    reseeded = [
        CurveRequest(
            key=r.key, y=r.y, x_max=r.x_max, bounds=r.bounds, mode=r.mode, seed=r.seed + 1
        )
        for r in requests[:1]
    ]
    assert fit_many(reseeded, OPTIONS)[0].to_dict() != serial["trial-0"].to_dict()


def test_fit_many_is_shippable_and_ordered() -> None:
    requests = _requests()[:3]
    # what a Slurm array task receives: a pickled function and pickled arguments
    fn = pickle.loads(pickle.dumps(fit_many))
    args = pickle.loads(pickle.dumps((requests, OPTIONS)))
    results = fn(*args)
    assert [p.n for p in results] == [len(r.y) for r in requests]
    assert [p.to_dict() for p in results] == [p.to_dict() for p in fit_many(requests, OPTIONS)]


def test_a_broken_request_gives_unknown_without_sinking_the_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = _requests()[0]
    bad = CurveRequest(key="bad", y=good.y, x_max=40, bounds=(1.0, 0.0))
    results = CurveFitter(options=OPTIONS).fit([bad, good])
    assert results["bad"].unknown
    assert "ValueError" in results["bad"].reason
    assert not results[good.key].unknown
    assert "bad" in caplog.text


def test_requests_and_fitter_validate_input() -> None:
    with pytest.raises(ValueError, match="seed"):
        CurveRequest(key=1, y=(0.1, 0.2, 0.3), x_max=10, seed=-1)
    with pytest.raises(ValueError, match="workers"):
        CurveFitter(workers=-1)
    with pytest.raises(ValueError, match="unique"):
        CurveFitter().fit(
            [CurveRequest(key=1, y=(0.1,), x_max=5), CurveRequest(key=1, y=(0.2,), x_max=5)]
        )
    request = CurveRequest(key=1, y=np.array([0.1, 0.2]), x_max=5)  # type: ignore[arg-type]
    assert request.y == (0.1, 0.2)
