"""Private study directories (issue 13): modes whatever the umask, refusing what other accounts
could change, workers running only what the journal says, checkpoints loaded weights-only."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.controller.launch import create_study
from hpctune.errors import CheckpointError
from hpctune.spec import load_spec
from hpctune.study.states import StudyState, TrialStatus
from hpctune.wire.eventlog import EventWriter
from hpctune.wire.protocol import Assignment
from hpctune.worker.context import TrialContext
from tests.conftest import WORKLOADS, hpctune_env, run_hpctune, write_study

BEHAVIOURS = WORKLOADS / "behaviours.py"
NOBODY = 65534


def _spec(folder: Path, **study: object) -> Path:
    return write_study(
        folder,
        train=BEHAVIOURS,
        num_trials=2,
        max_steps=3,
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        resources={"slots": 1},
        directory=str(folder / "study"),
        **study,
    )


def _run_worker(study: Path, worker_id: str) -> subprocess.CompletedProcess[str]:
    """Run a worker process of ``study`` to its end (as the executors start one)."""
    return subprocess.run(
        [sys.executable, "-m", "hpctune.worker.loop", str(study), worker_id],
        capture_output=True,
        text=True,
        env=hpctune_env(),
        timeout=120,
    )


def _modes(root: Path) -> dict[Path, int]:
    """The permission bits of the study directory and of everything in it (links skipped)."""
    found = {root: stat.S_IMODE(root.lstat().st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()
            if not stat.S_ISLNK(info.st_mode):
                found[path] = stat.S_IMODE(info.st_mode)
    return found


@pytest.mark.parametrize(("share", "forbidden"), [(False, 0o077), (True, 0o027)])
def test_everything_is_private_under_umask_000(
    tmp_path: Path, share: bool, forbidden: int
) -> None:
    spec = _spec(tmp_path, **({"share_with_group": True} if share else {}))
    result = subprocess.run(
        [sys.executable, "-m", "hpctune.cli", "launch", str(spec), "--local"],
        capture_output=True,
        text=True,
        env=hpctune_env(),
        preexec_fn=lambda: os.umask(0),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    modes = _modes(tmp_path / "study")
    assert len(modes) > 40  # journal chunks, events, checkpoints, logs, heartbeats ...
    leaks = {str(p): f"{m:04o}" for p, m in modes.items() if m & forbidden}
    assert not leaks, leaks
    assert modes[tmp_path / "study"] == (0o750 if share else 0o700)


def test_a_study_others_can_change_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = create_study(load_spec(_spec(tmp_path))).root
    study.chmod(0o775)
    for args in (["resume", str(study), "--local"], ["stop", str(study)]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"the study directory {study} is writable by group" in err
        assert f"chmod -R go-w {study}" in err
    worker = _run_worker(study, "w0000")
    assert worker.returncode == 2
    assert "writable by group" in worker.stderr
    assert open_study(study).record.controller_starts == 0  # nothing ran


def test_a_study_of_another_user_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = create_study(load_spec(_spec(tmp_path))).root
    for path in [study, *study.rglob("*")]:
        os.lchown(path, NOBODY, NOBODY)
    for args in (["resume", str(study), "--local"], ["stop", str(study)]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"the study directory {study} is owned by nobody (uid {NOBODY})" in err
    assert not list((study / "inbox").iterdir())  # no command was left for its owner


def test_a_training_file_others_can_write_is_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(tmp_path)
    train = tmp_path / "train.py"
    train.chmod(0o666)
    assert main(["launch", str(spec), "--dry-run"]) == 2
    assert f"the training file {train} is writable by group and others" in capsys.readouterr().err
    train.chmod(0o644)
    study = create_study(load_spec(spec)).root
    train.chmod(0o646)  # made writable after the launch: the workers refuse to import it
    result = run_hpctune("resume", str(study), "--local")
    record = open_study(study).record
    assert [t.status for t in record.trials.values()] == [TrialStatus.FAILED] * 2, result.stdout
    assert all("writable by others" in t.reason for t in record.trials.values())


ROGUE = """
from pathlib import Path
def train(ctx):
    Path({marker!r}).write_text("ran as the study's owner")
"""


def test_a_forged_assignment_is_not_executed(tmp_path: Path) -> None:
    study = Path(tmp_path / "study")
    run_hpctune("launch", str(_spec(tmp_path)), "--local", check=True)
    marker = tmp_path / "owned"
    rogue = tmp_path / "rogue.py"
    rogue.write_text(ROGUE.format(marker=str(marker)))
    record = open_study(study).record
    segment = record.segments[0]
    genuine = Assignment(
        segment_id=0,
        trial_id=segment.trial_id,
        params=record.trials[segment.trial_id].params,
        seed=0,
        start_step=segment.start_step,
        until_step=segment.until_step,
        max_steps=3,
        boundary=1,
        metric="score",
        mode="max",
        entry={"file": str(rogue), "module": None, "function": "train"},
        checkpoint="../../rogue.pt",
        checkpoint_sha256="0" * 64,
    )
    # a segment the controller never assigned, written into a worker's file: not run
    forged = {**genuine.to_dict(), "segment_id": len(record.segments), "epoch": 9, "written": 0}
    path = study / "workers" / "w0000" / "assignment.json"
    path.write_text(json.dumps(forged))
    worker = _run_worker(study, "w0000")
    assert worker.returncode == 0, worker.stderr
    assert not marker.exists()
    log = (study / "logs" / "workers" / "w0000.log").read_text()
    assert f"segment {forged['segment_id']} is not in the journal" in log
    assert open_study(study).record.state is StudyState.FINISHED

    # a real segment with its entry point and checkpoint replaced: the journal's are run
    from hpctune.worker.assignments import AssignmentRefused, trusted_assignment

    trusted = trusted_assignment(study, genuine, "w0000")
    assert trusted is not None
    assert trusted.entry == record.spec["entry"]
    assert trusted.checkpoint is None
    assert trusted.checkpoint_sha256 is None
    with pytest.raises(AssignmentRefused, match="params"):
        trusted_assignment(study, dataclasses.replace(genuine, params={"x": 5.0}), "w0000")


class _Payload:
    """Unpickling this runs code (it writes a file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('unpickled')",))


def test_checkpoints_load_weights_only(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    path = tmp_path / "checkpoints" / "ck.pt"
    path.parent.mkdir()
    torch.save({"model": torch.ones(2), "extra": _Payload(marker)}, path)
    from hpctune.files import sha256_file

    assignment = Assignment(
        segment_id=1,
        trial_id=0,
        params={},
        seed=0,
        start_step=1,
        until_step=2,
        max_steps=2,
        boundary=1,
        metric="m",
        mode="max",
        entry={},
        checkpoint="checkpoints/ck.pt",
        checkpoint_sha256=sha256_file(path),
    )
    with EventWriter(tmp_path / "events.jsonl") as events:
        ctx = TrialContext(
            assignment,
            study_dir=tmp_path,
            events=events,
            checkpoint_path=lambda step: tmp_path / f"{step}.pt",
            decision_file=tmp_path / "decision.json",
        )
        with pytest.raises(CheckpointError, match="weights_only=False"):
            ctx.load_checkpoint()
        assert not marker.exists()
        state = ctx.load_checkpoint(weights_only=False)  # the documented opt-out
        assert marker.exists()
        assert torch.equal(state["model"], torch.ones(2))
