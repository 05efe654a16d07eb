"""The trace scripts' shared helper: the study it records is the job's, with more trials."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from benchmarks._record_trace import make_spec
from hpctune.simulator.traces import Trace
from tests.conftest import REPO


@pytest.mark.parametrize("job", ["digits", "diabetes", "charlm", "digits-cnn"])
def test_make_spec_keeps_the_job_and_changes_only_the_size(tmp_path: Path, job: str) -> None:
    source = REPO / "jobs" / job
    spec = make_spec(source, tmp_path, name="x-trace", num_trials=7, epochs=9, slots=3, extra=None)
    original = tomllib.loads((source / "study.toml").read_text())
    copy = tomllib.loads(spec.read_text())
    assert (tmp_path / "train.py").read_text() == (source / "train.py").read_text()
    assert copy["study"]["name"] == "x-trace"
    assert (copy["study"]["num_trials"], copy["study"]["max_steps"]) == (7, 9)
    assert copy["resources"]["slots"] == 3
    for key in ("metric", "mode", "seed", "entry_point"):
        assert copy["study"][key] == original["study"][key]
    assert copy["search_space"] == original["search_space"]
    assert copy["policy"] == {"name": "default"}


def test_make_spec_refuses_other_policies_and_unmatched_fields(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(REPO / "jobs" / "digits", job)
    text = (job / "study.toml").read_text()
    (job / "study.toml").write_text(text.replace('name = "default"', 'name = "asha"'))
    with pytest.raises(SystemExit, match="must use the default policy"):
        make_spec(job, tmp_path / "a", name="t", num_trials=2, epochs=2, slots=1)
    with pytest.raises(SystemExit, match="no line matches"):
        make_spec(
            REPO / "jobs" / "digits",
            tmp_path / "b",
            name="t",
            num_trials=2,
            epochs=2,
            slots=1,
            extra={r"^warmup = \d+": "warmup = 3"},
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "metric", "mode", "random_level"),
    [
        ("make_charlm_trace.py", "val_loss", "min", 3.16),
        ("make_digits_cnn_trace.py", "val_accuracy", "max", 0.1),
    ],
)
def test_a_trace_script_records_a_small_trace(
    tmp_path: Path, script: str, metric: str, mode: str, random_level: float
) -> None:
    out = tmp_path / "small.h5"
    argv = ["--num-trials", "2", "--epochs", "2", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *argv],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert "2 configurations x 2 steps (2 complete)" in result.stdout
    trace = Trace.load(out)
    assert trace.curves.shape == (2, 2)
    assert (trace.metric, trace.mode, trace.random_level) == (metric, mode, random_level)
    assert np.all(np.isfinite(trace.curves))
