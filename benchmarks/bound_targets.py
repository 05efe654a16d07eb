"""Targets at the metric's bound: the curve-model policies before and after issue 32's fix.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bound_targets.py [--seeds 25] [--slots 8]

On the traces whose default target is the metric's upper bound (``parity``: accuracy 1.0;
``cartpole``: return 500), runs POP (given the target, b = 5), EarlyTerm (b = 5) and ``hybrid``
with their defaults over the peers' configuration orders, once with
``hpctune.curves.predict.BOUND_TOLERANCE`` set to 0 (the behaviour before the fix: a target at
the bound asked exactly, so a continuous predictive answers P = 0) and once with the shipped
tolerance, and prints how many orders reach the target and the median time to it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

import hpctune.curves.predict as predict
from hpctune.simulator import simulate
from hpctune.simulator._predictions import PredictionCache
from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parent.parent
TRACES = ("parity", "cartpole")
POLICIES = (("pop", {"boundary": 5}), ("earlyterm", {"boundary": 5}), ("hybrid", {}))


def main() -> None:
    """Run every policy with and without the tolerance; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument("--slots", type=int, default=8)
    args = parser.parse_args()
    shipped = predict.BOUND_TOLERANCE
    print("| trace | policy | before: reached, median s | after: reached, median s |")
    print("|---|---|---|---|")
    for name in TRACES:
        trace = Trace.load(REPO / "benchmarks" / "traces" / f"{name}.h5")
        target = trace.default_target()
        for policy, options in POLICIES:
            cells = []
            for tolerance in (0.0, shipped):
                predict.BOUND_TOLERANCE = tolerance
                # a cache per tolerance: a prediction remembers its answers per target
                cache = PredictionCache(trace, bounds=trace.metric_bounds or (0.0, 1.0))
                opts = dict(options, target=target) if policy == "pop" else dict(options)
                times = []
                for seed in range(args.seeds):
                    order = [
                        int(i) for i in np.random.default_rng(seed).permutation(len(trace.hparams))
                    ]
                    result = simulate(
                        trace,
                        policy,
                        opts,
                        args.slots,
                        seed,
                        order=order,
                        target=target,
                        stop_at_target=True,
                        predictions=cache,
                    )
                    times.append(result.time_to_target)
                reached = [t for t in times if t is not None]
                med = sorted(math.inf if t is None else t for t in times)[len(times) // 2]
                cells.append(f"{len(reached)}/{len(times)}, {med:.3g}")
            print(
                f"| {name} (target {target:g}) | {policy} | {cells[0]} | {cells[1]} |", flush=True
            )
    predict.BOUND_TOLERANCE = shipped


if __name__ == "__main__":
    main()
