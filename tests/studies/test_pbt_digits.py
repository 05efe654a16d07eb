"""The digits PBT example end to end on the local executor: population 4 on 2 workers (budget
mode), real PyTorch checkpoints, the controller SIGKILLed mid-study and resumed."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import REPO, run_hpctune, start_hpctune, write_study

DIGITS_PBT = REPO / "jobs" / "digits-pbt"
MAX_STEPS = 12
SPG = 3


def _reports(study_dir: Path) -> int:
    events = study_dir / "events"
    return (
        sum(p.read_bytes().count(b'"report"') for p in events.glob("*.jsonl"))
        if events.exists()
        else 0
    )


@pytest.mark.slow
def test_digits_pbt_keeps_its_lineage_and_population_across_controller_kills(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train=DIGITS_PBT / "train.py",
        metric="val_loss",
        mode="min",
        metric_bounds=[0.0, 2.5],
        max_steps=MAX_STEPS,
        num_trials=4,
        seed=1,
        space={
            "lr": {"type": "float", "low": 1e-3, "high": 0.5, "log": True},
            "momentum": {"type": "float", "low": 0.5, "high": 0.95},
            "hidden": 32,
            "dropout": 0.1,
            "batch_size": 64,
        },
        policy={"name": "pbt", "population_size": 4, "steps_per_generation": SPG},
        resources={"slots": 2},
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    process = start_hpctune("launch", str(spec), "--local")
    kills = 0
    for target in (10, 25):  # report lines written so far: mid-generation 1, then later
        while process.poll() is None and _reports(study_dir) < target:
            time.sleep(0.02)
        if process.poll() is not None:
            break
        os.kill(process.pid, signal.SIGKILL)  # the controller only; its workers keep running
        process.wait()
        kills += 1
        process = start_hpctune("resume", str(study_dir), "--local")
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    assert kills == 2, "the study ended before the controller could be killed twice"

    study = open_study(study_dir)
    record = study.record
    assert record.state is StudyState.FINISHED
    assert record.controller_starts >= 2
    trials = record.trials
    assert all(t.status is TrialStatus.COMPLETED for t in trials.values())
    assert Counter(t.generation for t in trials.values())[0] == 4
    initiators = Counter(t.initiator for t in trials.values() if t.initiator is not None)
    assert max(initiators.values()) == 1  # no reproduction run twice across the restarts
    ended_early = {t.trial_id for t in trials.values() if (t.end_step or MAX_STEPS) < MAX_STEPS}
    assert set(initiators) == ended_early  # and none lost
    assert len(trials) >= 4 * MAX_STEPS // SPG
    frame = study.metrics_frame()
    expected_rows = 0
    for trial in trials.values():
        start, end = trial.parent_step or 0, trial.end_step or MAX_STEPS
        expected_rows += end - start
        assert study.curve(trial.trial_id).steps.tolist() == list(range(start + 1, end + 1))
        if trial.parent_trial is not None:
            parent = trials[trial.parent_trial]
            ref = record.checkpoints[trial.parent_checkpoint_row]  # type: ignore[index]
            assert (ref.trial_id, ref.step) == (parent.trial_id, parent.end_step)
            assert trial.parent_step == parent.end_step
            assert trial.generation == (trials[trial.initiator].generation or 0) + 1  # type: ignore[index]
    assert len(frame) == expected_rows  # no valid metric row lost or duplicated
    # the workers of the killed controllers were adopted: no more than two ever existed
    assert len(record.workers) == 2
    # checkpoints: only two models are left, in the journal and on disk: PBT's fittest trial
    # (best last value, at any step: its last checkpoint) and the study's best model under
    # `keep_checkpoints` (the default keeps it; a PBT study's `best` is "last"): the trial with
    # the best last value among those that trained to max_steps. They may be one model.
    assert record.spec["best"] == "last"
    live = [ref for ref in record.checkpoints.values() if not ref.deleted]
    fittest = min(trials.values(), key=lambda t: (t.curve_values[-1], t.trial_id))
    final = [t for t in trials.values() if t.end_step is None or t.end_step == MAX_STEPS]
    best = min(final, key=lambda t: (t.curve_values[-1], t.trial_id))
    expected = {(fittest.trial_id, fittest.end_step), (best.trial_id, MAX_STEPS)}
    assert {(ref.trial_id, ref.step) for ref in live} == expected
    assert len(live) == len(expected)
    files = sorted(p for p in (study_dir / "checkpoints").rglob("*") if p.is_file())
    assert files == sorted(study_dir / ref.path for ref in live)

    # training replay (§3.9): the fittest trial's lineage re-run as a new study, bit for bit
    replay_dir = tmp_path / "replay"
    cleanup_studies.append(replay_dir)
    result = run_hpctune(
        "replay",
        str(study_dir),
        "--trial",
        str(fittest.trial_id),
        "--study-dir",
        str(replay_dir),
        "--local",
        check=True,
    )
    assert "topological order" in result.stdout
    replayed = open_study(replay_dir)
    plan = replayed.spec["policy"]["options"]["trials"]
    chain = [fittest.trial_id]
    while trials[chain[-1]].parent_trial is not None:
        chain.append(trials[chain[-1]].parent_trial)  # type: ignore[arg-type]
    assert [entry["trial"] for entry in plan] == chain[::-1]
    assert len(replayed.trials) == len(chain)
    for index, entry in enumerate(plan):
        original, again = trials[entry["trial"]], replayed.record.trials[index]
        assert again.params == original.params
        assert again.seed == original.seed
        assert again.parent_trial == entry["parent"]
        assert again.parent_step == original.parent_step
        for metric in ("val_loss", "train_loss"):
            assert study.curve(original.trial_id, metric).values.tolist() == (
                replayed.curve(index, metric).values.tolist()
            )
