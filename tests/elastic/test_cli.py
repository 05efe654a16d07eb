"""`hpctune profile` and `hpctune plan-elastic`: a profile from a trace, the plan, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.elastic import Profile
from hpctune.elastic.measured import study_decisions, study_latencies, study_stages
from hpctune.simulator.traces import Trace
from tests.conftest import DIGITS as DIGITS_JOB
from tests.conftest import run_hpctune, write_study

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "benchmarks" / "traces" / "digits.h5"

STUDY = """
[study]
name = "digits-sha"
directory = "runs/{{name}}"
entry_point = "train.py:train"
metric = "val_accuracy"
mode = "max"
max_steps = 27
step_unit = "epoch"
num_trials = 27

[search_space]
lr = {{ type = "float", low = 1e-3, high = 0.3, log = true }}

[policy]
name = "{policy}"
"""


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _study(tmp_path: Path, policy: str = "sha") -> Path:
    shutil.copy(REPO / "jobs" / "digits" / "train.py", tmp_path / "train.py")
    path = tmp_path / "study.toml"
    path.write_text(STUDY.format(policy=policy))
    return path


def _profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "profile.json"
    code, text, err = _run(
        capsys,
        "profile",
        "--steps",
        f"1={DIGITS}",
        "--speedup",
        "2=1.9",
        "--speedup",
        "4=3.5",
        "--queue-wait",
        "2",
        "--startup",
        "1",
        "--out",
        str(out),
    )
    assert code == 0, err
    assert "speed-up 3.5" in text
    return out


def test_a_profile_from_the_digits_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = Profile.load(_profile(tmp_path, capsys))
    seconds = Trace.load(DIGITS).epoch_seconds
    mean = float(np.mean(seconds[np.isfinite(seconds)]))
    assert profile.sizes == (1, 2, 4)
    assert profile.step_mean(1) == pytest.approx(mean, rel=0.1)  # quantiles of the steps
    assert profile.speedup(4) == pytest.approx(3.5)
    assert profile.sample_queue(4, np.random.default_rng(0), 3).tolist() == [2.0, 2.0, 2.0]


def test_plan_elastic_prints_and_journals_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study, profile = _study(tmp_path), _profile(tmp_path, capsys)
    plot = tmp_path / "plan.png"
    code, out, err = _run(
        capsys,
        "plan-elastic",
        str(study),
        "--deadline",
        "40s",
        "--profile",
        str(profile),
        "--price",
        "2.5",
        "--samples",
        "8",
        "--plot",
        str(plot),
    )
    assert code == 0, err
    assert "best static plan" in out or "plan (static)" in out
    assert "$" in out
    assert plot.stat().st_size > 0
    assert not (tmp_path / "runs").exists()
    code, out, err = _run(
        capsys,
        "plan-elastic",
        str(study),
        "--deadline",
        "40s",
        "--profile",
        str(profile),
        "--samples",
        "8",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["feasible"] is True
    assert data["deadline_s"] == 40.0
    assert data["plan"]["prediction"]["time_s"]["mean"] <= 40.0
    assert [row["trials"] for row in data["plan_stages"]] == [27, 9, 3, 1]
    assert data["saving"] >= 1.0


def test_an_impossible_deadline_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study, profile = _study(tmp_path), _profile(tmp_path, capsys)
    code, out, _ = _run(
        capsys, "plan-elastic", str(study), "--deadline", "3s", "--profile", str(profile)
    )
    assert code == 1
    assert "no plan is predicted to meet the deadline" in out


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = _study(tmp_path)
    code, _, err = _run(capsys, "plan-elastic", str(study), "--deadline", "2h")
    assert code == 2
    assert "profile.json does not exist" in err
    profile = _profile(tmp_path, capsys)
    code, _, err = _run(
        capsys, "plan-elastic", str(study), "--deadline", "soon", "--profile", str(profile)
    )
    assert code == 2
    assert "--deadline must be a positive duration" in err
    median = _study(tmp_path, "median")
    code, _, err = _run(
        capsys, "plan-elastic", str(median), "--deadline", "2h", "--profile", str(profile)
    )
    assert code == 2
    assert "not 'median'" in err
    code, _, err = _run(capsys, "profile", "--steps", "2=x.h5", "--out", str(tmp_path / "p.json"))
    assert code == 2
    assert "x.h5 does not exist" in err
    code, _, err = _run(
        capsys,
        "profile",
        "--steps",
        f"2={DIGITS}",
        "--speedup",
        "4=3",
        "--out",
        str(tmp_path / "p.json"),
    )
    assert code == 2
    assert "relative to one device" in err


@pytest.mark.slow
def test_profile_and_plan_from_a_real_local_study(
    tmp_path: Path, cleanup_studies: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A real SHA study on local workers: its step times, queue waits and start-ups make the
    profile, and its own study.toml is planned with it."""
    spec = write_study(
        tmp_path,
        train=DIGITS_JOB / "train.py",
        metric="val_accuracy",
        max_steps=3,
        num_trials=3,
        policy={"name": "sha", "bracket_size": 3},
        space={
            "hidden": 16,
            "layers": 1,
            "dropout": 0.1,
            "momentum": 0.9,
            "weight_decay": 1e-4,
            "batch_size": 32,
            "activation": "relu",
            "lr": {"type": "float", "low": 0.05, "high": 0.2},
        },
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    record = open_study(study_dir).record
    queue, startup = study_latencies(record)
    started = [w for w in record.workers.values() if w.runs]
    assert len(startup) == len(started) >= 1
    assert all(0 <= s < 60 for s in startup)
    assert len(queue) == sum(1 for w in started if w.submitted_time is not None)
    # SHA over 3 trials to steps 1 and 3: one rung decision, stage 0's
    stages = study_stages(record)
    assert stages is not None
    assert [(s.trials, s.start_step, s.end_step) for s in stages.stages] == [(3, 0, 1), (1, 1, 3)]
    decisions = study_decisions(record, stages)
    assert len(decisions) == 1
    assert decisions[0] >= 0

    out = tmp_path / "profile.json"
    code, text, err = _run(
        capsys,
        "profile",
        "--steps",
        f"1={study_dir}",
        "--speedup",
        "2=1.5",
        "--latencies-from",
        str(study_dir),
        "--out",
        str(out),
    )
    assert code == 0, err
    profile = Profile.load(out)
    assert profile.startup == startup
    assert profile.decision == decisions
    assert f"SYNC {np.mean(decisions):.3g} s" in text
    trace = Trace.from_study(study_dir)
    seconds = trace.epoch_seconds[np.isfinite(trace.epoch_seconds)]
    assert profile.step_mean(1) == pytest.approx(float(np.mean(seconds)))
    assert f"latencies={study_dir}" in text
    code, text, err = _run(
        capsys, "plan-elastic", str(spec), "--deadline", "1h", "--profile", str(out), "--json"
    )
    assert code == 0, err
    assert [row["trials"] for row in json.loads(text)["plan_stages"]] == [3, 1]


def test_stages_of_sha_hyperband_and_asha(tmp_path: Path) -> None:
    from hpctune.elastic import experiment_from_study
    from hpctune.spec import load_spec

    def stages(policy: str, trials: int) -> list[tuple[int, int, int, int]]:
        path = _study(tmp_path, policy)
        path.write_text(path.read_text().replace("num_trials = 27", f"num_trials = {trials}"))
        spec = experiment_from_study(load_spec(path))
        return [(s.trials, s.start_step, s.end_step, s.bracket) for s in spec.stages]

    # SHA: brackets of 27 one after another; the last one holds the trials left
    assert stages("sha", 30) == [
        (27, 0, 1, 0),
        (9, 1, 3, 0),
        (3, 3, 9, 0),
        (1, 9, 27, 0),
        (3, 0, 1, 1),
        (1, 1, 3, 1),
        (1, 3, 9, 1),
        (1, 9, 27, 1),
    ]
    # Hyperband: s = 3, 2, 1, 0 brackets of 27, 12, 6, 4 trials from 1, 3, 9, 27 steps
    hyperband = stages("hyperband", 49)
    firsts = [(t, start, end) for t, start, end, _ in hyperband if start == 0]
    assert firsts == [(27, 0, 1), (12, 0, 3), (6, 0, 9), (4, 0, 27)]
    assert sum(t for t, *_ in firsts) == 49
    # ASHA (eta 4): its rungs as one synchronous bracket of every trial
    assert stages("asha", 27) == [(27, 0, 1, 0), (6, 1, 4, 0), (1, 4, 16, 0), (1, 16, 27, 0)]
