"""Benchmark learning-curve fits: the amortised model against Domhan's MCMC, in one run.

    python benchmarks/curves.py            # 20 curves per size, batch of 100 curves on 2 processes
    python benchmarks/curves.py --quick    # small CI smoke run (3 curves per size, batch of 4)
    python benchmarks/curves.py --json     # only the JSON line

**Fits per CPU-second** of both curve models on the same prior curves (x_max = 100, n = 10..60),
in this process (CPU time of this process, threads pinned to one): Domhan's model with the
HyperDrive budget, one curve after the other (today's ``[curves] model = "domhan"``), and the
amortised model on the same requests, one curve per call and all in one call (as
``CurveFitter`` and the simulator batch them). The issue's goal is at least 10x more.

Also measured with the HyperDrive budget (100 walkers x 700 steps, burn-in 300):

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
    FitOptions,
    fit_curve,
    fit_many,
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
    fitter = CurveFitter(workers=workers, options=FitOptions(model="domhan"))
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


def bench_models(curves: list[np.ndarray]) -> dict[str, float]:
    """Fits per CPU-second of Domhan's MCMC and of the amortised model, on the same requests."""
    rng = np.random.default_rng(11)
    requests = [
        CurveRequest(key=i, y=tuple(y[: int(rng.integers(10, 61))]), x_max=X_MAX, seed=i)
        for i, y in enumerate(curves)
    ]
    out: dict[str, float] = {"model_curves": float(len(requests))}
    fit_many(requests[:2], FitOptions(model="amortised"))  # load the weights once
    for label, model, batched in (
        ("domhan", "domhan", False),
        ("amortised_single", "amortised", False),
        ("amortised_batch", "amortised", True),
    ):
        options = FitOptions(model=model)  # type: ignore[arg-type]
        repeat = 1 if model == "domhan" else 20
        cpu = time.process_time()
        for _ in range(repeat):
            if batched:
                fit_many(requests, options)
            else:
                for request in requests:
                    fit_many([request], options)
        seconds = time.process_time() - cpu
        out[f"{label}_fits_per_cpu_second"] = repeat * len(requests) / seconds
    base = out["domhan_fits_per_cpu_second"]
    out["amortised_single_speedup"] = out["amortised_single_fits_per_cpu_second"] / base
    out["amortised_batch_speedup"] = out["amortised_batch_fits_per_cpu_second"] / base
    return out


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
    figures.update(bench_models(_curves(per_size, seed=3)))
    if not args.json:
        print(f"{'observed points':>16} {'median s':>9} {'p90 s':>9}  (100 walkers x 700 steps)")
        for n in SIZES:
            print(f"{n:>16} {figures[f'n{n}_median_s']:>9.3f} {figures[f'n{n}_p90_s']:>9.3f}")
        print(
            f"batch of {batch} curves, CurveFitter(workers=2): {figures['batch_seconds']:.2f} s "
            f"({figures['batch_seconds_per_curve']:.3f} s per curve)"
        )
        print(f"fits per CPU-second on {per_size} curves (n = 10..60 of 100):")
        for label in ("domhan", "amortised_single", "amortised_batch"):
            rate = figures[f"{label}_fits_per_cpu_second"]
            ratio = rate / figures["domhan_fits_per_cpu_second"]
            print(f"{label:>18} {rate:>10.1f}  ({ratio:.0f}x domhan)")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
