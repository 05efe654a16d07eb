"""Record a trace with long curves that turn back: the digits-cnn example, 200 configurations x 60
epochs.

    python benchmarks/make_digits_cnn_trace.py         # writes benchmarks/traces/digits-cnn.h5
    python benchmarks/make_digits_cnn_trace.py --num-trials 4 --epochs 3 --out /tmp/small.h5

Runs ``jobs/digits-cnn`` (a small CNN on scikit-learn's digits with 30 % of the training labels
wrong; its search space and training script) with more configurations under the Default policy,
and exports the journal as a trace (validation accuracy, mode max, ``metric_bounds`` [0, 1],
``random_level`` 0.1). 200 configurations make it the size of the simulation-speed measurement
(``docs/traces.md``). See ``_record_trace.py``.
"""

from __future__ import annotations

import sys

from _record_trace import REPO, script_main

JOB = REPO / "jobs" / "digits-cnn"
OUT = REPO / "benchmarks" / "traces" / "digits-cnn.h5"
RANDOM_LEVEL = 0.1  # [study].random_level of jobs/digits-cnn/study.toml: ten classes


def main(argv: list[str] | None = None) -> int:
    """Run the study and export the trace."""
    return script_main(
        argv,
        __doc__.split("\n\n")[0],
        JOB,
        OUT,
        name="digits-cnn-trace",
        num_trials=200,
        epochs=60,
        random_level=RANDOM_LEVEL,
    )


if __name__ == "__main__":
    sys.exit(main())
