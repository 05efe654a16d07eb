"""A backend from another package, registered through an entry point, runs a real study.

The toy backend (tests/plugins/hpctune_toy_backend.py) is installed the way pip installs a
package's entry points (a ``.dist-info`` folder on the path with ``entry_points.txt``); nothing
inside ``hpctune/`` names it. ``hpctune launch --backend toy`` submits the controller as the
toy's "job", which runs the study with workers as the toy's processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hpctune.api import open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import hpctune_env, kill_workers, write_study

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
TRAIN = """
def train(ctx):
    for step in range(ctx.start_step, ctx.max_steps):
        ctx.report(step=step + 1, score=ctx.params["x"] * (step + 1))
"""


def _install(site: Path) -> dict[str, str]:
    """Register the toy backend as an installed distribution would; return the environment
    that finds it."""
    info = site / "hpctune_toy_backend-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hpctune-toy-backend\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[hpctune.backends]\ntoy = hpctune_toy_backend:ToyBackend\n"
    )
    path = os.pathsep.join([str(site), str(PLUGINS), os.environ.get("PYTHONPATH", "")])
    return {**hpctune_env(), "PYTHONPATH": path}


def _hpctune(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpctune.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_a_backend_registered_by_an_entry_point_runs_a_study(tmp_path: Path) -> None:
    env = _install(tmp_path / "site")
    spec = write_study(
        tmp_path,
        train=TRAIN,
        space={"x": [1.0, 2.0, 3.0]},
        num_trials=3,
        max_steps=3,
        generator={"name": "grid"},
    )
    spec.write_text(spec.read_text() + '\n[toy]\nlabel = "from the spec"\n')
    study_dir = tmp_path / "study"
    try:
        launched = _hpctune(env, "launch", str(spec), "--backend", "toy")
        assert launched.returncode == 0, launched.stdout + launched.stderr
        assert "controller job: toy-" in launched.stdout
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            record = open_study(study_dir).record
            if record.state in (StudyState.FINISHED, StudyState.FAILED):
                break
            time.sleep(0.5)
        study = open_study(study_dir)
        assert study.record.state is StudyState.FINISHED, study.record.reason
        assert [t.status for t in study.trials] == [TrialStatus.COMPLETED] * 3
        assert study.best_trial().params == {"x": 3.0}
        # the workers were the toy's jobs, and the spec kept the toy's own section
        jobs = {w.info["job"] for w in study.record.workers.values()}
        assert jobs
        assert all(job.startswith("toy-") for job in jobs)
        assert study.spec["toy"] == {"label": "from the spec"}
        status = _hpctune(env, "status", str(study_dir), "--json")
        assert json.loads(status.stdout)["study"]["toy"]["jobs"] == len(jobs)
    finally:
        kill_workers(study_dir)


def test_an_unknown_backend_names_the_known_ones(tmp_path: Path) -> None:
    env = _install(tmp_path / "site")
    spec = write_study(tmp_path, train=TRAIN, space={"x": [1.0]}, num_trials=1, max_steps=1)
    result = _hpctune(env, "launch", str(spec), "--backend", "tyo")
    assert result.returncode == 2
    assert "unknown backend 'tyo'; did you mean 'toy'?" in result.stderr
    assert not (tmp_path / "study").exists()


def test_a_section_of_an_unregistered_backend_is_an_unknown_section(tmp_path: Path) -> None:
    spec = write_study(tmp_path, train=TRAIN, space={"x": [1.0]}, num_trials=1, max_steps=1)
    spec.write_text(spec.read_text() + '\n[toy]\nlabel = "x"\n')
    result = _hpctune(hpctune_env(), "launch", str(spec), "--local", "--dry-run")
    assert result.returncode == 2
    assert "unknown section" in result.stderr
    assert "slurm" in result.stderr
