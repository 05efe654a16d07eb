"""`hpctune plan-elastic --partition`: the billing weight from a real partition's
TRESBillingWeights, as `scontrol show partition` gives it; `hpctune profile STUDY_TOML` with
its workers as Slurm jobs; a study with a deadline following its plan with worker jobs, and
`hpctune resume --deadline` re-planning one."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.controller.launch import create_study, run_local
from hpctune.elastic import Profile
from hpctune.elastic.experiment import ExperimentSpec
from hpctune.elastic.follow import study_cost_model
from hpctune.slurm.backend import SlurmBackend
from hpctune.spec import load_spec
from hpctune.study.states import StudyState
from tests.conftest import DIGITS, run_hpctune, wait_for, write_study
from tests.slurm.conftest import SlurmCluster

pytestmark = pytest.mark.slurm

FINAL = (StudyState.FINISHED, StudyState.STOPPED, StudyState.FAILED)


def test_plan_elastic_bills_by_the_partitions_weights(
    tmp_path: Path,
    slurm_cluster: SlurmCluster,
    study_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    node = slurm_cluster.run("scontrol", "show", "node", "-o").split()[0].split("=", 1)[1]
    name = f"bill{study_name[-12:]}"
    weights = "CPU=1.0,Mem=0.25G,GRES/gpu=2.0"
    slurm_cluster.run(
        "scontrol", "create", f"PartitionName={name}", f"Nodes={node}",
        f"TRESBillingWeights={weights}",
    )  # fmt: skip
    try:
        spec = write_study(
            tmp_path,
            train=DIGITS / "train.py",
            num_trials=9,
            max_steps=9,
            policy={"name": "sha", "bracket_size": 9},
            space={"lr": 0.1},
            resources={"slots": 2, "cpus_per_worker": 4, "gpus_per_worker": 1},
            slurm={"mem": "8G"},
        )
        profile = Profile.scaling(2.0, {2: 1.8}).save(tmp_path / "profile.json")
        args = ["plan-elastic", str(spec), "--deadline", "1h", "--profile", str(profile)]
        capsys.readouterr()
        assert main([*args, "--partition", name, "--json"]) == 0
        cost = json.loads(capsys.readouterr().out)["cost_model"]
        # one GPU with its 4 CPUs and 8 GB: 4 x 1.0 + 8 x 0.25 + 2.0
        assert cost["billing_weight"] == pytest.approx(8.0)
        assert weights in cost["billing_source"]
        assert main([*args, "--partition", name]) == 0
        assert f"billing: 8 units per GPU-hour (TRESBillingWeights of partition {name}" in (
            capsys.readouterr().out
        )
        assert main([*args, "--partition", "nosuchpartition"]) == 2
        assert "nosuchpartition is not known" in capsys.readouterr().err
        # a study with a deadline priced by its workers' partition: the same weight
        priced = write_study(
            tmp_path / "priced",
            train=DIGITS / "train.py",
            num_trials=9,
            max_steps=9,
            policy={"name": "sha", "bracket_size": 9},
            space={"lr": 0.1},
            resources={
                "slots": 2, "cpus_per_worker": 4, "gpus_per_worker": 1, "deadline": "1h",
                "billing_weight": "partition", "price": 0.5,
            },
            slurm={"mem": "8G", "partition": name},
        )  # fmt: skip
        model = study_cost_model(load_spec(priced), SlurmBackend().billing_weight)
        assert (model.billing_weight, model.price, model.unit) == (8.0, 0.5, "$")
        assert weights in model.billing_source
    finally:
        slurm_cluster.run("scontrol", "delete", f"PartitionName={name}")
        shutil.rmtree(tmp_path / "study", ignore_errors=True)


TRAIN = """
import torch

def train(ctx):
    torch.set_num_threads(ctx.devices)
    w = torch.zeros(8)
    for step in range(ctx.start_step, ctx.max_steps):
        w = w + 1
        ctx.report(step=step + 1, score=float(w.mean()), devices=ctx.devices)
        ctx.save_checkpoint({"w": w})
