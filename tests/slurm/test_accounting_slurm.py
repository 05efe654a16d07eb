"""Accounting on the real local cluster: after the controller and its workers are preempted
together (the controller misses the workers' requeue), the allocated time and the queue wait
of ``hpctune status`` agree with sacct's. Needs sacct: the default variant of cluster.sh."""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from hpctune.journal.usage import study_usage
from hpctune.slurm.accounting import sacct_allocated_s
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import WORKLOADS, run_hpctune, wait_for, write_study
from tests.slurm.conftest import SlurmCluster
from tests.slurm.test_hpctune_slurm import _reports, _sacct, _wait_final

pytestmark = pytest.mark.slurm


def sacct_queue_s(job_ids: list[str]) -> float:
    """Seconds the jobs waited in the queue, every run of a requeued job included: from
    submission to the first start, and from each run's end to the next run's start."""
    total = 0.0
    for job in job_ids:
        rows = _sacct("-D", "-X", "-j", job, "-o", "JobID,Submit,Start,End")
        runs = sorted(
            (datetime.fromisoformat(start), datetime.fromisoformat(end))
            for _, _, start, end in rows
            if start not in ("Unknown", "None")
        )
        assert runs, rows
        waiting_since = datetime.fromisoformat(rows[0][1])
        for start, end in runs:
            total += max((start - waiting_since).total_seconds(), 0.0)
            waiting_since = end
    return total


def _all_runs_ended(job: str) -> bool:
    """Whether sacct has an end time for every run of the job."""
    rows = _sacct("-D", "-X", "-j", job, "-o", "End")
    return bool(rows) and all(end not in ("Unknown", "None", "") for (end,) in rows)


def test_accounting_agrees_with_sacct_after_controller_and_worker_preemption(
    tmp_path: Path, accounting_cluster: SlurmCluster, study_name: str
) -> None:
    part, high = accounting_cluster.default_partition, accounting_cluster.preempting_partition
    spec = write_study(
        tmp_path,
        train=WORKLOADS / "behaviours.py",
        name=study_name,
        num_trials=2,
        max_steps=30,
        generator={"name": "grid"},
        space={"x": [0.5, 1.0], "sleep": 0.5},
        resources={"slots": 2},
        slurm={"partition": part, "time": 20, "controller": {"partition": part}},
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(spec), check=True)
    assert wait_for(lambda: _reports(study_dir) >= 10, 120, interval=0.2)
    # a job that needs every CPU of the node: the controller and both workers are preempted
    subprocess.run(
        ["sbatch", "--parsable", "-p", high, "-c", "8", "-t", "2", "-o", "/dev/null",
         f"--job-name=hpctune-{study_name}", "--wrap", "sleep 5"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    study = _wait_final(study_dir, 240)
    assert study.record.state is StudyState.FINISHED, study.record.reason
    assert all(t.status is TrialStatus.COMPLETED for t in study.trials)
    assert study.record.controller_starts >= 2  # the controller was preempted too
    jobs = [str(w.info["job_id"]) for w in study.record.workers.values()]
    assert all(len(_sacct("-D", "-X", "-j", job, "-o", "JobID")) >= 2 for job in jobs), (
        "every worker job ran twice (preempted, requeued)"
    )

    # the study is final when its workers exit; sacct records their jobs' end a moment later
    # (until then End is "Unknown"): compare once every run of every worker job has ended
    assert wait_for(lambda: all(_all_runs_ended(job) for job in jobs), 60, interval=1.0)
    usage = study_usage(study.record)
    theirs = sacct_allocated_s(study.record)
    queue = sacct_queue_s(jobs)
    assert theirs is not None
    for worker in study.record.workers.values():
        # each run starts at its job's batch step, found from the worker: sacct's start of the
        # run (whole seconds, so up to a second earlier) and a moment of Slurm's launch before it
        job = str(worker.info["job_id"])
        starts = [
            datetime.fromisoformat(start).timestamp()
            for start, _ in _sacct("-D", "-X", "-j", job, "-o", "Start,End")
            if start not in ("Unknown", "None")
        ]
        ours = [run.since for run in worker.runs]
        print(f"{worker.worker_id} (job {job}): run starts hpctune {ours}, sacct {starts}")
        assert len(ours) == len(starts)
        assert all(0.0 <= a - b <= 1.5 for a, b in zip(ours, sorted(starts), strict=True))
    print(
        f"accounting: hpctune allocated {usage.allocated_s:.1f} s, sacct {theirs:.0f} s "
        f"({100 * (usage.allocated_s - theirs) / theirs:+.1f} %); queue wait hpctune "
        f"{usage.queue_s:.1f} s, sacct {queue:.0f} s"
    )
    # sacct's start and end of each run are whole seconds (its elapsed time is up to a second
    # off), and hpctune ends a run at its last heartbeat: 5 % plus a second per run (runs:
    # sacct's records of the worker jobs)
    runs = sum(len(_sacct("-D", "-X", "-j", job, "-o", "JobID")) for job in jobs)
    assert abs(usage.allocated_s - theirs) <= 0.05 * theirs + 1.0 * runs
    assert abs(usage.queue_s - queue) <= 0.05 * queue + 2.0 * runs
    out = run_hpctune("status", str(study_dir), "--sacct", check=True).stdout
    assert f"sacct: worker jobs held their allocation {theirs:.0f} s" in out
