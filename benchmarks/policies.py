"""Compare every policy in the simulator on a real trace (HyperDrive §7.1's experiment).

For S in {4, 8, 16} slots and K configuration orders (default 25), the median and quartiles of
the time to reach the target for POP, Default, Bandit, EarlyTerm, SHA, ASHA, Hyperband and
median stopping, and the ratio of each to POP; also writes POP's resource split over time
(HyperDrive Fig. 4c) for one run.

    python benchmarks/policies.py [--trace benchmarks/traces/digits.h5] [--seeds 25]
        [--boundary 5] [--predictions ~/.cache/hpctune/digits-predictions.jsonl]
        [--plot pop-split.png] [--json] [--quick]

The evaluation boundary b of POP, EarlyTerm and Bandit is the same (``--boundary``; the paper's
heuristic is 5-10 % of the maximum epochs, and its b = 10 for CIFAR-10). Learning-curve fits are
made once per (configuration, points) and kept in ``--predictions``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.analysis.traces import Trace
from hpctune.simulator import PredictionCache, build_policy, run_many
from hpctune.simulator import label as policy_label
from hpctune.simulator._predictions import prefetch_for
from hpctune.simulator.plots import plot_split

REPO = Path(__file__).resolve().parent.parent
NAMES = ("pop", "default", "bandit", "earlyterm", "sha", "asha", "hyperband", "median")


def policies(boundary: int, target: float) -> list[tuple[str, dict[str, Any]]]:
    """Every policy with the paper's settings, b shared by POP, EarlyTerm and Bandit; POP is
    given the target, as its user would (HyperDrive §3: y_target is a user input)."""
    with_b = {"pop", "earlyterm", "bandit"}
    specs = [(name, {"boundary": boundary} if name in with_b else {}) for name in NAMES]
    specs[0][1]["target"] = target
    return specs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", type=Path, default=REPO / "benchmarks/traces/digits.h5")
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument("--slots", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--boundary", type=int, default=5)
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument(
        "--predictions", type=Path, default=Path.home() / ".cache/hpctune/digits-predictions.jsonl"
    )
    parser.add_argument("--fit-workers", type=int, default=2)
    parser.add_argument("--plot", type=Path, default=None, help="POP's split over time (PNG)")
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    parser.add_argument("--quick", action="store_true", help="2 seeds, 4 slots (CI smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.slots = 2, [4]
    trace = Trace.load(args.trace)
    target = args.target if args.target is not None else trace.default_target()
    specs = policies(args.boundary, target)
    pop_label = policy_label(*specs[0])
    cache = PredictionCache(trace, path=args.predictions)
    start = time.time()
    fitted = prefetch_for(
        cache, [build_policy(n, o) for n, o in specs], trace.num_epochs, workers=args.fit_workers
    )
    fit_s = time.time() - start
    table: dict[int, dict[str, Any]] = {}
    first_pop = None
    for slots in args.slots:
        many = run_many(trace, specs, slots, args.seeds, predictions=cache, target=target)
        table[slots] = {"target": many.target, "policies": {}}
        pop_median = _median_time(many.runs[pop_label])
        for label, runs in many.runs.items():
            median = _median_time(runs)
            times = [r.time_to_target for r in runs if r.time_to_target is not None]
            table[slots]["policies"][label] = {
                "reached": len(times),
                "runs": len(runs),
                "time_to_target_median": median,
                "time_to_target_q25": float(np.percentile(times, 25)) if times else None,
                "time_to_target_q75": float(np.percentile(times, 75)) if times else None,
                "gpu_hours_median": float(np.median([r.gpu_hours for r in runs])),
                "ratio_to_pop": median / pop_median if median and pop_median else None,
            }
        if first_pop is None:
            first_pop = many.runs[pop_label][0]
    if args.plot is not None and first_pop is not None:
        plot_split(first_pop, args.plot)
    result = {
        "trace": str(args.trace),
        "seeds": args.seeds,
        "boundary": args.boundary,
        "fits": fitted,
        "fit_seconds": fit_s,
        "slots": table,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"trace {args.trace.name}: {trace.num_configs} configurations x {trace.num_epochs} "
        f"epochs; {args.seeds} orders; b = {args.boundary}; {fitted} new curve fits "
        f"({fit_s:.0f} s)"
    )
    for slots, row in table.items():
        print(f"\nS = {slots} slots, target {row['target']:.4g}: time to target (s)")
        print(f"{'policy':46}{'reached':>9}{'median':>9}{'q25':>9}{'q75':>9}{'x POP':>8}")
        for label, r in row["policies"].items():
            print(
                f"{label:46}{r['reached']:>5}/{r['runs']:<3}{_f(r['time_to_target_median'])}"
                f"{_f(r['time_to_target_q25'])}{_f(r['time_to_target_q75'])}"
                f"{_f(r['ratio_to_pop'], 8, 2)}"
            )
    print(json.dumps(result))


def _median_time(runs: list[Any]) -> float | None:
    """Median time to target over runs; a run that never reached it counts as infinite."""
    times = [r.time_to_target if r.time_to_target is not None else math.inf for r in runs]
    median = float(np.median(times))
    return None if math.isinf(median) else median


def _f(value: float | None, width: int = 9, digits: int = 3) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


if __name__ == "__main__":
    main()