"""


def test_profile_runs_its_short_studies_as_slurm_jobs(
    tmp_path: Path, slurm_cluster: SlurmCluster, study_name: str
) -> None:
    """Without --local, each size's worker is a Slurm job of that many CPUs: its queue wait
    (SCALE, per size) and start-up (INIT) come from the journal, ctx.devices is the size; then
    2 workers (the spec's slots) start at once as Slurm jobs: INIT, warm-up, crowding; then the
    sync study's worker job: SYNC from its rung decisions."""
    spec = write_study(
        tmp_path, train=TRAIN, name=study_name, space={"x": [1]}, max_steps=2, num_trials=1
    )
    try:
        result = run_hpctune("profile", str(spec), "--sizes", "1,2", "--steps", "2")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "as Slurm jobs" in result.stdout
        profile = Profile.load(tmp_path / "study")
        assert profile.sizes == (1, 2)
        assert sorted(profile.queue_wait) == [1, 2]
        # size 1's worker, the two together and the sync study's
        assert len(profile.queue_wait[1]) == 1 + 2 + 1
        assert len(profile.queue_wait[2]) == 1
        assert len(profile.startup) == 2 + 1  # each size's worker and the sync study's
        assert [len(v) for v in profile.startup_together.values()] == [2]
        together = open_study(tmp_path / "study" / "profile" / "together-2").record
        assert [w.info.get("executor") for w in together.workers.values()] == ["slurm"] * 2
        # SYNC: the rung decisions of the sync study, whose worker was a Slurm job too
        sync = open_study(tmp_path / "study" / "profile" / "sync").record
        assert [w.info.get("executor") for w in sync.workers.values()] == ["slurm"]
        assert len(profile.decision) == 2
        assert all(d > 0 for d in profile.decision)
        for size in (1, 2):
            study = open_study(tmp_path / "study" / "profile" / f"size-{size}")
            assert [w.info.get("executor") for w in study.record.workers.values()] == ["slurm"]
            assert study.trials[0].last_metrics["devices"] == size
    finally:
        for size in ("1", "2", "together-2", "sync"):
            subprocess.run(
                ["scancel", "--name", f"hpctune-{study_name}-profile-{size}"],
                capture_output=True,
                timeout=30,
            )
        shutil.rmtree(tmp_path / "study", ignore_errors=True)


def _deadline_study(folder: Path, name: str) -> Path:
    """tests/elastic/test_follow.py's SHA study with a deadline (8 trials, 4 steps, 4 slots),
    its workers Slurm jobs of one fake GPU each."""
    from tests.elastic.test_follow import _study

    slurm = {"partition": "debug", "time": 10, "mem": "1G"}
    return _study(folder, name=name, resources={"gpus_per_worker": 1}, slurm=slurm)


def _ended(study_dir: Path) -> bool:
    """The study ended and its controller journaled every worker's end."""
    try:
        record = open_study(study_dir).record
    except Exception:  # not created yet
        return False
    live = [w for w in record.workers.values() if w.state in ("started", "stopping")]
    return record.state in FINAL and not live


@pytest.mark.slow
def test_a_study_with_a_deadline_sizes_its_worker_jobs_per_rung(
    tmp_path: Path,
    slurm_cluster: SlurmCluster,
    study_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`[resources] deadline` on Slurm: the controller job follows the plan's 4, 2, 1 workers
    (worker jobs of one fake GPU each) over the rungs of SHA; the workers it lets go exit."""
    from tests.elastic.test_follow import PLANNED_WORKERS, _busy_per_stage

    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")  # Slurm is slower than the profile
    spec = _deadline_study(tmp_path, study_name)
    study_dir = tmp_path / "study"
    try:
        result = run_hpctune("launch", str(spec), check=True)
        assert "workers per stage 4, 2, 1" in result.stdout
        assert wait_for(lambda: _ended(study_dir), 240, interval=1.0), "not ended in 240 s"
        record = open_study(study_dir).record
        assert record.state is StudyState.FINISHED
        assert len(record.elastic_plans) == 1
        experiment = ExperimentSpec.from_dict(record.elastic_plans[0]["plan"]["spec"])
        assert _busy_per_stage(record, experiment) == PLANNED_WORKERS
        assert len(record.workers) == 4
        assert all(w.info.get("executor") == "slurm" for w in record.workers.values())
        # the workers the plan let go left when told (their jobs ended by themselves)
        assert [w.state for w in record.workers.values()] == ["exited"] * 4
    finally:
        subprocess.run(
            ["scancel", "--name", f"hpctune-{study_name}"], capture_output=True, timeout=30
        )
        shutil.rmtree(study_dir, ignore_errors=True)


@pytest.mark.slow
def test_resume_deadline_replans_a_slurm_study_and_its_controller_job_follows_it(
    tmp_path: Path,
    slurm_cluster: SlurmCluster,
    study_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`hpctune resume DIR --deadline 1h` on Slurm: the inbox command reaches the controller
    job resume submits, which journals the deadline and the re-plan in one commit and follows
    the new plan with worker jobs to the end."""
    from hpctune.controller.launch import create_study
    from hpctune.elastic.follow import (
        PLAN_REASON_LAUNCH,
        load_study_profile,
        plan_record,
        plan_study,
    )
    from tests.elastic.test_follow import _busy_per_stage

    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")  # no re-plan but the deadline's
    spec = load_spec(_deadline_study(tmp_path, study_name))
    profile = load_study_profile(spec)
    paths = create_study(
        spec, plan_record(plan_study(spec, profile=profile), profile, PLAN_REASON_LAUNCH)
    )
    try:
        result = run_hpctune("resume", str(paths.root), "--deadline", "1h")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "deadline: 8s -> 1h00m00s from the study's start" in result.stdout
        assert wait_for(lambda: _ended(paths.root), 240, interval=1.0), "not ended in 240 s"
        record = open_study(paths.root).record
        assert record.state is StudyState.FINISHED, record.reason
        assert [(c["deadline"], c["source"]) for c in record.deadline_changes] == [
            (3600.0, "--deadline 1h")
        ]
        assert record.spec["resources"]["deadline"] == 3600.0
        plans = record.elastic_plans
        assert [p["reason"] for p in plans] == [
            PLAN_REASON_LAUNCH,
            "deadline changed to 1h00m00s at resume",
        ]
        assert plans[1]["plan"]["deadline_s"] == 3600.0
        workers = [shape[1] for shape in plans[1]["plan"]["plan"]["allocation"]["shapes"]]
        experiment = ExperimentSpec.from_dict(plans[1]["plan"]["spec"])
        busy = _busy_per_stage(record, experiment)
        assert all(b <= w for b, w in zip(busy, workers, strict=True)), (busy, workers)
        assert record.workers
        assert all(w.info.get("executor") == "slurm" for w in record.workers.values())
        assert not list((paths.root / "inbox").glob("*.json"))
    finally:
        subprocess.run(
            ["scancel", "--name", f"hpctune-{study_name}"], capture_output=True, timeout=30
        )
        shutil.rmtree(paths.root, ignore_errors=True)


@pytest.mark.slow
def test_a_resized_trial_goes_on_in_a_whole_node_worker_job(
    tmp_path: Path,
    slurm_cluster: SlurmCluster,
    study_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`[resources] max_devices = 2` with `node_devices = 2` on Slurm: the last rung's trial
    goes on from its checkpoint in a worker job of two fake GPUs that holds its node
    exclusively (all 8 CPUs, sacct), and sees `ctx.devices == 2`; the rungs before run in jobs
    of one GPU and one CPU. The controller runs here, so the node can be given whole."""
    from tests.elastic.test_resize import PLANNED, _study, check_curves

    monkeypatch.setenv("HPCTUNE_REPLAN_DRIFT", "inf")  # Slurm is slower than the profile
    resources = {"gpus_per_worker": 1, "max_devices": 2, "node_devices": 2}
    slurm = {"partition": "debug", "time": 10, "mem": "1G"}
    spec = load_spec(_study(tmp_path, resources, name=study_name, slurm=slurm))
    paths = create_study(spec)
    try:
        state = run_local(
            paths,
            out=io.StringIO(),
            poll_interval=0.5,
            backend=SlurmBackend(),
        )
        assert state is StudyState.FINISHED
        study = open_study(paths.root)
        record = study.record
        assert record.elastic_plan is not None
        assert record.elastic_plan["plan"]["plan"]["allocation"]["shapes"] == PLANNED
        [last] = [s for s in record.segments.values() if s.until_step == 8]
        check_curves(study, last.trial_id)
        cpus = {}
        for worker in record.workers.values():
            assert worker.info.get("executor") == "slurm"
            job = str(worker.info["job_id"])
            out = slurm_cluster.run("sacct", "-j", job, "-X", "-n", "-P", "-o", "AllocCPUS")
            cpus[worker.worker_id] = int(out.split()[0])
        big = record.workers[last.worker_id]
        assert big.devices == 2
        assert cpus[big.worker_id] == 8  # the whole node: --exclusive
        assert {cpus[w] for w in cpus if w != big.worker_id} == {1}
    finally:
        subprocess.run(
            ["scancel", "--name", f"hpctune-{study_name}"], capture_output=True, timeout=30
        )
        shutil.rmtree(
            paths.root if "paths" in locals() else tmp_path / "study", ignore_errors=True
        )
