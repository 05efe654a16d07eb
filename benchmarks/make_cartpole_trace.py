"""Record a reinforcement-learning trace: the cartpole example, 64 configurations x 30 steps.

    python benchmarks/make_cartpole_trace.py          # writes benchmarks/traces/cartpole.h5
    python benchmarks/make_cartpole_trace.py --num-trials 4 --epochs 3 --out /tmp/small.h5

Runs ``jobs/cartpole`` (advantage actor-critic on Gymnasium's CartPole-v1; needs
``pip install -e ".[rl]"``) with more configurations under the Default policy, and exports the
journal as a trace (mean greedy return of 8 episodes, mode max, ``metric_bounds`` [0, 500],
``random_level`` 22: a random policy). Good configurations reach exactly 500, the episode's time
limit and the metric's bound. See ``_record_trace.py``.
"""

from __future__ import annotations

import sys

from _record_trace import REPO, script_main

JOB = REPO / "jobs" / "cartpole"
OUT = REPO / "benchmarks" / "traces" / "cartpole.h5"


def main(argv: list[str] | None = None) -> int:
    """Run the study and export the trace."""
    return script_main(
        argv,
        __doc__.split("\n\n")[0],
        JOB,
        OUT,
        name="cartpole-trace",
        num_trials=64,
        epochs=30,
        random_level=22.0,
    )


if __name__ == "__main__":
    sys.exit(main())
