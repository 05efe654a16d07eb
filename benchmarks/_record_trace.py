"""Record a trace from real training: shared by the ``make_*_trace.py`` scripts.

:func:`record_trace` copies a job of ``jobs/`` (its ``study.toml`` and ``train.py``) with more
configurations, steps and slots, runs it under the Default policy (every trial to its last step)
with ``hpctune launch ... --local --study-dir ...``, and exports the study's journal with
``Trace.from_study``. The configurations come from the study's seed and training is seeded per
trial, so the curves are the same on every run up to floating-point differences between
machines; the step times are those of the machine.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parent.parent


def replace_lines(source: Path, text: str, replacements: Mapping[str, str]) -> str:
    """``text`` (of ``source``) with each regular expression's line (multiline mode) replaced;
    each must match exactly once (else exit naming the file and the pattern)."""
    for pattern, value in replacements.items():
        text, count = re.subn(pattern, value, text, count=1, flags=re.MULTILINE)
        if count != 1:
            raise SystemExit(f"{source}: no line matches {pattern!r}")
    return text


def make_spec(
    job: Path,
    folder: Path,
    *,
    name: str,
    num_trials: int,
    epochs: int,
    slots: int,
    extra: Mapping[str, str] | None = None,
    edit: Callable[[str], str] | None = None,
) -> Path:
    """Copy ``job`` to ``folder``: its train.py, and its study.toml with more trials and steps.

    Args:
        job: The job directory (``study.toml`` and ``train.py``).
        folder: Where to write the copy.
        name: The study's name.
        num_trials: ``[study].num_trials``.
        epochs: ``[study].max_steps``.
        slots: ``[resources].slots``.
        extra: More replacements, a regular expression (one line, multiline mode) to the line
            that replaces it; each must match exactly once.
        edit: A last change of the whole text (e.g. another metric).

    Returns:
        The path of the new study.toml.
    """
    source = job / "study.toml"
    text = source.read_text()
    if edit is not None:
        text = edit(text)
    replacements = {
        r"^name = .*$": f'name = "{name}"',
        r"^max_steps = \d+": f"max_steps = {epochs}",
        r"^num_trials = \d+": f"num_trials = {num_trials}",
        r"^slots = \d+": f"slots = {slots}",
        **(extra or {}),
    }
    text = replace_lines(source, text, replacements)
    if 'name = "default"' not in text.split("[policy]", 1)[1]:
        raise SystemExit(f"{source}: the study must use the default policy")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(job / "train.py", folder / "train.py")
    spec = folder / "study.toml"
    spec.write_text(text)
    return spec


def parser(description: str, out: Path, num_trials: int, epochs: int) -> argparse.ArgumentParser:
    """The options every trace script takes: ``--out``, ``--num-trials``, ``--epochs``,
    ``--slots`` and ``--keep``."""
    result = argparse.ArgumentParser(description=description)
    result.add_argument("--out", type=Path, default=out)
    result.add_argument("--num-trials", type=int, default=num_trials)
    result.add_argument("--epochs", type=int, default=epochs)
    result.add_argument("--slots", type=int, default=2)
    result.add_argument("--keep", type=Path, default=None, help="keep the study here")
    return result


def record_trace(
    job: Path,
    out: Path,
    *,
    name: str,
    num_trials: int,
    epochs: int,
    slots: int = 2,
    random_level: float,
    keep: Path | None = None,
    extra: Mapping[str, str] | None = None,
    edit: Callable[[str], str] | None = None,
) -> Trace:
    """Run ``job`` under the Default policy and save its trace to ``out``; print a summary.

    Args:
        job: The job directory.
        out: The trace file to write.
        name: The study's name.
        num_trials: Configurations to record.
        epochs: Steps per configuration.
        slots: Workers at once.
        random_level: The trace's ``random_level`` (the metric of a model that learnt nothing).
        keep: Keep the study directory here (default: a temporary directory, deleted).
        extra: More study.toml replacements (see :func:`make_spec`).
        edit: A last change of the study.toml text.

    Returns:
        The saved trace.

    Raises:
        SystemExit: The study failed (its output is printed) or the study.toml does not fit.
    """
    with tempfile.TemporaryDirectory(prefix=f"hpctune-{name}-") as tmp:
        spec = make_spec(
            job,
            Path(tmp) / "spec",
            name=name,
            num_trials=num_trials,
            epochs=epochs,
            slots=slots,
            extra=extra,
            edit=edit,
        )
        study_dir = keep or Path(tmp) / "study"
        started = time.monotonic()
        command = [sys.executable, "-m", "hpctune.cli", "launch", str(spec), "--local"]
        result = subprocess.run(
            [*command, "--study-dir", str(study_dir)], capture_output=True, text=True
        )
        if result.returncode != 0:
            print(result.stdout, result.stderr, sep="\n", file=sys.stderr)
            raise SystemExit(result.returncode)
        trace = Trace.from_study(study_dir, random_level=random_level)
        path = trace.save(out)
    lengths = trace.lengths()
    best = float(trace.sign * np.nanmax(trace.sign * trace.best_values()))
    training = float(np.nansum(trace.epoch_seconds))
    print(
        f"{path}: {trace.num_configs} configurations x {trace.num_epochs} steps "
        f"({int((lengths == trace.num_epochs).sum())} complete), "
        f"{training:.0f} training seconds, study took {time.monotonic() - started:.0f} s; "
        f"best {trace.metric} {best:.4f}, metric_bounds {trace.metric_bounds}"
    )
    return trace


def script_main(
    argv: list[str] | None,
    description: str,
    job: Path,
    out: Path,
    *,
    name: str,
    num_trials: int,
    epochs: int,
    random_level: float,
) -> int:
    """The ``main`` of a trace script: parse its options (:func:`parser`), record the trace."""
    args = parser(description, out, num_trials=num_trials, epochs=epochs).parse_args(argv)
    record_trace(
        job,
        args.out,
        name=name,
        num_trials=args.num_trials,
        epochs=args.epochs,
        slots=args.slots,
        random_level=random_level,
        keep=args.keep,
    )
    return 0
