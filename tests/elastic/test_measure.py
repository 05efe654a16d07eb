"""`hpctune profile STUDY_TOML`: short studies per size measure the profile (real workers, torch).

No speed is asserted (the machine is shared): the profile must have samples at every size,
positive step times, workers that were told their size (``ctx.devices``), SYNC from a short
study's rung decisions (unless ``--decision`` is given), a file in the study directory that
``plan-elastic`` takes, and bad input must be refused with the fix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.backends.local import local_executor
from hpctune.cli import main
from hpctune.elastic import Profile
from hpctune.elastic.experiment import PlanningError, Stage, experiment_from_study
from hpctune.elastic.measured import study_decisions
from hpctune.profiler.measure import SizeRun, parse_sizes, size_spec, sync_spec, together_fields
from hpctune.spec import StudySpec, load_spec
from hpctune.wire.layout import StudyPaths
from hpctune.worker.context import devices_from_environment
from tests.conftest import REPO, run_hpctune, write_study

EXAMPLE = REPO / "jobs" / "digits-elastic"

# A small real workload: torch threads from ctx.devices, a checkpoint per step.
TRAIN = """
import torch

def train(ctx):
    torch.set_num_threads(ctx.devices)
    weights = torch.zeros(64)
    state = ctx.load_checkpoint()
    if state is not None:
        weights = state["w"]
    for step in range(ctx.start_step, ctx.max_steps):
        weights = weights + torch.randn(64, generator=torch.Generator().manual_seed(step))
        ctx.report(step=step + 1, score=float(weights.mean()), devices=ctx.devices,
                   threads=torch.get_num_threads())
        ctx.save_checkpoint({"w": weights})
