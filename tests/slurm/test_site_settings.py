"""Site settings without a cluster: ``resume --slurm`` values, the [slurm] table round trip,
partition limits and default times, sbatch messages mapped to keys, the job environment, the
array task a worker requeues, the accounting of runs a controller did not see, and a local
study whose [slurm] settings change on resume (journaled). What Slurm does with all this is
tested on both variants of the local cluster in tests/slurm/test_site_slurm.py."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.controller.settings import (
    decision_wait_from_env,
    replan_drift,
    settings_from_environment,
)
from hpctune.core.pool import SUBMIT_TRIES, _run_end, submit_retry_delay
from hpctune.errors import StudySpecError
from hpctune.journal.entities import WorkerRecord, WorkerRun
from hpctune.slurm.checks import keys_for
from hpctune.slurm.cluster import (
    JobStatus,
    default_time,
    parse_partitions,
    resolve_times,
    sbatch_flags,
)
from hpctune.slurm.environment import export_lines, job_environment
from hpctune.slurm.options import JobOptions, SlurmSpec, parse_slurm, slurm_spec, slurm_table
from hpctune.slurm.settings import apply_assignments, differences, parse_assignments
from hpctune.slurm.status import status_lines
from hpctune.spec import load_spec
from hpctune.study.states import StudyState
from hpctune.wire.protocol import Heartbeat
from tests.conftest import WORKLOADS, run_hpctune, write_study
from tests.slurm.test_slurm_options import SLURM

SCONTROL = (
    "PartitionName=scavenger AllowGroups=ALL Default=YES MaxTime=04:00:00 State=UP\n"
    "PartitionName=urgent AllowGroups=ALL Default=NO MaxTime=02:00:00 State=UP\n"
    "PartitionName=long Default=NO MaxTime=UNLIMITED State=DOWN\n"
)


def test_the_slurm_table_round_trips() -> None:
    spec = parse_slurm(SLURM, Path("s.toml"))
    assert parse_slurm(slurm_table(spec), Path("s.toml")) == spec
    assert parse_slurm(slurm_table(SlurmSpec()), Path("s.toml")) == SlurmSpec()


def test_slurm_assignments_are_typed_checked_and_can_remove_a_key() -> None:
    changes = parse_assignments(
        [
            "partition=gpu",
            "time=30",
            "controller.time=12:00:00",
            'setup=["module load python/3.11"]',
            "slurm.account=",
        ]
    )
    assert changes == {
        "partition": "gpu",
        "time": 30,
        "controller.time": "12:00:00",
        "setup": ["module load python/3.11"],
        "account": None,
    }
    old = parse_slurm(SLURM, Path("s.toml"))
    new = apply_assignments(old, changes)
    assert new.worker.partition == "gpu"
    assert new.worker.account is None
    assert new.worker.time_min == 30
    assert new.controller.time_min == 12 * 60
    assert new.controller.partition == old.controller.partition  # untouched
    diff = differences(old, new)
    assert diff["worker.account"] == ["proj", None]
    assert set(diff) == {
        "worker.account",
        "worker.time_min",
        "worker.setup",
        "controller.time_min",
    }


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("partiton=gpu", "slurm.partiton"),
        ("controller.max_pending=3", "slurm.controller.max_pending"),
        ("workers.time=3", "slurm.workers.time"),
        ("nokey", ""),
    ],
)
def test_bad_slurm_assignments_name_the_key(text: str, field: str) -> None:
    with pytest.raises(StudySpecError) as err:
        parse_assignments([text])
    assert err.value.field == field


def test_a_bad_new_value_is_refused_like_in_a_study_toml() -> None:
    with pytest.raises(StudySpecError) as err:
        apply_assignments(SlurmSpec(), parse_assignments(["controller.time=4h"]))
    assert err.value.field == "slurm.controller.time"
    assert "--slurm" in str(err.value)


def test_partitions_and_default_times() -> None:
    parts = parse_partitions(SCONTROL)
    assert [(p.name, p.default, p.max_time_min) for p in parts] == [
        ("scavenger", True, 240),
        ("urgent", False, 120),
        ("long", False, None),
    ]
    scavenger, urgent, unlimited = parts
    assert default_time(JobOptions(), 24 * 60, urgent) == 120  # capped by MaxTime
    assert default_time(JobOptions(), 24 * 60, unlimited) == 24 * 60
    assert default_time(JobOptions(time_min=30), 24 * 60, urgent) == 30  # set: kept
    assert default_time(JobOptions(), 60, scavenger) == 60
    assert default_time(JobOptions(), 60, None) == 60


def test_unset_times_resolve_against_the_partitions(tmp_path: Path) -> None:
    spec = load_spec(
        write_study(
            tmp_path,
            train="def train(ctx):\n    pass\n",
            space={"x": 1.0},
            slurm={"controller": {"partition": "urgent"}},
        )
    )
    assert slurm_spec(spec).controller.time_min is None
    resolved = resolve_times(spec, parse_partitions(SCONTROL))
    assert slurm_spec(resolved).controller.time_min == 120
    assert slurm_spec(resolved).worker.time_min == 60  # scavenger (default) allows 4 h
    assert slurm_spec(resolve_times(spec, [])).controller.time_min == 24 * 60  # no scontrol


@pytest.mark.parametrize(
    ("message", "keys"),
    [
        ("sbatch: error: invalid partition specified: gone", ("partition",)),
        ("Batch job submission failed: Invalid account or account/partition", ("account",)),
        ("Batch job submission failed: Invalid qos specification", ("qos",)),
        ("Batch job submission failed: Requested time limit is invalid", ("time",)),
        ("Batch job submission failed: Invalid feature specification", ("constraint",)),
        ("Invalid generic resource (gres) specification", ("gpus",)),
        (
            "Batch job submission failed: Requested node configuration is not available",
            ("cpus", "gpus", "mem", "constraint"),
        ),
        ("Batch job submission failed: Job dependency problem", ()),
    ],
)
def test_sbatch_messages_name_the_keys_to_change(message: str, keys: tuple[str, ...]) -> None:
    assert keys_for(message) == keys


def test_worker_flags_are_what_submitit_writes(tmp_path: Path) -> None:
    from hpctune.slurm.executor import worker_parameters

    spec = load_spec(write_study(tmp_path, train="def train(ctx):\n    pass\n", space={"x": 1}))
    flags = sbatch_flags(worker_parameters(spec, env={}))
    assert "--requeue" in flags
    assert "--time=60" in flags
    assert not any(f.startswith(("--setup", "--srun", "--signal-delay")) for f in flags)


def test_the_job_environment_is_explicit() -> None:
    env = {
        "PYTHONPATH": "/shared/my code",
        "SLURM_CONF": "/etc/site.conf",
        "HPCTUNE_STOP_GRACE": "3",
        "HOME": "/root",
        "SLURM_JOB_ID": "12",
    }
    assert job_environment(env) == {
        "PYTHONPATH": "/shared/my code",
        "SLURM_CONF": "/etc/site.conf",
        "HPCTUNE_STOP_GRACE": "3",
    }
    assert export_lines(env) == [
        "export PYTHONPATH='/shared/my code' SLURM_CONF=/etc/site.conf HPCTUNE_STOP_GRACE=3"
    ]
    assert export_lines({"HOME": "/root"}) == []


def test_a_worker_requeues_exactly_its_array_task(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpctune.worker.process import own_job_id

    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    assert own_job_id() is None
    monkeypatch.setenv("SLURM_JOB_ID", "27")
    assert own_job_id() == "27"
    # task 1 of array 27 carries the array's own id: `scontrol requeue 27` takes every task
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "27")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    assert own_job_id() == "27_1"


def test_a_run_the_controller_did_not_see_end_ends_at_its_last_heartbeat() -> None:
    worker = WorkerRecord("w0000", 0.0, runs=[WorkerRun(100.0)])
    # the next process tells when the one before it last beat
    beat = Heartbeat("w0000", started=300.0, previous_started=100.0, previous_time=160.0)
    assert _run_end(worker, beat) == 160.0
    # a process in between the journal never saw: the open run ended before it started
    beat = Heartbeat("w0000", started=300.0, previous_started=200.0, previous_time=250.0)
    assert _run_end(worker, beat) == 200.0
    # an old worker without the fields: the new process's start (as before)
    assert _run_end(worker, Heartbeat("w0000", started=300.0)) == 300.0


def test_submission_tries_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPCTUNE_SUBMIT_RETRY_S", raising=False)
    first = settings_from_environment().submit_retry
    delays = [submit_retry_delay(n, first) for n in range(1, SUBMIT_TRIES)]
    assert delays == [10.0, 20.0, 40.0, 80.0]
    monkeypatch.setenv("HPCTUNE_SUBMIT_RETRY_S", "0.5")
    assert submit_retry_delay(2, settings_from_environment().submit_retry) == 1.0


def test_status_explains_a_pending_controller_and_failing_submissions() -> None:
    job = JobStatus("41", "PENDING", "PartitionTimeLimit")
    data = {
        "controller_job": {
            "job": "41",
            "state": job.state,
            "reason": job.reason,
            "hint": job.hint,
        },
        "submission": {"failures": 2, "error": "sbatch: error: invalid partition specified"},
        "pending_workers": {"42_0": "Resources", "42_1": "Resources"},
    }
    lines = status_lines(data, "/s/study")
    assert "job 41 pending in the queue (PartitionTimeLimit)" in lines[0]
    assert "lower `time`" in lines[0]
    assert "--slurm controller.KEY=VALUE" in lines[0]
    assert "submission failed 2 time(s)" in lines[1]
    assert "invalid partition specified" in lines[1]
    assert lines[2] == "workers: 2 job(s) waiting in the queue (Resources)"


def test_resume_with_other_slurm_settings_journals_them(tmp_path: Path) -> None:
    spec = write_study(
        tmp_path,
        train=WORKLOADS / "behaviours.py",
        num_trials=2,
        max_steps=2,
        space={"x": 1.0},
        slurm={"partition": "gpu", "controller": {"time": 60}},
    )
    study_dir = tmp_path / "study"
    run_hpctune("launch", str(spec), "--local", check=True)
    before = open_study(study_dir).record.spec
    other = tmp_path / "other"
    other_spec = write_study(
        other,
        train=WORKLOADS / "behaviours.py",
        num_trials=9,  # not taken: only [slurm] is
        max_steps=2,
        space={"x": 2.0},
        slurm={"partition": "a100", "account": "proj"},
    )
    result = run_hpctune(
        "resume",
        str(study_dir),
        "--local",
        "--spec",
        str(other_spec),
        "--slurm",
        "controller.time=30",
        check=True,
    )
    assert "only [slurm] and [slurm.controller] are taken" in result.stdout
    assert "[slurm] worker.partition: 'gpu' -> 'a100'" in result.stdout
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    (change,) = study.record.settings_changes
    assert change["changes"]["worker.partition"] == ["gpu", "a100"]
    assert change["changes"]["controller.time_min"] == [60, 30]
    assert "--spec" in change["source"]
    assert "--slurm controller.time=30" in change["source"]
    after = study.record.spec
    assert after["slurm"]["worker"]["account"] == "proj"
    assert {k: v for k, v in after.items() if k != "slurm"} == {
        k: v for k, v in before.items() if k != "slurm"
    }
    assert len(study.trials) == 2
    # a bad value is refused before anything runs
    bad = run_hpctune("resume", str(study_dir), "--local", "--slurm", "time=soon")
    assert bad.returncode == 2
    assert "slurm.time" in bad.stderr
    assert open_study(study_dir).record.settings_changes == study.record.settings_changes


def test_unchanged_settings_are_not_journaled() -> None:
    spec = SlurmSpec()
    assert differences(spec, dataclasses.replace(spec)) == {}


@pytest.mark.parametrize(
    ("value", "wait"), [(None, 2.0), ("600", 600.0), ("0", 0.0), ("-1", 2.0), ("x", 2.0)]
)
def test_the_decision_wait_comes_from_the_environment(
    value: str | None, wait: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HPCTUNE_DECISION_WAIT``: seconds a worker waits at a boundary (bad values: 2)."""
    if value is None:
        monkeypatch.delenv("HPCTUNE_DECISION_WAIT", raising=False)
    else:
        monkeypatch.setenv("HPCTUNE_DECISION_WAIT", value)
    assert decision_wait_from_env() == wait


@pytest.mark.parametrize(
    ("value", "drift"),
    [(None, 0.15), ("0.3", 0.3), ("inf", math.inf), ("-1", 0.15), ("nan", 0.15), ("x", 0.15)],
)
def test_the_replan_drift_comes_from_the_environment(
    value: str | None, drift: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HPCTUNE_REPLAN_DRIFT``: the same reading as the decision wait's, ``inf`` allowed."""
    if value is None:
        monkeypatch.delenv("HPCTUNE_REPLAN_DRIFT", raising=False)
    else:
        monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", value)
    assert replan_drift() == drift
