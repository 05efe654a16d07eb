"""hpctune on the real local Slurm cluster: the controller as a batch job, workers as submitit
jobs with a fake GPU each, preemption, time limits, a signalled and a cancelled controller."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hpctune.api import Study, open_study
from hpctune.journal.usage import study_usage
from hpctune.slurm.accounting import sacct_allocated_s
from hpctune.study.states import SegmentStatus, StudyState, TrialStatus
from tests.conftest import DIGITS, WORKLOADS, run_hpctune, wait_for, write_study
from tests.core.test_kill import SPACE

pytestmark = pytest.mark.slurm
BEHAVIOURS = WORKLOADS / "behaviours.py"
FINAL = (StudyState.FINISHED, StudyState.FAILED, StudyState.STOPPED)


def submit_preemptor(study_name: str, folder: Path) -> str:
    """Submit a job wanting all four GPUs on the high partition, so that Slurm must preempt the
    study's worker jobs for it; return its job id. Named after the study, so that the
    ``study_name`` fixture cancels it."""
    return subprocess.run(
        [
            "sbatch",
            "--parsable",
            "-p",
            "high",
            "--gres=gpu:4",
            "-c",
            "1",
            "-t",
            "2",
            f"--job-name=hpctune-{study_name}",
            "-o",
            str(folder / "preemptor.out"),
            "--wrap",
            "sleep 3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()


def assert_preemptions_suspended(study: Study) -> None:
    """Some segment was preempted (SIGUSR2), and every preempted one ended suspended (to be
    resumed from its checkpoint), not failed."""
    preempted = [s for s in study.record.segments.values() if "SIGUSR2" in s.reason]
    assert preempted, "no segment was preempted"
    assert all(s.status is SegmentStatus.SUSPENDED for s in preempted)


def _controller_job(stdout: str) -> str:
    match = re.search(r"controller job: (\d+)", stdout)
    assert match, stdout
    return match.group(1)


def _reports(study_dir: Path) -> int:
    events = study_dir / "events"
    if not events.exists():
        return 0
    return sum(p.read_bytes().count(b'"report"') for p in events.glob("*.jsonl"))


def _wait_final(study_dir: Path, timeout: float) -> Study:
    def done() -> bool:
        return open_study(study_dir).record.state in FINAL

    if not wait_for(done, timeout, interval=1.0):
        log = sorted((study_dir / "logs").glob("controller-*.out"))
        tail = log[-1].read_text()[-2000:] if log else "(no controller output)"
        raise AssertionError(f"study not finished after {timeout} s; controller output:\n{tail}")
    return open_study(study_dir)


def _sacct(*args: str) -> list[list[str]]:
    out = subprocess.run(
        ["sacct", "-n", "-P", *args], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [line.split("|") for line in out.splitlines() if line]


def _job_state(job: str) -> str:
    rows = _sacct("-X", "-j", job, "-o", "State")
    return rows[0][0] if rows else ""


def _wait_job_done(job: str, timeout: float = 90) -> str:
    """Wait until a job has ended; return its final state."""
    final = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT")
    assert wait_for(lambda: _job_state(job).startswith(final), timeout, interval=1.0), job
    return _job_state(job)


def _check_behaviour_curves(study: Study, max_steps: int) -> None:
    """Every trial completed once, with steps 1..max_steps once each and the exact values."""
    frame = study.metrics_frame()
    for trial in study.trials:
        assert trial.status is TrialStatus.COMPLETED, (trial.trial_id, trial.reason)
        assert [h.status for h in trial.history].count(TrialStatus.COMPLETED) == 1
        rows = frame[frame.trial == trial.trial_id]
        assert rows.step.tolist() == list(range(1, max_steps + 1))
        expected = [trial.params["x"] * s / max_steps for s in range(1, max_steps + 1)]
        assert np.allclose(rows.score, expected)
        assert np.allclose(rows.total, np.cumsum(expected))  # the state went through checkpoints


def test_digits_on_slurm_equals_the_local_run(tmp_path: Path, study_name: str) -> None:
    common: dict[str, Any] = {
        "train": DIGITS / "train.py",
        "metric": "val_accuracy",
        "max_steps": 8,
        "num_trials": 4,
        "seed": 5,
        "space": SPACE,
        "name": study_name,
        "resources": {"slots": 2, "gpus_per_worker": 1},
    }
    slurm_dir, local_dir = tmp_path / "on-slurm", tmp_path / "local"
    spec = write_study(
        tmp_path / "a",
        directory=str(slurm_dir),
        slurm={"partition": "debug", "time": 10, "mem": "1G"},
        **common,
    )
    result = run_hpctune("launch", str(spec), check=True)
    job = _controller_job(result.stdout)
    local_spec = write_study(tmp_path / "b", directory=str(local_dir), **common)
    run_hpctune("launch", str(local_spec), "--local", check=True)

    study, local = _wait_final(slurm_dir, 240), open_study(local_dir)
    assert study.record.state is StudyState.FINISHED
    assert len(study.trials) == len(local.trials) == 4
    for trial in study.trials:
        assert trial.status is TrialStatus.COMPLETED
        assert np.array_equal(
            study.curve(trial.trial_id).values, local.curve(trial.trial_id).values
        )
    # the controller ran as a batch job, the workers as jobs of an array with one GPU each
    assert _wait_job_done(job) == "COMPLETED"  # after its workers exited
    rows = _sacct("-X", "-j", job, "-o", "JobID,JobName,State")
    assert rows[0][1] == f"hpctune-{study_name}-controller"
    # allocated time from the journal agrees with sacct's (whole seconds, polling delays)
    study = open_study(slurm_dir)
    ours, theirs = study_usage(study.record).allocated_s, sacct_allocated_s(study.record)
    assert theirs is not None
    assert theirs > 0
    assert abs(ours - theirs) <= 3.0 + 0.2 * theirs, (ours, theirs)
    worker_jobs = {w.info["job_id"] for w in study.record.workers.values()}
    for job_id in worker_jobs:
        (row,) = _sacct("-X", "-j", job_id, "-o", "JobID,State,AllocTRES")
        assert row[1] == "COMPLETED"
        assert "gres/gpu=1" in row[2]


def test_preempted_worker_resumes_its_trial_from_the_checkpoint(
    tmp_path: Path, study_name: str
) -> None:
    max_steps = 24
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        name=study_name,
        num_trials=1,
        max_steps=max_steps,
        space={"x": 0.5, "sleep": 0.4},
        resources={"slots": 1, "gpus_per_worker": 1},
        slurm={"partition": "debug", "time": 20, "controller": {"partition": "high"}},
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(spec), check=True)
    assert wait_for(lambda: _reports(study_dir) >= 6, 120, interval=0.2)
    preemptor = submit_preemptor(study_name, tmp_path)
    study = _wait_final(study_dir, 240)
    assert study.record.state is StudyState.FINISHED
    _check_behaviour_curves(study, max_steps)
    trial = study.trial(0)
    segments = [study.record.segments[s] for s in trial.segments]
    assert len(segments) >= 2
    assert segments[0].status is SegmentStatus.SUSPENDED
    assert "SIGUSR2" in segments[0].reason
    assert segments[1].start_step == segments[0].end_step > 0  # resumed from its checkpoint
    assert trial.retries == 0  # a preemption is not a failure
    (worker,) = study.record.workers.values()
    records = _sacct("-D", "-X", "-j", worker.info["job_id"], "-o", "JobID,State")
    assert any(state.startswith(("PREEMPTED", "REQUEUED")) for _, state in records), records
    assert _sacct("-X", "-j", preemptor, "-o", "State")[0][0] == "COMPLETED"
    out = (study_dir / "logs" / "trials" / "trial-000000.out").read_text()
    assert f"env CUDA_VISIBLE_DEVICES=0 SLURM_JOB_ID={worker.info['job_id']}" in out


@pytest.mark.slow
def test_a_trial_longer_than_the_time_limit_finishes_across_requeues(
    tmp_path: Path, study_name: str
) -> None:
    max_steps = 70
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        name=study_name,
        num_trials=1,
        max_steps=max_steps,
        space={"x": 1.0, "sleep": 1.0},
        resources={"slots": 1},
        slurm={
            "partition": "debug",
            "time": 1,
            "signal_delay_s": 30,
            "controller": {"partition": "high"},
        },
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(spec), check=True)
    study = _wait_final(study_dir, 420)
    assert study.record.state is StudyState.FINISHED
    _check_behaviour_curves(study, max_steps)
    segments = [study.record.segments[s] for s in study.trial(0).segments]
    assert len(segments) >= 2, "a 70 s trial cannot fit in one 1-minute job"
    suspended = [s for s in segments if s.status is SegmentStatus.SUSPENDED]
    assert suspended
    assert all("SIGUSR2" in s.reason for s in suspended)


def test_signalled_then_cancelled_controller_loses_nothing(
    tmp_path: Path, study_name: str
) -> None:
    max_steps = 20
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        name=study_name,
        num_trials=4,
        max_steps=max_steps,
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}, "sleep": 0.25},
        resources={"slots": 2},
        slurm={"partition": "debug", "time": 10},
    )
    study_dir = tmp_path / "study"
    job = _controller_job(run_hpctune("launch", str(spec), check=True).stdout)
    assert wait_for(lambda: _reports(study_dir) >= 10, 120, interval=0.2)

    # USR2, as Slurm sends it near the time limit: the controller requeues its own job
    subprocess.run(["scancel", "--batch", "--signal=USR2", job], check=True, timeout=30)
    assert wait_for(lambda: open_study(study_dir).record.controller_starts >= 2, 120)
    assert wait_for(lambda: _reports(study_dir) >= 30, 120, interval=0.2)

    # a plain scancel: the study waits for `hpctune resume`, which submits a new controller
    subprocess.run(["scancel", job], check=True, timeout=30)
    assert wait_for(
        lambda: (
            not subprocess.run(
                ["squeue", "-h", "-j", job], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        ),
        60,
    )
    resumed = run_hpctune("resume", str(study_dir), check=True)
    assert _controller_job(resumed.stdout) != job
    study = _wait_final(study_dir, 240)
    assert study.record.state is StudyState.FINISHED
    assert study.record.controller_starts >= 3
    assert len(study.trials) == 4
    _check_behaviour_curves(study, max_steps)
    states = [state for _, state in _sacct("-D", "-X", "-j", job, "-o", "JobID,State")]
    assert any(s.startswith("REQUEUED") for s in states) or len(states) >= 2, states


def test_a_stopped_trial_frees_its_worker_for_the_next(tmp_path: Path, study_name: str) -> None:
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        name=study_name,
        num_trials=3,
        max_steps=60,  # a margin for the stop command on a loaded machine
        generator={"name": "grid"},
        space={"x": [1.0, 2.0, 3.0], "sleep": 0.3},
        resources={"slots": 1},
        slurm={"partition": "debug", "time": 10},
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(spec), check=True)
    assert wait_for(lambda: _reports(study_dir) >= 3, 120, interval=0.2)
    run_hpctune("stop", str(study_dir), "--trial", "0", check=True)
    assert wait_for(lambda: open_study(study_dir).trial(0).status is TrialStatus.TERMINATED, 60)
    study = _wait_final(study_dir, 240)
    assert study.trial(0).status is TrialStatus.TERMINATED
    assert study.trial(0).reason == "stopped by the user"
    # its worker ended the segment itself at a report (not cancelled after the 300 s grace)
    last = study.record.segments[study.trial(0).segments[-1]]
    assert last.status is SegmentStatus.TERMINATED
    assert [study.trial(i).status for i in (1, 2)] == [TrialStatus.COMPLETED] * 2
    # the same worker job took the next assignment
    workers = {study.record.segments[s].worker_id for t in study.trials for s in t.segments}
    assert len(workers) == 1


def test_a_trial_that_ignores_a_stop_has_its_worker_cancelled(
    tmp_path: Path, study_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCTUNE_STOP_GRACE", "3")  # reaches the controller job via sbatch
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        name=study_name,
        num_trials=2,
        max_steps=10,
        generator={"name": "grid"},
        space={"behaviour": ["hang", "ok"], "x": 1.0, "sleep": 0.2},
        resources={"slots": 1},
        slurm={"partition": "debug", "time": 10},
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(spec), check=True)
    assert wait_for(lambda: _reports(study_dir) >= 2, 120, interval=0.2)
    run_hpctune("stop", str(study_dir), "--trial", "0", check=True)
    study = _wait_final(study_dir, 240)
    hung = study.trial(0)
    assert hung.status is TrialStatus.TERMINATED
    assert "did not stop within 3 s" in hung.reason
    assert study.trial(1).status is TrialStatus.COMPLETED
    first = study.record.workers["w0000"]
    assert first.state == "lost"
    assert "cancelled" in first.reason
    assert _sacct("-X", "-j", first.info["job_id"], "-o", "State")[0][0].startswith("CANCELLED")
