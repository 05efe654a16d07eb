"""Record a trace with long learning curves: the charlm example, 128 configurations x 60 steps.

    python benchmarks/make_charlm_trace.py             # writes benchmarks/traces/charlm.h5
    python benchmarks/make_charlm_trace.py --num-trials 4 --epochs 3 --out /tmp/small.h5

Runs ``jobs/charlm`` (a character-level language model of Python's standard library sources,
plain SGD over a wide learning-rate range; its search space and training script) with more
configurations under the Default policy, and exports the journal as a trace (mode min,
``metric_bounds`` [0, 5], ``random_level`` 3.16: the loss of a model that ignores its input and
predicts the character frequencies). See ``_record_trace.py``.
"""

from __future__ import annotations

import sys

from _record_trace import REPO, script_main

JOB = REPO / "jobs" / "charlm"
OUT = REPO / "benchmarks" / "traces" / "charlm.h5"
RANDOM_LEVEL = 3.16  # [study].random_level of jobs/charlm/study.toml


def main(argv: list[str] | None = None) -> int:
    """Run the study and export the trace."""
    return script_main(
        argv,
        __doc__.split("\n\n")[0],
        JOB,
        OUT,
        name="charlm-trace",
        num_trials=128,
        epochs=60,
        random_level=RANDOM_LEVEL,
    )


if __name__ == "__main__":
    sys.exit(main())
