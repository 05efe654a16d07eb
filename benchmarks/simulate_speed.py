"""How fast the simulator runs the controller's rules (issue 14): policy decisions per second.

For each policy, ``hpctune.simulator.simulate`` replays a 200-configuration x 60-step trace
(``benchmarks/traces/digits-cnn.h5``) on 8 and 64 slots; a decision is one call of the
policy's ``decide`` (an event the policy was offered: a report, a boundary, a slot to fill, a
prediction). Prints one line per run: decisions, events the simulator carried out (journal
rows), seconds, decisions per second, and the machine's load.

    python benchmarks/simulate_speed.py [--trace T.h5] [--slots 8 --slots 64] [--policy asha]
        [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.policies import Event, Policy, PolicyDecision, StudyView
from hpctune.simulator import SimulatorConfig, build_policy, simulate, simulation_context
from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parent.parent
POLICIES = ("default", "asha", "sha", "hyperband", "median", "hybrid", "pbt")


class Counted:
    """Counts a policy's ``decide`` calls (the object the simulator is given is the policy)."""

    def __init__(self, policy: Policy) -> None:
        self.calls = 0
        original = policy.decide

        def decide(view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
            self.calls += 1
            return original(view, event, rng)

        policy.decide = decide  # type: ignore[method-assign]


def run(trace: Trace, name: str, slots: int, seed: int, max_steps: int | None) -> dict[str, Any]:
    """One simulation of ``name`` on ``slots`` slots; its decisions and their rate."""
    policy = build_policy(
        name, None, simulation_context(trace, SimulatorConfig(max_steps=max_steps))
    )
    counter = Counted(policy)
    start = time.perf_counter()
    result = simulate(trace, policy, slots=slots, seed=seed, max_steps=max_steps)
    seconds = time.perf_counter() - start
    return {
        "policy": name,
        "slots": slots,
        "decisions": counter.calls,
        "trials": result.trials_started,
        "seconds": round(seconds, 3),
        "decisions_per_s": round(counter.calls / seconds),
        "load": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Run every policy at every slot count; print one JSON line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=REPO / "benchmarks/traces/digits-cnn.h5")
    parser.add_argument("--slots", type=int, action="append")
    parser.add_argument("--policy", action="append", choices=POLICIES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="40 configurations, 12 steps")
    args = parser.parse_args(argv)
    trace = Trace.load(args.trace)
    max_steps = None
    if args.quick:
        trace, max_steps = trace.subset(range(40)), 12
    for slots in args.slots or [8, 64]:
        for name in args.policy or POLICIES:
            print(json.dumps(run(trace, name, slots, args.seed, max_steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
