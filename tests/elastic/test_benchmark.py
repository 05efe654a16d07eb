"""Smoke test of benchmarks/elastic.py: it runs and prints sane figures (no timing limits)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "elastic.py"


def _rows(*args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--samples", "4", "--json", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
        cwd=REPO,
    ).stdout
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_paper_and_a_trace() -> None:
    paper = _rows("--only", "paper")
    assert [r["deadline_s"] for r in paper] == [1200.0, 1800.0, 2400.0]
    assert all(r["feasible"] for r in paper)
    assert paper[0]["saving"] > 1.5  # type: ignore[operator]
    assert paper[0]["elastic_time_s"] <= 1200.0  # type: ignore[operator]
    assert paper[0]["naive_cost"] > paper[0]["elastic_cost"]  # type: ignore[operator]
    digits = _rows("--only", "digits", "--time-scale", "100")
    assert len(digits) == 3
    for r in digits:
        assert r["elastic_cost"] <= r["static_cost"]  # type: ignore[operator]
        assert r["unit"] == "GPU-hours"


def test_the_real_benchmarks_study_plans_and_its_report_reads(tmp_path: Path) -> None:
    """benchmarks/elastic_real.py without a cluster: its study.toml and training function are
    valid, a study of that shape plans at a deadline (with crowding, and without it in the
    what-if), and a run's figures print."""
    import ast

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import elastic_real
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from hpctune.elastic import Profile
    from hpctune.spec import load_spec, with_deadline

    ast.parse(elastic_real.TRAIN.format(passes=2))
    (tmp_path / "train.py").write_text(elastic_real.TRAIN.format(passes=2))
    (tmp_path / "study.toml").write_text(elastic_real.STUDY.format(rep=0, max_devices=2))
    spec = load_spec(tmp_path / "study.toml")
    assert spec.resources.gpus_per_worker == 1
    assert spec.resources.slots == 4
    assert spec.resources.max_devices == 2
    profile = Profile(
        step_seconds={1: (0.5,)},
        startup=(2.0,),
        startup_together={4: (5.0,)},
        crowding={2: (1.6,), 4: (2.0,)},
        segment_gap=(0.4,),
    )
    fastest = elastic_real.fastest_static(spec, profile)
    assert fastest > 0
    what_if = elastic_real.unshared_saving(with_deadline(spec, f"{fastest}s"), profile, fastest)
    assert len(what_if["plan_workers"]) == 4  # SHA eta 2 over 8 trials to 1, 2, 4, 8
    assert what_if["saving_predicted"] >= 1.0  # never costlier than the best static plan
    run = {
        "rep": 0,
        "deadline_s": 20.0,
        "plan_workers": [2, 2, 1, 1],
        "plan_devices": [1, 1, 1, 2],
        "static_pool": 2,
        "predicted_time_s": 18.0,
        "predicted_gpu_hours": 0.01,
        "measured_time_s": 19.8,
        "measured_gpu_hours": 0.011,
        "time_error": 0.1,
        "cost_error": 0.1,
        "static_predicted_time_s": 17.0,
        "static_predicted_gpu_hours": 0.012,
        "saving_predicted": 1.2,
        "saving_measured": 12 / 11,
        "met_deadline": True,
        "profile": elastic_real.profile_summary(Profile.scaling(0.5, {2: 1.5})),
        "stage_ends_predicted_s": [1.0, 2.0, 3.0, 4.0],
        "stage_ends_measured_s": [1.1, 2.2, None, None],
        "steps_in_run_s": {"8": 0.5},
        "load_before_run": 1.0,
        "speed_before_profile": 200.0,
        "speed_before_run": 190.0,
        "speed_after_run": 180.0,
        "what_if_unshared": what_if,
    }
    text = elastic_real.report([run])
    assert "+10%" in text
    assert "2x1, 2x1, 1x1, 1x2" in text  # the workers per stage, with their GPUs
    assert "within 15 % in time and cost: 1 of 1" in text
