"""`hpctune profile` and `hpctune plan-elastic`: a profile from a trace, the plan, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hpctune.cli import main
from hpctune.elastic import Profile
from hpctune.traces import Trace

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
