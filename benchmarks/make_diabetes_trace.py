"""Record a second real trace: the diabetes example (a loss, mode "min"), 128 configurations x 40.

    python benchmarks/make_diabetes_trace.py            # writes benchmarks/traces/diabetes.h5
    python benchmarks/make_diabetes_trace.py --num-trials 8 --epochs 6 --out /tmp/small.h5

Runs ``jobs/diabetes`` (an MLP regressor on scikit-learn's bundled diabetes data, trained with
PyTorch; its search space and training script) with more configurations and epochs under the
Default policy, and exports the journal as a trace (``random_level`` 1.0: predicting the mean;
the trace keeps the study's ``metric_bounds`` [0, 2]). About 50 s on a 2-core machine. See
``_record_trace.py``.
"""

from __future__ import annotations

import sys

from _record_trace import REPO, script_main

JOB = REPO / "jobs" / "diabetes"
OUT = REPO / "benchmarks" / "traces" / "diabetes.h5"


def main(argv: list[str] | None = None) -> int:
    """Run the study and export the trace."""
    return script_main(
        argv,
        __doc__.split("\n\n")[0],
        JOB,
        OUT,
        name="diabetes-trace",
        num_trials=128,
        epochs=40,
        random_level=1.0,
    )


if __name__ == "__main__":
    sys.exit(main())
