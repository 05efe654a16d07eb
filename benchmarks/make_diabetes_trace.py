"""Record a second real trace: the diabetes example (a loss, mode "min"), 128 configurations x 40.

    python benchmarks/make_diabetes_trace.py            # writes benchmarks/traces/diabetes.h5
    python benchmarks/make_diabetes_trace.py --num-trials 8 --epochs 6 --out /tmp/small.h5

Runs ``jobs/diabetes`` (an MLP regressor on scikit-learn's bundled diabetes data, trained with
PyTorch; its search space and training script) with more configurations and epochs under the
Default policy (every trial to its last epoch) through ``hpctune launch ... --local
--study-dir ...``, then exports the study's journal with ``Trace.from_study`` (random_level 1.0:
predicting the mean; the trace keeps the study's ``metric_bounds`` [0, 2]). The configurations
come from the study's seed 0, training is seeded per trial, so the curves are the same on every
run up to floating-point differences between machines. About 50 s on a 2-core machine. The study
directory is deleted unless ``--keep`` is given.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DIABETES = REPO / "jobs" / "diabetes"
OUT = REPO / "benchmarks" / "traces" / "diabetes.h5"


def make_spec(folder: Path, num_trials: int, epochs: int, slots: int) -> Path:
    """Write the diabetes study.toml with more trials, epochs and slots into ``folder``."""
    text = (DIABETES / "study.toml").read_text()
    replacements = {
        r"^name = .*$": 'name = "diabetes-trace"',
        r"^max_steps = \d+": f"max_steps = {epochs}",
        r"^num_trials = \d+": f"num_trials = {num_trials}",
        r"^slots = \d+": f"slots = {slots}",
    }
    for pattern, value in replacements.items():
        text, count = re.subn(pattern, value, text, count=1, flags=re.MULTILINE)
        if count != 1:
            raise SystemExit(f"{DIABETES / 'study.toml'}: no line matches {pattern!r}")
    if 'name = "default"' not in text.split("[policy]", 1)[1]:
        raise SystemExit("the diabetes study must use the default policy")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(DIABETES / "train.py", folder / "train.py")
    spec = folder / "study.toml"
    spec.write_text(text)
    return spec


def main(argv: list[str] | None = None) -> int:
    """Run the study and export the trace."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--num-trials", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="keep the study here")
    args = parser.parse_args(argv)

    from hpctune.traces import Trace

    with tempfile.TemporaryDirectory(prefix="hpctune-diabetes-trace-") as tmp:
        spec = make_spec(Path(tmp) / "spec", args.num_trials, args.epochs, args.slots)
        study_dir = args.keep or Path(tmp) / "study"
        started = time.monotonic()
        command = [sys.executable, "-m", "hpctune.cli", "launch", str(spec), "--local"]
        result = subprocess.run(
            [*command, "--study-dir", str(study_dir)], capture_output=True, text=True
        )
        if result.returncode != 0:
            print(result.stdout, result.stderr, sep="\n", file=sys.stderr)
            return result.returncode
        trace = Trace.from_study(study_dir, random_level=1.0)
        path = trace.save(args.out)
    lengths = trace.lengths()
    best = float(trace.sign * np.nanmax(trace.sign * trace.best_values()))
    training = float(np.nansum(trace.epoch_seconds))
    print(
        f"{path}: {trace.num_configs} configurations x {trace.num_epochs} epochs "
        f"({int((lengths == trace.num_epochs).sum())} complete), "
        f"{training:.0f} training seconds, study took {time.monotonic() - started:.0f} s; "
        f"best {trace.metric} {best:.4f}, metric_bounds {trace.metric_bounds}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
