"""Benchmark learning-curve fits: seconds per curve on one core, and a batch through CurveFitter.

    python benchmarks/curves.py            # 20 curves per size, batch of 100 curves on 2 processes
    python benchmarks/curves.py --quick    # small CI smoke run (3 curves per size, batch of 4)
    python benchmarks/curves.py --json     # only the JSON line

Measured on this machine with the HyperDrive budget (100 walkers x 700 steps, burn-in 300):

(a) wall-clock seconds of ``fit_curve`` + ``CurvePrediction.from_posterior`` per curve with 10,
    30 and 60 observed points of x_max = 100, on curves drawn from the model's prior (median and
    p90 over the curves);
(b) the wall-clock seconds of a batch of 100 such curves (n = 10..60) through
    ``CurveFitter(workers=2)`` (spawned processes; pool start-up included).

Threads are pinned to one per process (OMP/OpenBLAS/MKL/torch env vars set before NumPy is
imported). The goal is a median under 1.0 s per curve.
"""

from __future__ import annotations

import os

for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
):
    os.environ[_var] = "1"

import argparse  # noqa: E402 - the thread settings above must precede numpy's import
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from hpctune.curves import (  # noqa: E402
    CurveFitter,
    CurvePrediction,
    CurveRequest,
    fit_curve,
    get_families,
    sample_prior_curve,
)

X_MAX = 100
SIZES = (10, 30, 60)


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def _curves(count: int, seed: int) -> list[np.ndarray]:
    """``count`` noisy curves of length X_MAX from the model's prior (normalised scale)."""
    rng = np.random.default_rng(seed)
    fams = get_families()
    return [sample_prior_curve(fams, X_MAX, rng).y for _ in range(count)]


def bench_single(curves: list[np.ndarray], n: int) -> dict[str, float]:
    """Seconds per fit + prediction with ``n`` observed points, one process."""
    times = []
    unknown = 0
    for i, y in enumerate(curves):
        start = time.perf_counter()
        post = fit_curve(y[:n], x_max=X_MAX, rng=np.random.default_rng(i))
        pred = CurvePrediction.from_posterior(post)
        times.append(time.perf_counter() - start)
        unknown += int(pred.unknown)
    return {
        f"n{n}_median_s": statistics.median(times),
        f"n{n}_p90_s": _percentile(times, 90),
        f"n{n}_unknown": float(unknown),
    }


def bench_batch(curves: list[np.ndarray], workers: int) -> dict[str, float]:
    """Seconds for a batch through ``CurveFitter(workers=workers)``."""
    rng = np.random.default_rng(7)
    requests = [
        CurveRequest(key=i, y=tuple(y[: int(rng.integers(10, 61))]), x_max=X_MAX, seed=i)
        for i, y in enumerate(curves)
    ]
    fitter = CurveFitter(workers=workers)
    start = time.perf_counter()
    results = fitter.fit(requests)
    seconds = time.perf_counter() - start
    return {
        "batch_curves": float(len(requests)),
        "batch_workers": float(workers),
        "batch_seconds": seconds,
        "batch_seconds_per_curve": seconds / len(requests),
        "batch_unknown": float(sum(p.unknown for p in results.values())),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a table (unless ``--json``) and one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small CI smoke run")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    per_size = 3 if args.quick else 20
    batch = 4 if args.quick else 100
    figures: dict[str, Any] = {"quick": args.quick, "budget": "hyperdrive", "x_max": X_MAX}
    single = _curves(per_size, seed=1)
    for n in SIZES:
        figures.update(bench_single(single, n))
    figures.update(bench_batch(_curves(batch, seed=2), workers=2))
    if not args.json:
        print(f"{'observed points':>16} {'median s':>9} {'p90 s':>9}  (100 walkers x 700 steps)")
        for n in SIZES:
            print(f"{n:>16} {figures[f'n{n}_median_s']:>9.3f} {figures[f'n{n}_p90_s']:>9.3f}")
        print(
            f"batch of {batch} curves, CurveFitter(workers=2): {figures['batch_seconds']:.2f} s "
            f"({figures['batch_seconds_per_curve']:.3f} s per curve)"
        )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
