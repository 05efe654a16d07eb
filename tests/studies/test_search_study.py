"""Model-based generators, ask/tell and added trials in real local studies (digits training)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import (
    DIGITS,
    kill_and_resume,
    run_hpctune,
    start_hpctune,
    wait_for,
    write_study,
)

SPACE = {
    "hidden": {"type": "int", "low": 8, "high": 64, "log": True},
    "layers": 1,
    "dropout": 0.0,
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "batch_size": 64,
    "activation": ["relu", "tanh"],
    "lr": {"type": "float", "low": 0.01, "high": 0.3, "log": True},
}


def _digits_study(
    folder: Path,
    directory: Path,
    generator: str = "tpe",
    *,
    max_steps: int = 4,
    num_trials: int = 6,
    seed: int = 5,
) -> Path:
    """A study of the digits model on one slot, its generator after two random trials."""
    return write_study(
        folder,
        train=DIGITS / "train.py",
        metric="val_accuracy",
        max_steps=max_steps,
        num_trials=num_trials,
        seed=seed,
        directory=str(directory),
        space=SPACE,
        generator={"name": generator, "n_startup_trials": 2},
        resources={"slots": 1},
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cmaes", "gp"])
def test_cmaes_and_gp_run_a_real_digits_study_to_the_end(
    name: str, tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    """CMA-ES and the GP sampler propose real trials of the digits model (TPE: below)."""
    directory = tmp_path / "study"
    cleanup_studies.append(directory)
    spec = _digits_study(tmp_path, directory, name, max_steps=2, num_trials=5, seed=3)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(directory)
    assert study.record.state is StudyState.FINISHED
    assert [t.status for t in study.trials] == [TrialStatus.COMPLETED] * 5
    assert study.spec["generator"]["name"] == name
    assert [t.generator_index for t in study.record.trials.values()] == list(range(5))
    assert len({json.dumps(t.params, sort_keys=True) for t in study.trials}) == 5
    best = study.best_trial()
    assert best is not None
    assert best.value > 0.5


@pytest.mark.slow
def test_tpe_study_survives_controller_kills_with_the_same_proposals(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    """One slot: each trial is proposed after the previous one completed, so the proposals of
    an uninterrupted run are fixed; a run whose controller (and sometimes workers) is killed at
    random moments must propose exactly the same configurations."""
    reference_dir, killed_dir = tmp_path / "reference", tmp_path / "killed"
    cleanup_studies += [reference_dir, killed_dir]
    run_hpctune("launch", str(_digits_study(tmp_path / "a", reference_dir)), "--local", check=True)
    reference = open_study(reference_dir)
    rng = random.Random(int(os.environ.get("HPCTUNE_KILL_SEED", "20261125")))
    process = start_hpctune("launch", str(_digits_study(tmp_path / "b", killed_dir)), "--local")
    process, kills = kill_and_resume(process, killed_dir, rng, rounds=4, reports=(3, 6), pause=0.2)
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    assert kills >= 2, "the study ended before the controller could be killed twice"
    study = open_study(killed_dir)
    assert study.record.state is StudyState.FINISHED
    assert [t.params for t in study.trials] == [t.params for t in reference.trials]
    assert [t.info for t in study.trials] == [t.info for t in reference.trials]
    assert all(t.status is TrialStatus.COMPLETED for t in study.trials)
    # TPE learnt: the model-based proposals are not the random ones of its start-up
    assert len({json.dumps(t.params, sort_keys=True) for t in study.trials}) == 6


def test_ask_tell_through_the_inbox(tmp_path: Path, cleanup_studies: list[Path]) -> None:
    """A study without workers (slots = 0): every trial is asked for and told from Python;
    the journal holds them, a bad tell is refused, and the study ends when all are told."""
    directory = tmp_path / "study"
    cleanup_studies.append(directory)
    spec = write_study(
        tmp_path / "spec",
        train=DIGITS / "train.py",
        metric="score",
        max_steps=3,
        num_trials=3,
        directory=str(directory),
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}, "kind": ["a", "b"]},
        generator={"name": "tpe"},
        resources={"slots": 0},
    )
    process = start_hpctune("launch", str(spec), "--local")
    try:
        assert wait_for(lambda: (directory / "journal.zarr").exists(), 60)
        study = open_study(directory, write=True)
        asked = []
        for i in range(3):
            trial = study.ask(timeout=60)
            asked.append(trial)
            if i == 0:
                study.tell(trial, {"score": 0.1}, step=1, state="running")
            study.tell(trial, 1.0 - abs(trial.params["x"] - 0.3))
        with pytest.raises(RuntimeError, match="generator has created all 3 trials"):
            study.ask(timeout=30)
        out, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out
    final = open_study(directory)
    assert final.record.state is StudyState.FINISHED
    assert [t.trial_id for t in asked] == [0, 1, 2]
    for trial in asked:
        record = final.trial(trial.trial_id)
        assert record.params == trial.params
        assert record.status is TrialStatus.COMPLETED
        assert record.info["external"] is True
    curve = final.curve(0)
    assert curve.steps.tolist() == [1, 3]
    assert curve.values[0] == 0.1
    with pytest.raises(Exception, match="opened read-only"):
        final.ask()
    # the controller has ended: a late ask is refused at once, and its request withdrawn
    with pytest.raises(RuntimeError, match=r"finished and no controller .* all 3 trials"):
        open_study(directory, write=True).ask(timeout=60)
    assert not list((directory / "inbox").glob("*.json"))


@pytest.mark.slow
def test_add_trials_into_a_finished_study_and_a_pareto_front(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    """`hpctune add-trials` into a finished two-objective study: `resume` trains the added
    configuration (missing parameters drawn), and status shows the Pareto front."""
    directory = tmp_path / "study"
    cleanup_studies.append(directory)
    spec = write_study(
        tmp_path / "spec",
        train=DIGITS / "train.py",
        metric="val_accuracy",
        objectives={"val_accuracy": "max", "num_params": "min"},
        max_steps=2,
        num_trials=2,
        directory=str(directory),
        space=SPACE,
        generator={"name": "nsga2", "population_size": 2},
    )
    run_hpctune("launch", str(spec), "--local", check=True)
    bad = run_hpctune("add-trials", str(directory), "--params", '{"hidden": 1000}')
    assert bad.returncode != 0
    assert "`hidden` must be in [8, 64]" in bad.stderr + bad.stdout
    added = run_hpctune("add-trials", str(directory), "--params", '{"hidden": 9}', check=True)
    assert "hpctune resume" in added.stdout
    run_hpctune("resume", str(directory), "--local", check=True)
    study = open_study(directory)
    assert study.record.state is StudyState.FINISHED
    assert [t.status for t in study.trials] == [TrialStatus.COMPLETED] * 3
    assert study.trial(2).params["hidden"] == 9
    assert study.trial(2).info == {"enqueued": True}
    status = json.loads(run_hpctune("status", str(directory), "--json", check=True).stdout)
    front = status["pareto_front"]
    assert front
    assert {e["trial"] for e in front} <= {0, 1, 2}
    assert [e.trial_id for e in study.pareto_front()] == [e["trial"] for e in front]
    hidden = {t.trial_id: t.params["hidden"] for t in study.trials}
    smallest = min(hidden, key=lambda t: (hidden[t], t))
    assert smallest in {e["trial"] for e in front}  # the fewest parameters is never dominated
