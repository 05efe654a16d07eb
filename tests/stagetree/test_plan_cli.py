"""`hpctune plan`: trials, total vs unique steps, merge rate and stage tree of a study.toml."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.study.states import StudyState
from tests.conftest import REPO, run_hpctune, write_study

EXAMPLE = REPO / "jobs" / "digits-stages"
WARMUP_COSINE = {
    "schedule": "warmup",
    "warmup_steps": 2,
    "then": {"schedule": "cosine", "base": 0.1, "total_steps": 8},
}


def test_the_stage_example_has_merge_rate_at_least_two() -> None:
    result = run_hpctune("plan", str(EXAMPLE / "study.toml"), "--json", check=True)
    out = json.loads(result.stdout)
    assert out["trials"] == 24
    assert out["total_steps"] == 24 * 20
    assert out["merge_rate"] == pytest.approx(out["total_steps"] / out["unique_steps"])
    assert out["merge_rate"] >= 2
    # a fresh plan trains every unique step in exactly one stage
    assert sum(s["end"] - s["start"] for s in out["stages"]) == out["unique_steps"]
    assert sorted(t for s in out["stages"] for t in s["trials"]) == list(range(24))
    assert sorted(i for b in out["batches"] for i in b) == list(range(len(out["stages"])))
    assert out["makespan"]["critical_path_steps"] < out["makespan"]["trial_based_steps"]
    text = run_hpctune("plan", str(EXAMPLE / "study.toml"), check=True).stdout
    assert f"merge rate p = {out['merge_rate']:.2f}" in text
    assert "[0] steps 0-3 (16 trials): " in text


def test_random_search_shares_only_equal_prefixes(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("def train(ctx):\n    pass\n")
    space = {
        "lr": [WARMUP_COSINE, {**WARMUP_COSINE, "warmup_steps": 3}],
        "momentum": {"type": "float", "low": 0.5, "high": 0.9},
    }
    toml = write_study(tmp_path, train="", space=space, max_steps=10, num_trials=6)
    out = json.loads(run_hpctune("plan", str(toml), "--json", check=True).stdout)
    assert out["study"]["generator"] == "random"
    assert out["merge_rate"] == 1.0  # every trial has its own momentum
    fixed = {**space, "momentum": 0.9}
    toml = write_study(tmp_path, train="", space=fixed, max_steps=10, num_trials=6)
    out = json.loads(run_hpctune("plan", str(toml), "--json", check=True).stdout)
    # two distinct configurations, three trials each: 60 steps, 20 unique (no ramp is shared:
    # the 2- and 3-step ramps are different functions)
    assert (out["total_steps"], out["unique_steps"]) == (60, 20)
    assert len(out["roots"]) == 2
    plot = tmp_path / "tree.png"
    result = run_hpctune("plan", str(toml), "--plot", str(plot), check=True)
    assert f"plot: {plot}" in result.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bad_spec_is_refused_with_its_field(tmp_path: Path) -> None:
    result = run_hpctune("plan", str(tmp_path / "missing.toml"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr


@pytest.mark.slow
def test_trials_sharing_a_prefix_share_every_metric_up_to_their_branch(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    """The example runs as a stage tree: two trials with the same lr sequence, one doubling its
    batch size at epoch 10, train epochs 0-10 once and share every metric's curve there."""
    for name in ("study.toml", "train.py"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    toml = tmp_path / "study.toml"
    toml.write_text(toml.read_text().replace("seed = 0", "seed = 0\nnum_trials = 2"))
    study_dir = tmp_path / "run"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(toml), "--local", "--study-dir", str(study_dir), check=True)
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    trained = sum((s.end_step or 0) - s.start_step for s in study.record.segments.values())
    assert trained == 20 + 10
    for metric in ("val_loss", "train_loss", "val_accuracy"):
        a = study.curve(0, metric)
        b = study.curve(1, metric)
        assert a.steps.tolist() == b.steps.tolist() == list(range(1, 21))
        assert a.values.tolist()[:10] == b.values.tolist()[:10]
        assert a.values.tolist()[10:] != b.values.tolist()[10:]


def test_two_studies_share_one_plan_and_report_the_k_wise_merge_rate(tmp_path: Path) -> None:
    warm_step = {**WARMUP_COSINE, "then": {"schedule": "step", "base": 0.1, "step_size": 4}}
    tomls = []
    for name, lrs in (("a", [WARMUP_COSINE, warm_step]), ("b", [WARMUP_COSINE])):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "train.py").write_text("def train(ctx):\n    pass\n")
        space = {"lr": lrs, "momentum": 0.9}
        grid = {"name": "grid"}
        fields = {"name": name, "max_steps": 10, "num_trials": len(lrs)}
        tomls.append(write_study(folder, train="", space=space, generator=grid, **fields))
    out = json.loads(run_hpctune("plan", *map(str, tomls), "--json", check=True).stdout)
    a, b = out["studies"]
    assert (a["name"], a["trials"], a["first_trial"]) == ("a", 2, 0)
    assert (b["name"], b["trials"], b["first_trial"]) == ("b", 1, 2)
    # a alone: the 2-step ramp once, then 8 steps each; b is a's first trial again
    assert (a["total_steps"], a["unique_steps"]) == (20, 2 + 8 + 8)
    assert (b["total_steps"], b["unique_steps"]) == (10, 10)
    assert (out["total_steps"], out["unique_steps"]) == (30, 18)
    assert out["merge_rate"] == pytest.approx(30 / 18)
    text = run_hpctune("plan", *map(str, tomls), check=True).stdout
    assert "2-wise merge rate m_2 = 1.67" in text
    assert "trials 2-2 below" in text


def test_studies_that_cannot_share_stages_are_not_planned_together(tmp_path: Path) -> None:
    tomls = []
    for name, code in (("a", "def train(ctx):\n    pass\n"), ("b", "def train(ctx):\n    1\n")):
        space = {"lr": [WARMUP_COSINE], "momentum": 0.9}
        fields = {"name": name, "max_steps": 10, "num_trials": 1}
        tomls.append(write_study(tmp_path / name, train=code, space=space, **fields))
    result = run_hpctune("plan", *map(str, tomls))
    assert result.returncode == 2
    assert f"{tomls[1]} cannot share stages with {tomls[0]}" in result.stderr
    assert "plan them separately" in result.stderr
    assert not result.stdout
