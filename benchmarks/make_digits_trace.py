"""Record a trace from real training: the digits example, 128 configurations, 30 epochs each.

    python benchmarks/make_digits_trace.py                  # writes benchmarks/traces/digits.h5
    python benchmarks/make_digits_trace.py --num-trials 8 --epochs 5 --out /tmp/small.h5
    python benchmarks/make_digits_trace.py --metric val_loss --out benchmarks/traces/digits-loss.h5

Runs ``jobs/digits`` (its search space and training script) with more configurations and
epochs (the cosine schedule's ``total_steps`` too) under the Default policy, and exports the
journal as a trace (``random_level`` 0.1: ten classes; ln 10 for the loss). See
``_record_trace.py``.
"""

from __future__ import annotations

import math
import re
import sys

from _record_trace import REPO, parser, record_trace

JOB = REPO / "jobs" / "digits"
OUT = REPO / "benchmarks" / "traces" / "digits.h5"


def to_loss(text: str) -> str:
    """The digits study.toml minimising the validation loss (bounds [0, 2.5]) instead."""
    text, count = re.subn(
        r'^metric = "val_accuracy"\nmode = "max"',
        'metric = "val_loss"\nmode = "min"\nmetric_bounds = [0.0, 2.5]',
        text,
        count=1,
        flags=re.MULTILINE,
    )
    if count != 1:
        raise SystemExit(f"{JOB / 'study.toml'}: no metric/mode lines to change")
    return text


def main(argv: list[str] | None = None) -> int:
    """Run the study and export the trace."""
    args_parser = parser(__doc__.split("\n\n")[0], OUT, num_trials=128, epochs=30)
    args_parser.add_argument(
        "--metric",
        choices=["val_accuracy", "val_loss"],
        default="val_accuracy",
        help="the study metric, hence the trace's (val_loss: mode min)",
    )
    args = args_parser.parse_args(argv)
    loss = args.metric == "val_loss"
    record_trace(
        JOB,
        args.out,
        name="digits-trace",
        num_trials=args.num_trials,
        epochs=args.epochs,
        slots=args.slots,
        # a random model: 10 % accuracy, cross-entropy ln 10
        random_level=math.log(10) if loss else 0.1,
        keep=args.keep,
        extra={r"^total_steps = \d+": f"total_steps = {args.epochs}"},
        edit=to_loss if loss else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
