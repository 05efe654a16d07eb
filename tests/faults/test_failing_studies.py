"""Issue 13, item 5: studies that cannot succeed end failed (exit 1) with one clear message.

Before: a study whose metric no trial reports ended with every trial "completed" and exit 0,
and an import error in the training module failed every trial the same way, exit 0.
"""

from __future__ import annotations

from pathlib import Path

from hpctune.api import open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import launch_local, write_study

FAULTY = Path(__file__).with_name("faulty.py")


def test_a_metric_no_trial_reports_fails_the_study(tmp_path: Path) -> None:
    spec = write_study(
        tmp_path,
        train=FAULTY,
        max_steps=2,
        num_trials=3,
        space={"behaviour": "other_metric", "x": 1.0},
    )
    result = launch_local(spec)
    assert result.returncode == 1, result.stdout + result.stderr
    # a warning when the first trial ends, naming the metric and what was reported
    warning = "ended without reporting the study metric 'score' ([study] metric); it reported: "
    assert warning + "accuracy, loss" in result.stdout
    study = open_study(tmp_path / "study")
    assert study.record.state is StudyState.FAILED
    assert "no trial reported the study metric 'score'" in study.record.reason
    assert "accuracy, loss" in study.record.reason
    assert f"study failed: {study.record.reason}" in result.stdout
    assert [w.code for w in study.record.warnings].count("metric_missing") == 1


def test_identical_failures_at_start_stop_the_study(tmp_path: Path) -> None:
    train = "import no_such_module_hpctune_test\n\ndef train(ctx):\n    pass\n"
    spec = write_study(
        tmp_path, train=train, num_trials=10, resources={"slots": 1}, space={"x": 1.0}
    )
    result = launch_local(spec)
    assert result.returncode == 1, result.stdout + result.stderr
    study = open_study(tmp_path / "study")
    assert study.record.state is StudyState.FAILED
    reason = study.record.reason
    assert reason.startswith("3 trials failed the same way before their first report")
    assert "No module named 'no_such_module_hpctune_test'" in reason
    assert "hpctune retry" in reason
    assert len(study.trials) == 3  # the study stopped instead of failing all 10
    assert all(t.status is TrialStatus.FAILED for t in study.trials)
    assert result.stdout.count("study failed:") == 1
