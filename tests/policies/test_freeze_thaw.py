"""Freeze-thaw and one-epoch: their decisions, in simulation and in a real local study."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.curves.predict import LEVELS
from hpctune.policies import Event, StudyContext, StudyView, TrialView
from hpctune.policies.freeze_thaw import FreezeThawOptions, FreezeThawPolicy, expected_improvement
from hpctune.policies.one_epoch import OneEpochOptions, OneEpochPolicy
from hpctune.simulator import simulate
from hpctune.simulator.traces import Trace
from hpctune.study.space import SearchSpace
from hpctune.study.states import SegmentStatus, StudyState, TrialStatus
from tests.conftest import DIGITS, run_hpctune, write_study

DIGITS_TRACE = Path(__file__).resolve().parents[2] / "benchmarks" / "traces" / "digits.h5"
SPACE = SearchSpace.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})


def _trial(tid: int, values: list[float], x: float) -> TrialView:
    steps = np.arange(1, len(values) + 1)
    return TrialView(
        trial_id=tid,
        status=TrialStatus.SUSPENDED,
        params={"x": x},
        step=len(values),
        steps=steps,
        values=np.asarray(values, dtype=float),
        times=steps.astype(float),
        checkpoint_step=len(values),
    )


def test_expected_improvement_is_the_mean_gain_over_the_incumbent() -> None:
    uniform = np.asarray(LEVELS)  # the quantiles of a uniform predictive on [0, 1]
    assert expected_improvement(uniform, 0.5) == pytest.approx(0.125, abs=0.005)
    assert expected_improvement(np.full(27, 0.4), 0.5) == 0.0


def test_the_slot_goes_to_the_rising_frozen_trial_not_the_flat_one() -> None:
    context = StudyContext(max_steps=30)
    policy = FreezeThawPolicy(context, FreezeThawOptions(segment=0.1))
    rising = _trial(0, [0.3 + 0.05 * i for i in range(6)], 0.2)
    flat = _trial(1, [0.12] * 6, 0.9)
    view = StudyView(
        metric="acc",
        mode="max",
        max_steps=30,
        boundary=1,
        now=10.0,
        trials={0: rising, 1: flat},
        free_slots=1,
        total_slots=2,
        trials_remaining=2,  # every configuration is made: no new one may start
        space=SPACE,
    )
    decision = policy.decide(view, Event.slot_free(1), np.random.default_rng(0))
    resumes = [a for a in decision.actions if a.kind.value == "resume"]
    assert [a.trial_id for a in resumes] == [0]
    assert resumes[0].until_step == 6 + 3  # another segment of a tenth of 30 steps


def test_freeze_thaw_in_simulation_trains_in_segments_and_thaws_frozen_trials() -> None:
    trace = Trace.load(DIGITS_TRACE).subset(range(24))
    result = simulate(trace, "freeze-thaw", {"segment": 0.1}, slots=3, seed=0)
    by_trial: dict[int, list] = {}
    for span in result.segments:
        by_trial.setdefault(span.trial, []).append(span)
    assert any(len(spans) >= 2 for spans in by_trial.values())  # thawed at least once
    for spans in by_trial.values():
        spans.sort(key=lambda s: s.start_step)
        assert spans[0].start_step == 0
        assert spans[0].end_step <= 1  # the first look: one step
        for before, after in itertools.pairwise(spans):
            assert after.start_step == before.end_step  # resumed from its checkpoint
            assert after.end_step - after.start_step <= 3
    rows = [t.config for t in result.trials]
    assert len(rows) == len(set(rows))  # its own configurations: each trace row once


def test_one_epoch_trains_only_the_top_k_of_each_round_past_the_screen() -> None:
    trace = Trace.load(DIGITS_TRACE).subset(range(40))
    result = simulate(trace, "one-epoch", {"screened": 16, "top_k": 2}, slots=4, seed=1)
    past = [t for t in result.trials if t.step > 1]
    rounds = -(-len(result.trials) // 16)
    assert 0 < len(past) <= 2 * rounds
    values = {t.trial: trace.curves[t.config, 0] for t in result.trials}
    for first in range(0, len(result.trials), 16):
        members = [t.trial for t in result.trials[first : first + 16]]
        top = sorted(members, key=lambda tid: -values[tid])[:2]
        promoted = [t.trial for t in past if t.trial in members]
        assert set(promoted) <= set(top)


def test_one_epoch_refuses_a_round_smaller_than_twice_its_top_k() -> None:
    with pytest.raises(ValueError, match="screened"):
        OneEpochPolicy(StudyContext(max_steps=10), OneEpochOptions(screened=6, top_k=4))


@pytest.mark.timeout(300)
def test_a_real_freeze_thaw_study_suspends_and_thaws_trials(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=DIGITS / "train.py",
        space={
            "hidden": {"type": "int", "low": 16, "high": 64, "log": True},
            "layers": 1,
            "dropout": 0.0,
            "momentum": 0.9,
            "weight_decay": 1e-4,
            "batch_size": 64,
            "activation": "relu",
            "lr": {"type": "float", "low": 0.01, "high": 0.3, "log": True},
        },
        policy={"name": "freeze-thaw", "segment": 0.25},
        resources={"slots": 2},
        metric="val_accuracy",
        max_steps=4,
        num_trials=4,
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(study_dir)
    record = study.record
    assert record.state is StudyState.FINISHED
    assert len(study.trials) == 4
    thawed = 0
    for trial in study.trials:
        segments = [record.segments[s] for s in trial.segments]
        assert segments[0].end_step == 1
        for before, after in itertools.pairwise(segments):
            assert before.status is SegmentStatus.SUSPENDED
            assert after.start_step == before.end_step
            thawed += 1
        steps = study.curve(trial.trial_id).steps.tolist()
        assert steps == list(range(1, len(steps) + 1))  # no step lost or trained twice
    assert thawed >= 2


def test_a_trial_without_a_checkpoint_at_its_last_step_still_moves_on() -> None:
    """A training function that checkpoints every 5 steps: a trial frozen at step 3 has no
    checkpoint there; it is thawed to a step past 3, not to 3 again (which would retrain the
    same steps for ever)."""
    context = StudyContext(max_steps=30)
    policy = FreezeThawPolicy(context, FreezeThawOptions(segment=0.1))
    frozen = dataclasses.replace(_trial(0, [0.5, 0.6, 0.7], 0.3), checkpoint_step=None)
    view = StudyView(
        metric="acc",
        mode="max",
        max_steps=30,
        boundary=1,
        now=5.0,
        trials={0: frozen},
        free_slots=1,
        total_slots=1,
        trials_remaining=1,
        space=SPACE,
    )
    decision = policy.decide(view, Event.slot_free(1), np.random.default_rng(0))
    assert [(a.trial_id, a.until_step) for a in decision.actions] == [(0, 6)]
