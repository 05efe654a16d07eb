"""hpctune policies over the configuration orders of the peers harness (issue 17).

``../shared/tools/peers/simulate_peers.py`` measures Ray Tune, Syne Tune and Optuna schedulers
with seed k's order ``numpy.random.default_rng(k).permutation(n_configs)``, S workers, no costs,
and the time at which a trial first reports a value at least as good as the target. This script
replays the same orders through ``hpctune.simulator.simulate`` (whose own seeded orders differ),
so that hpctune's figures and the peers' compare order by order. The target is the trace's
default (the value only the best 5 % of configurations reach); give the peers harness the same
one (a ``target`` attribute on a copy of the trace, negated for ``mode = "min"``, since the
harness negates loss curves).

    python benchmarks/peer_orders.py [--traces benchmarks/traces] [--slots 8] [--seeds 25]
        [--policy hybrid --policy asha ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from hpctune.analysis.traces import Trace
from hpctune.simulator import simulate

REPO = Path(__file__).resolve().parent.parent


def peer_order(seed: int, n_configs: int) -> list[int]:
    """The peers harness' configuration order of ``seed``."""
    return [int(i) for i in np.random.default_rng(seed).permutation(n_configs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=REPO / "benchmarks" / "traces")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument("--policy", action="append", default=None)
    args = parser.parse_args()
    names = args.policy or ["hybrid", "asha", "earlyterm"]
    print("trace | policy | median time to target s | q25 | q75 | reached | target")
    for path in sorted(args.traces.glob("*.h5")):
        trace = Trace.load(path)
        for name in names:
            times = []
            for seed in range(args.seeds):
                order = peer_order(seed, trace.num_configs)
                result = simulate(trace, name, {}, args.slots, seed, order=order)
                ttt = result.time_to_target
                times.append(np.inf if ttt is None else ttt)
            t = np.asarray(times)
            print(
                f"{path.stem} | {name} | {np.median(t):.3g} | {np.quantile(t, 0.25):.3g} | "
                f"{np.quantile(t, 0.75):.3g} | {int(np.isfinite(t).sum())}/{len(t)} | "
                f"{trace.default_target():.4g}",
                flush=True,
            )


if __name__ == "__main__":
    main()
