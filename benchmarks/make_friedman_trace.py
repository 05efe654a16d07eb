"""Record a regression trace: the friedman example, 96 configurations x 40 epochs.

    python benchmarks/make_friedman_trace.py          # writes benchmarks/traces/friedman.h5
    python benchmarks/make_friedman_trace.py --num-trials 4 --epochs 3 --out /tmp/small.h5

Runs ``jobs/friedman`` (an MLP regressor on scikit-learn's generated Friedman #1 data with SGD;
its search space and training script) with more configurations under the Default policy, and
exports the journal as a trace (validation loss in units of the target's variance, mode min,
``metric_bounds`` [0, 2], ``random_level`` 1.0: predicting the mean). See ``_record_trace.py``.
"""

from __future__ import annotations

import sys

from _record_trace import REPO, script_main

JOB = REPO / "jobs" / "friedman"
OUT = REPO / "benchmarks" / "traces" / "friedman.h5"


def main(argv: list[str] | None = None) -> int:
    """Run the study and export the trace."""
    return script_main(
        argv,
        __doc__.split("\n\n")[0],
        JOB,
        OUT,
        name="friedman-trace",
        num_trials=96,
        epochs=40,
        random_level=1.0,
    )


if __name__ == "__main__":
    sys.exit(main())
