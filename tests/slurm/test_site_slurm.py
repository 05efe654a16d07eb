"""hpctune on a site's cluster: run against both variants of tests/slurm/cluster.sh (``site``
marker; tests/run.sh brings each up in turn). Partition names, GPU counts and limits come from
the cluster; on the site variant every job is submitted under ``SBATCH_EXPORT=NONE``.

* launch refuses [slurm] settings Slurm would not run, before it creates anything;
* preempting one task of a job array leaves its siblings running, and no step is retrained;
* worker submissions that fail after launch are shown by ``status`` with Slurm's message, stop
  the study after a few tries, a stop of workers that never started is immediate, and
  ``resume --slurm`` changes the settings; a pending controller's reason shows in status;
* a worker that dies at start points at the file with its traceback.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.journal import state as st
from hpctune.journal.state import decode_data
from hpctune.journal.store import JournalReader
from hpctune.slurm.options import parse_time
from hpctune.study.states import SegmentStatus, StudyState, TrialStatus
from hpctune.wire.eventlog import read_events
from tests.conftest import WORKLOADS, run_hpctune, wait_for, write_study
from tests.slurm.conftest import SlurmCluster
from tests.slurm.test_hpctune_slurm import _controller_job, _reports, _wait_final

pytestmark = [pytest.mark.slurm, pytest.mark.site]
BEHAVIOURS = WORKLOADS / "behaviours.py"


def retrained_steps(study_dir: Path) -> int:
    """Reports of a (trial, step) beyond its first, over every segment's event file: steps
    trained again after a preemption, a requeue or a lost worker."""
    counts: Counter[tuple[int, int]] = Counter()
    for seg in open_study(study_dir).record.segments.values():
        path = study_dir / "events" / f"segment-{seg.segment_id:06d}.jsonl"
        for record in read_events(path).records if path.exists() else []:
            if record.get("kind") == "report":
                counts[(seg.trial_id, int(record["step"]))] += 1
    return sum(n - 1 for n in counts.values())


def _squeue(*args: str) -> list[str]:
    out = subprocess.run(  # a job squeue has forgotten is an error: no lines
        ["squeue", "-h", *args], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def _scontrol_job(job: str) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=30
    ).stdout
    return dict(word.split("=", 1) for word in out.split() if "=" in word)


def _launch(spec: Path) -> subprocess.CompletedProcess[str]:
    return run_hpctune("launch", str(spec))


# ------------------------------------------------------------------------------- launch


def test_launch_refuses_what_slurm_would_not_run_and_creates_nothing(
    tmp_path: Path,
    slurm_cluster: SlurmCluster,
    study_name: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    part = slurm_cluster.default_partition
    limit = slurm_cluster.max_time_min(part)
    cases: list[tuple[dict[str, Any], dict[str, Any], str, tuple[str, ...]]] = [
        ({"partition": "nosuchpartition"}, {}, "slurm.partition", ("invalid partition",)),
        (
            {"partition": part, "controller": {"partition": part, "time": limit + 1}},
            {},
            "slurm.controller.time",
            ("MaxTime",),
        ),
        (
            {"partition": part},
            {"gpus_per_worker": slurm_cluster.gpus + 1},
            "resources.gpus_per_worker",
            ("Requested node configuration is not available", "generic resource"),
        ),
    ]
    for i, (slurm, resources, field, words) in enumerate(cases):
        spec = write_study(
            tmp_path / f"case{i}",
            train=BEHAVIOURS,
            name=study_name,
            space={"x": 1.0},
            resources={"slots": 1, **resources},
            slurm=slurm,
        )
        result = _launch(spec)
        assert result.returncode == 2, (slurm, result.stdout, result.stderr)
        assert field in result.stderr, result.stderr
        assert any(w.lower() in result.stderr.lower() for w in words), result.stderr
        assert not (tmp_path / f"case{i}" / "study").exists()
        assert not list((tmp_path / f"case{i}").glob(".study.creating-*"))
    # The real submission fails after the check passed (the cluster changed in between; here
    # the check is skipped and the partition does not exist): nothing is left either.
    spec = write_study(
        tmp_path / "late",
        train=BEHAVIOURS,
        name=study_name,
        space={"x": 1.0},
        resources={"slots": 1},
        slurm={"partition": "nosuchpartition", "controller": {"partition": "nosuchpartition"}},
    )
    monkeypatch.setattr("hpctune.slurm.checks.check_jobs", lambda *args, **kwargs: None)
    capsys.readouterr()
    assert main(["launch", str(spec)]) == 1
    assert "sbatch" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "late").iterdir()) == ["study.toml", "train.py"]


# ------------------------------------------------------------------ one task of an array


def test_a_preempted_array_task_leaves_its_siblings_running(
    tmp_path: Path, slurm_cluster: SlurmCluster, study_name: str
) -> None:
    max_steps = 16
    modules = tmp_path / "modulefiles"
    (modules / "site-python").mkdir(parents=True)
    (modules / "site-python" / "1.0").write_text(
        "#%Module1.0\nsetenv SITE_MODULE site-python/1.0\n"
    )
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        name=study_name,
        num_trials=2,
        max_steps=max_steps,
        generator={"name": "grid"},
        # checkpoints only when told to suspend: a sibling requeued by mistake would retrain
        space={"x": [0.5, 1.0], "sleep": 0.4, "checkpoint_every": 1000},
        resources={"slots": 2},
        slurm={
            "partition": slurm_cluster.default_partition,
            "time": 20,
            "setup": [  # a module system, loaded as sites do (docs/slurm.md)
                "source /usr/share/modules/init/bash",
                f"module use {modules}",
                "module load site-python",
            ],
            "controller": {"partition": slurm_cluster.preempting_partition},
        },
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(spec), check=True)
    assert wait_for(lambda: _reports(study_dir) >= 6, 120, interval=0.2)
    # the array task that carries the array's own job id: requeueing that id requeues them all
    tasks = dict(
        line.split() for line in _squeue("-r", "-n", f"hpctune-{study_name}", "-o", "%i %A")
    )
    assert len(tasks) == 2, tasks
    (target,) = [task for task, job in tasks.items() if task.split("_")[0] == job]
    (sibling,) = [task for task in tasks if task != target]
    workers = {
        w.info["job_id"]: w.worker_id for w in open_study(study_dir).record.workers.values()
    }
    subprocess.run(["scancel", "--signal=USR2", target], check=True, timeout=30)

    study = _wait_final(study_dir, 180)
    assert study.record.state is StudyState.FINISHED, study.record.reason
    assert all(t.status is TrialStatus.COMPLETED for t in study.trials)
    signalled = study.record.workers[workers[target]]
    untouched = study.record.workers[workers[sibling]]
    suspended = next(
        s for s in study.record.segments.values() if s.worker_id == signalled.worker_id
    )
    assert suspended.status is SegmentStatus.SUSPENDED
    assert "SIGUSR2" in suspended.reason
    # the sibling's job kept its one process: one run, every segment of it ended normally
    assert len(untouched.runs) == 1, untouched.runs
    sibling_segments = [
        s for s in study.record.segments.values() if s.worker_id == untouched.worker_id
    ]
    assert sibling_segments
    assert all(s.status is SegmentStatus.COMPLETED for s in sibling_segments), [
        (s.status, s.reason) for s in sibling_segments
    ]
    assert retrained_steps(study_dir) == 0
    assert not any("requeued" in s.reason for s in study.record.segments.values())
    for trial in study.trials:  # the module the setup lines loaded reached the trials
        out = (study_dir / "logs" / "trials" / f"trial-{trial.trial_id:06d}.out").read_text()
        assert "SITE_MODULE=site-python/1.0" in out
    print(
        f"preemption ({slurm_cluster.variant}): signalled {target}, sibling {sibling}: "
        f"sibling runs {len(untouched.runs)}, signalled runs {len(signalled.runs)}, "
        f"steps retrained {retrained_steps(study_dir)}"
    )


# ------------------------------------------------ submissions that fail, stop, resume


def _journal_records(study_dir: Path, kind: str) -> list[dict[str, Any]]:
    """The data of every committed log record of ``kind``."""
    table = JournalReader(study_dir / "journal.zarr").table("log")
    return [
        decode_data(str(data))
        for k, data in zip(table["kind"], table["data"], strict=True)
        if str(k) == kind
    ]


def test_failing_worker_submissions_show_stop_and_resume_with_other_settings(
    tmp_path: Path,
    slurm_cluster: SlurmCluster,
    study_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = slurm_cluster.run("scontrol", "show", "node", "-o").split()[0].split("=", 1)[1]
    doomed = f"gone{study_name[-12:]}"
    high = slurm_cluster.preempting_partition
    slurm_cluster.run("scontrol", "create", f"PartitionName={doomed}", f"Nodes={node}")
    blocker = ""
    try:
        # a job holding every CPU of the controller's partition keeps both controllers queued
        blocker = slurm_cluster.run(
            "sbatch", "--parsable", "-p", high, "-c", "8", "-t", "5",
            f"--job-name=hpctune-{study_name}", "-o", "/dev/null", "--wrap", "sleep 300",
        ).strip()  # fmt: skip
        assert wait_for(lambda: _squeue("-j", blocker, "-o", "%T") == ["RUNNING"], 30)
        dirs = {}
        for label, retry_s in (("stopped", "60"), ("failed", "0.2")):
            monkeypatch.setenv("HPCTUNE_SUBMIT_RETRY_S", retry_s)  # reaches the controller
            spec = write_study(
                tmp_path / label,
                train=BEHAVIOURS,
                name=study_name,
                num_trials=2,
                max_steps=6,
                space={"x": 1.0, "sleep": 0.1},
                resources={"slots": 2},
                slurm={"partition": doomed, "time": 10, "controller": {"partition": high}},
            )
            dirs[label] = tmp_path / label / "study"
            _controller_job(run_hpctune("launch", str(spec), check=True).stdout)
        status = run_hpctune("status", str(dirs["stopped"]), check=True).stdout
        assert "pending in the queue (Resources)" in status, status
    finally:  # the partition goes away while the controllers wait
        slurm_cluster.run("scontrol", "delete", f"PartitionName={doomed}")
        if blocker:
            subprocess.run(["scancel", blocker], timeout=30, check=False)

    # the fast one fails after its tries, its controller job exits 1
    failed = _wait_final(dirs["failed"], 120)
    assert failed.record.state is StudyState.FAILED
    assert "could not be submitted (5 tries)" in failed.record.reason
    assert "invalid partition" in failed.record.reason.lower()
    job = (dirs["failed"] / "slurm" / "controller-jobs.txt").read_text().split()[-1]
    assert wait_for(lambda: _scontrol_job(job).get("JobState") == "FAILED", 60)
    assert _scontrol_job(job)["ExitCode"] == "1:0"
    # the controller's time defaults to what its partition allows (at most a day)
    limit = min(24 * 60, slurm_cluster.max_time_min(high))
    assert parse_time(_scontrol_job(job)["TimeLimit"], None, "TimeLimit") == limit

    # the slow one: status shows Slurm's message; a stop is immediate (the grace is 300 s)
    stopped = dirs["stopped"]
    assert wait_for(lambda: open_study(stopped).record.submit_failures >= 1, 60)
    status = run_hpctune("status", str(stopped), check=True).stdout
    assert "submission failed 1 time(s)" in status, status
    assert "invalid partition" in status.lower(), status
    run_hpctune("stop", str(stopped), check=True)
    study = _wait_final(stopped, 60)
    assert study.record.state is StudyState.STOPPED
    never = [s for s in study.record.segments.values() if "never started" in s.reason]
    assert len(never) == 2
    assert all(t.status is TrialStatus.QUEUED for t in study.trials)
    assert all(t.retries == 0 for t in study.trials)
    old_job = (stopped / "slurm" / "controller-jobs.txt").read_text().split()[-1]
    assert wait_for(lambda: not _squeue("-j", old_job), 60)  # it has exited

    # resume with other settings: journaled, and the study finishes with them
    part = slurm_cluster.default_partition
    starts = open_study(stopped).record.controller_starts
    resumed = run_hpctune(
        "resume", str(stopped), "--slurm", f"partition={part}", "--slurm", "time=5", check=True
    )
    assert f"worker.partition: '{doomed}' -> '{part}'" in resumed.stdout
    # the study stays `stopped` until the new controller job starts
    assert wait_for(lambda: open_study(stopped).record.controller_starts > starts, 120)
    study = _wait_final(stopped, 180)
    assert study.record.state is StudyState.FINISHED, study.record.reason
    assert all(t.status is TrialStatus.COMPLETED for t in study.trials)
    (change,) = study.record.settings_changes
    assert change["changes"]["worker.partition"] == [doomed, part]
    assert study.record.spec["slurm"]["worker"]["time_min"] == 5
    assert len(_journal_records(stopped, st.SETTINGS_CHANGED)) == 1
    assert retrained_steps(stopped) == 0


# ------------------------------------------------------------- a worker dies at start


def test_a_worker_that_dies_at_start_points_at_its_traceback(
    tmp_path: Path, slurm_cluster: SlurmCluster, study_name: str
) -> None:
    broken = tmp_path / "broken" / "zarr"  # hpctune needs zarr: a broken copy comes first
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        'raise ImportError("a broken zarr shadows the real one")\n'
    )
    spec = write_study(
        tmp_path,
        train=BEHAVIOURS,
        name=study_name,
        num_trials=3,
        space={"x": 1.0},
        resources={"slots": 3},
        slurm={
            "partition": slurm_cluster.default_partition,
            "time": 5,
            "setup": [f"export PYTHONPATH={broken.parent}"],  # a wrong setup line
        },
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(spec), check=True)
    study = _wait_final(study_dir, 120)
    assert study.record.state is StudyState.FAILED
    reason = study.record.reason
    assert "died before their first heartbeat" in reason, reason
    path = Path(reason.split("see ", 1)[1].split(":", 1)[0])
    assert path.is_relative_to(study_dir / "slurm" / "workers"), reason
    text = path.read_text()
    assert "Traceback" in text
    assert "a broken zarr shadows the real one" in text
    assert "a broken zarr shadows the real one" in reason  # its tail is quoted
