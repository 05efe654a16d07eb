"""Record a trace from real training: the digits example, 128 configurations, 30 epochs each.

    python benchmarks/make_digits_trace.py                  # writes benchmarks/traces/digits.h5
    python benchmarks/make_digits_trace.py --num-trials 8 --epochs 5 --out /tmp/small.h5
    python benchmarks/make_digits_trace.py --metric val_loss --out benchmarks/traces/digits-loss.h5

Runs ``jobs/digits`` (its search space and training script) with more configurations and
epochs under the Default policy (every trial to its last epoch) through
``hpctune launch ... --local --study-dir ...``, then exports the study's journal as a trace with
``Trace.from_study`` (``random_level`` 0.1: ten classes). The study directory is deleted unless
``--keep`` is given.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "jobs" / "digits"
OUT = REPO / "benchmarks" / "traces" / "digits.h5"


def make_spec(
    folder: Path, num_trials: int, epochs: int, slots: int, metric: str = "val_accuracy"
) -> Path:
    """Write the digits study.toml with more trials, epochs and slots into ``folder``; with
    ``metric = "val_loss"`` the study minimises the validation loss (bounds [0, 2.5])."""
    text = (DIGITS / "study.toml").read_text()
    if metric == "val_loss":
        text = re.sub(
            r'^metric = "val_accuracy"\nmode = "max"',
            'metric = "val_loss"\nmode = "min"\nmetric_bounds = [0.0, 2.5]',
            text,
            count=1,
            flags=re.MULTILINE,
        )
    replacements = {
        r"^name = .*$": 'name = "digits-trace"',
        r"^max_steps = \d+": f"max_steps = {epochs}",
        r"^num_trials = \d+": f"num_trials = {num_trials}",
        r"^total_steps = \d+": f"total_steps = {epochs}",
        r"^slots = \d+": f"slots = {slots}",
    }
    for pattern, value in replacements.items():
        text, count = re.subn(pattern, value, text, count=1, flags=re.MULTILINE)
        if count != 1:
            raise SystemExit(f"{DIGITS / 'study.toml'}: no line matches {pattern!r}")
    if 'name = "default"' not in text.split("[policy]", 1)[1]:
        raise SystemExit("the digits study must use the default policy")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(DIGITS / "train.py", folder / "train.py")
    spec = folder / "study.toml"
    spec.write_text(text)
    return spec


def main(argv: list[str] | None = None) -> int:
    """Run the study and export the trace."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--num-trials", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="keep the study here")
    parser.add_argument(
        "--metric",
        choices=["val_accuracy", "val_loss"],
        default="val_accuracy",
        help="the study metric, hence the trace's (val_loss: mode min)",
    )
    args = parser.parse_args(argv)

    from hpctune.traces import Trace

    with tempfile.TemporaryDirectory(prefix="hpctune-digits-trace-") as tmp:
        spec = make_spec(Path(tmp) / "spec", args.num_trials, args.epochs, args.slots, args.metric)
        study_dir = args.keep or Path(tmp) / "study"
        started = time.monotonic()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "hpctune.cli",
                "launch",
                str(spec),
                "--local",
                "--study-dir",
                str(study_dir),
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            print(result.stdout, result.stderr, sep="\n", file=sys.stderr)
            return result.returncode
        # a random model: 10 % accuracy, cross-entropy ln 10
        random_level = 0.1 if args.metric == "val_accuracy" else math.log(10)
        trace = Trace.from_study(study_dir, random_level=random_level)
        path = trace.save(args.out)
    lengths = trace.lengths()
    best = float(trace.sign * np.nanmax(trace.sign * trace.best_values()))
    training = float(np.nansum(trace.epoch_seconds))
    print(
        f"{path}: {trace.num_configs} configurations x {trace.num_epochs} epochs "
        f"({int((lengths == trace.num_epochs).sum())} complete), "
        f"{training:.0f} training seconds, study took {time.monotonic() - started:.0f} s; "
        f"best {trace.metric} {best:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
