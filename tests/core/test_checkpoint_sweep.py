"""A starting controller deletes the checkpoint files of ended trials that the journal does not
hold (a controller killed between a commit and its deletions leaves them), and no other file."""

from __future__ import annotations

from pathlib import Path

from hpctune.api import open_study
from hpctune.backends.local import local_executor
from hpctune.controller import Controller
from hpctune.study.states import StudyState
from hpctune.wire.layout import StudyPaths
from tests.conftest import run_hpctune, write_study

TRAIN = """
def train(ctx):
    for step in range(ctx.start_step + 1, ctx.max_steps + 1):
        ctx.report(step=step, score=step * ctx.params["x"])
        ctx.save_checkpoint({"step": step})
"""


def test_a_starting_controller_sweeps_ended_trials_checkpoint_folders(tmp_path: Path) -> None:
    spec = write_study(tmp_path, train=TRAIN, space={"x": [1.0, 2.0]}, max_steps=3, num_trials=2)
    run_hpctune("launch", str(spec), "--local", check=True)
    paths = StudyPaths.of(tmp_path / "study")
    kept = sorted(paths.checkpoints.rglob("*.pt"))
    assert kept  # the latest (and best) checkpoints stay
    assert paths.checkpoint_trials() == [0, 1]
    stray = paths.trial_checkpoints(1) / "step-00000002-segment-000009.pt"
    stray.write_bytes(b"left by a killed controller")
    (paths.checkpoints / "notes").mkdir()  # not a trial's folder: left alone
    assert paths.checkpoint_trials() == [0, 1]

    controller = Controller(paths.root, lambda s: local_executor(paths, s))
    try:
        controller.start()
        for _ in range(50):
            if controller.step():
                break
    finally:
        controller.core.executor.close()
    assert not stray.exists()
    assert sorted(paths.checkpoints.rglob("*.pt")) == kept
    assert (paths.checkpoints / "notes").is_dir()
    assert open_study(paths.root).record.state is StudyState.FINISHED