"""


def _example(tmp_path: Path) -> Path:
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder)
    return folder / "study.toml"


@pytest.mark.slow
def test_the_example_is_profiled_at_each_size_and_planned(
    tmp_path: Path, cleanup_studies: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """jobs/digits-elastic at 1 and 2 CPUs: each short study's worker had that many devices
    and threads, every size has positive step samples, SCALE per size, INIT, checkpoint save
    and load, SYNC from the sha study's two rung decisions; the profile lands in the study
    directory, where plan-elastic finds it."""
    spec = _example(tmp_path)
    study_dir = spec.parent / "runs" / "digits-elastic"
    cleanup_studies += [study_dir / "profile" / f"size-{g}" for g in (1, 2)]
    cleanup_studies += [study_dir / "profile" / "together-2", study_dir / "profile" / "sync"]
    # OpenMP threads that wait asleep, not spinning: on a busy machine the two threads of size
    # 2 otherwise spin through several CPU-seconds per step (no speed is asserted)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    result = run_hpctune("profile", str(spec), "--sizes", "2,1", "--steps", "2", "--local")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 cpus/trial" in result.stdout
    assert "2 cpus/trial" in result.stdout
    assert "then 2 workers at once, then rung decisions (SYNC)" in result.stdout
    assert "over 2 rung decision(s) of the sha policy" in result.stdout

    profile = Profile.load(study_dir / "profile.json")
    assert profile.sizes == (1, 2)
    assert profile.device == "cpu"
    for size in (1, 2):
        assert len(profile.step_seconds[size]) == 6  # three trials of two steps, one worker
        assert all(s > 0 for s in profile.step_seconds[size])
        short = open_study(study_dir / "profile" / f"size-{size}")
        trials = short.trials
        assert [t.status.value for t in trials] == ["completed"] * 3
        assert [t.step for t in trials] == [2, 2, 2]
        assert len({seg.worker_id for seg in short.record.segments.values()}) == 1
        assert trials[0].last_metrics["devices"] == size
    # size 1's worker, the two together and the sync study's
    assert len(profile.queue_wait[1]) == 1 + 2 + 1
    assert len(profile.queue_wait[2]) == 1
    assert all(v >= 0 for v in profile.queue_wait[1])
    assert len(profile.startup) == 2 + 1  # one worker per size, the sync study's alone
    assert all(s >= 0 for s in profile.startup)
    # set-up times are medians over every size's segments: one sample each
    assert len(profile.segment_gap) == 1
    assert profile.segment_gap[0] > 0
    assert len(profile.warmup) == 1
    assert len(profile.segment_start) == 1
    together = open_study(study_dir / "profile" / "together-2").record
    assert len(together.workers) == 2
    assert sorted(profile.startup_together) == [2]
    assert len(profile.startup_together[2]) == 2
    assert len(profile.warmup_together[2]) == 2
    # its two trials' steps over the mean step alone, or 1 when they were faster
    assert len(profile.crowding[2]) in (1, 4)
    assert sum(profile.crowding[2]) >= len(profile.crowding[2])
    assert len(profile.checkpoint_save) == 2 * 3 * 2 + 2 * 2
    assert all(s > 0 for s in profile.checkpoint_save)
    assert profile.checkpoint_load
    assert all(s > 0 for s in profile.checkpoint_load)
    assert min(profile.segment_start) >= min(profile.checkpoint_load)
    # SYNC: the sync study's two brackets of two trials on one worker of the smallest size,
    # one rung decided in each (its end to the promoted trial's next segment's start)
    sync = open_study(study_dir / "profile" / "sync")
    assert [t.status.value for t in sync.trials].count("terminated") == 2  # dropped at step 1
    assert sorted(t.step for t in sync.trials) == [1, 1, 2, 2]
    assert {seg.worker_id for seg in sync.record.segments.values()} == {"w0000"}
    assert sync.trials[0].last_metrics["devices"] == 1
    stages = experiment_from_study(StudySpec.from_dict(sync.record.spec))
    assert profile.decision == study_decisions(sync.record, stages)
    assert len(profile.decision) == 2
    assert all(s > 0 for s in profile.decision)

    plan = run_hpctune("plan-elastic", str(spec), "--deadline", "1h", "--json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    data = json.loads(plan.stdout)
    assert data["feasible"] is True
    assert "hpctune profile" in data["profile_source"]


@pytest.mark.slow
def test_a_profiled_directory_is_launched_around_its_profile(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    """Sizes 1 and 3, --speedup for 6, --out elsewhere and then the default place; the study
    is launched into the directory that holds only the profile and keeps it; the worker's
    torch used ctx.devices threads."""
    spec = write_study(
        tmp_path, train=TRAIN, space={"x": [1, 2]}, max_steps=3, num_trials=2, directory="study"
    )
    study_dir = tmp_path / "study"
    cleanup_studies += [study_dir / "profile" / f"size-{g}" for g in (1, 3)] + [study_dir]
    cleanup_studies.append(study_dir / "profile" / "sync")
    elsewhere = tmp_path / "p.json"
    args = ["profile", str(spec), "--sizes", "1,3", "--steps", "2", "--local"]
    result = run_hpctune(*args, "--speedup", "6=1.5", "--out", str(elsewhere), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    printed = json.loads(result.stdout)
    assert printed == json.loads(elsewhere.read_text())
    assert sorted(printed["step_seconds"]) == ["1", "3", "6"]
    assert not (study_dir / "profile.json").exists()
    trial = open_study(study_dir / "profile" / "size-3").trials[0]
    assert trial.last_metrics["devices"] == 3
    assert trial.last_metrics["threads"] == 3

    assert sorted(printed["startup_together"]) == ["2"]  # slots = 2: two workers at once
    assert len(printed["decision"]) == 2  # the sync study's two rung decisions
    assert all(s > 0 for s in printed["decision"])
    shutil.rmtree(study_dir / "profile" / "sync")
    # to the default place; --decision given: no sync study, its value kept
    again = run_hpctune(*args[:3], "1", *args[4:], "--together", "0", "--decision", "2.5")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "SYNC 2.5 s: given with --decision, not measured" in again.stdout
    assert "rung decisions" not in again.stdout
    assert not (study_dir / "profile" / "sync").exists()
    assert Profile.load(study_dir).sizes == (1,)
    assert Profile.load(study_dir).startup_together == {}  # --together 0: not measured
    assert Profile.load(study_dir).decision == (2.5,)

    launched = run_hpctune("launch", str(spec), "--local")
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert (study_dir / "profile.json").is_file()
    assert (study_dir / "profile" / "size-3").is_dir()
    study = open_study(study_dir)
    assert [t.status.value for t in study.trials] == ["completed", "completed"]
    assert {t.last_metrics["devices"] for t in study.trials} == {1}  # cpus_per_worker = 1
    # one short study is enough here: one step, no workers together, SYNC given
    again = run_hpctune(
        "profile",
        str(spec),
        "--sizes",
        "3",
        "--steps",
        "1",
        "--together",
        "0",
        "--local",
        "--decision",
        "0",
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert Profile.load(study_dir).sizes == (3,)  # a launched study directory takes one too


def test_a_failing_training_function_names_its_error_and_log(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    spec = write_study(
        tmp_path,
        train="def train(ctx):\n    raise ValueError('no data at ' + str(ctx.devices))\n",
        space={"x": [1]},
    )
    cleanup_studies.append(tmp_path / "study" / "profile" / "size-2")
    result = run_hpctune("profile", str(spec), "--sizes", "2", "--steps", "1", "--local")
    assert result.returncode == 1
    assert "did not finish" in result.stderr
    assert "ValueError: no data at 2" in result.stderr
    assert "trial-000000.err" in result.stderr or "trial-000001.err" in result.stderr
    assert not (tmp_path / "study" / "profile.json").exists()


def test_a_training_function_that_cannot_resume_fails_the_sync_study(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    """The size studies never resume a trial; the sync study's promoted trials do: a training
    function that fails then fails the profile, naming the sync study, the error, its log and
    --decision."""
    train = TRAIN.replace(
        "    state = ctx.load_checkpoint()\n",
        "    if ctx.start_step:\n        raise RuntimeError('cannot resume')\n"
        "    state = ctx.load_checkpoint()\n",
    )
    spec = write_study(tmp_path, train=train, space={"x": [1, 2]}, max_steps=3)
    cleanup_studies += [tmp_path / "study" / "profile" / d for d in ("size-1", "sync")]
    args = ("--sizes", "1", "--steps", "1", "--together", "0", "--local")
    result = run_hpctune("profile", str(spec), *args)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the short study of rung decisions (SYNC" in result.stderr
    assert "RuntimeError: cannot resume" in result.stderr
    assert ".err" in result.stderr
    assert "--decision SECONDS" in result.stderr
    assert not (tmp_path / "study" / "profile.json").exists()


def test_the_sync_study_has_two_rung_decisions_at_the_smallest_size(tmp_path: Path) -> None:
    spec = load_spec(write_study(tmp_path, train=TRAIN, space={"x": [1]}, max_steps=5))
    short = sync_spec(spec, 2)
    assert short is not None
    assert short.directory == tmp_path / "study" / "profile" / "sync"
    assert (short.num_trials, short.max_steps, short.boundary) == (4, 2, 1)
    assert (short.resources.slots, short.resources.cpus_per_worker) == (1, 2)
    assert (short.fail_fast, short.max_retries) == (True, 0)
    assert experiment_from_study(short).stages == (
        Stage(2, 0, 1, 0),
        Stage(1, 1, 2, 0),
        Stage(2, 0, 1, 1),
        Stage(1, 1, 2, 1),
    )
    one = load_spec(write_study(tmp_path, train=TRAIN, space={"x": [1]}, max_steps=1))
    assert sync_spec(one, 1) is None  # no rung to decide
    # a grid of three: three trials (a fourth would ask the generator for too many)
    grid = write_study(
        tmp_path, train=TRAIN, space={"x": [1, 2, 3]}, generator={"name": "grid"}, num_trials=3
    )
    short = sync_spec(load_spec(grid), 1)
    assert short is not None
    assert short.num_trials == 3
    assert experiment_from_study(short).stages[2:] == (Stage(1, 0, 1, 1), Stage(1, 1, 2, 1))
    pair = write_study(
        tmp_path, train=TRAIN, space={"x": [1, 2]}, generator={"name": "grid"}, num_trials=2
    )
    assert size_spec(load_spec(pair), 1, 2).num_trials == 2  # not three


def test_bad_input_names_the_field_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every refusal comes before a short study runs, so the CLI runs in this process (one
    ``python -m hpctune.cli`` start-up checks the same exit code and message from outside)."""
    spec = write_study(tmp_path, train=TRAIN, space={"x": [1]})
    cases = {
        ("--sizes", "1,0"): "--sizes",
        ("--sizes", "two"): "e.g. --sizes 1,2,4",
        ("--steps", "0"): "whole number >= 1",
        ("--steps", "1=trace.h5"): "DEVICES=SOURCE step times go without STUDY_TOML",
        ("--startup", "3"): "--startup: measured by",
        ("--sizes", "2", "--speedup", "4=3"): "a 1 in --sizes",
        ("--together", "1"): "--together '1': counts of workers at once are >= 2",
        ("--together", "2,x"): "e.g. --together 1,2,4",
    }
    for args, text in cases.items():
        assert main(["profile", str(spec), "--local", *args]) == 2, args
        err = capsys.readouterr().err
        assert text in err, (args, err)
    bad = tmp_path / "bad.toml"
    bad.write_text(spec.read_text().replace("max_steps = 5", "max_steps = 0"))
    assert main(["profile", str(bad), "--local"]) == 2
    assert "max_steps" in capsys.readouterr().err
    missing = run_hpctune("profile", str(tmp_path / "none.toml"), "--local")
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
    for args in (("--sizes", "1,2"), ("--together", "2")):
        assert main(["profile", *args]) == 2
        assert f"{args[0]} needs a STUDY_TOML" in capsys.readouterr().err
    assert not (tmp_path / "study").exists()


