"""Record a late-learner trace: the parity example, 96 configurations x 30 steps.

    python benchmarks/make_parity_trace.py          # writes benchmarks/traces/parity.h5
    python benchmarks/make_parity_trace.py --num-trials 4 --epochs 3 --out /tmp/small.h5

Runs ``jobs/parity`` (an MLP learning a sparse parity of 3 of 24 bits with SGD; its search space
and training script) with more configurations under the Default policy, and exports the journal
as a trace (held-out accuracy, mode max, ``metric_bounds`` [0, 1], ``random_level`` 0.5). The
configurations that learn the parity rise from chance to exactly 1.0, the metric's bound. See
``_record_trace.py``.
"""

from __future__ import annotations

import sys

from _record_trace import REPO, script_main

JOB = REPO / "jobs" / "parity"
OUT = REPO / "benchmarks" / "traces" / "parity.h5"


def main(argv: list[str] | None = None) -> int:
    """Run the study and export the trace."""
    return script_main(
        argv,
        __doc__.split("\n\n")[0],
        JOB,
        OUT,
        name="parity-trace",
        num_trials=96,
        epochs=30,
        random_level=0.5,
    )


if __name__ == "__main__":
    sys.exit(main())