def test_together_fields_by_hand(tmp_path: Path) -> None:
    def run(steps: tuple[float, ...], **fields: tuple[float, ...]) -> SizeRun:
        base = dict.fromkeys(
            ("segment_start", "checkpoint_save", "checkpoint_load", "queue_wait", "startup"), ()
        )
        return SizeRun(devices=1, directory=tmp_path, steps=steps, **{**base, **fields})  # type: ignore[arg-type]

    alone = run((1.0, 1.0, 1.0), segment_start=(0.1, 0.2, 0.9))
    crowd = run((1.5, 2.5), startup=(3.0, 4.0), first_start=(1.2, 0.7))
    assert together_fields(crowd, alone, 2) == {
        "startup_together": {2: (3.0, 4.0)},
        "warmup_together": {2: pytest.approx((1.0, 0.5))},  # less the median start alone
        "crowding": {2: (1.5, 2.5)},
    }
    faster = run((0.5, 0.7))  # the node was busier while the worker ran alone
    assert together_fields(faster, alone, 3) == {
        "startup_together": {},
        "warmup_together": {},
        "crowding": {3: (1.0,)},
    }


def test_sizes_and_the_devices_variable(tmp_path: Path) -> None:
    assert parse_sizes("4, 1,2,2") == (1, 2, 4)
    for text in ("", "1,-2", "1.5", "2000"):
        with pytest.raises(PlanningError, match="--sizes"):
            parse_sizes(text)
    assert devices_from_environment({"HPCTUNE_DEVICES": "4"}) == 4
    assert devices_from_environment({"HPCTUNE_DEVICES": "0"}) == 1
    assert devices_from_environment({"HPCTUNE_DEVICES": "x"}) == 1
    assert devices_from_environment({}) == 1
    for resources, devices in (({"cpus_per_worker": 4, "gpus_per_worker": 2}, 2), ({}, 1)):
        spec = load_spec(
            write_study(
                tmp_path, train=TRAIN, space={"x": [1]}, resources={"slots": 1, **resources}
            )
        )
        assert local_executor(StudyPaths.of(tmp_path / "study"), spec).devices == devices
