"""Commands that steer a study through its inbox (the controller carries them out and journals
them): ``stop``, ``retry``, ``add-trials``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hpctune.cli.common import EXIT_OK, study_dir_argument, study_paths
from hpctune.errors import UsageError

if TYPE_CHECKING:
    from hpctune.wire.layout import StudyPaths


@click.command()
@study_dir_argument
@click.option(
    "--trial",
    "trial_id",
    type=int,
    default=None,
    help="Stop (terminate) only this trial; the study goes on.",
)
def stop(study_dir: Path, trial_id: int | None) -> int:
    """Stop a study cooperatively: running trials suspend at their next report.

    The command drops a file in the study's inbox and returns; the controller carries it out.
    Refused (exit 2) when no controller runs or waits in the Slurm queue for the study: there
    is nothing to stop, and the file would stop the next `resume` at once.
    """
    from hpctune.api import open_study
    from hpctune.controller.launch import prepare_study_dir
    from hpctune.wire.inbox import check_command, send_command

    paths = study_paths(study_dir)
    prepare_study_dir(paths)
    _require_controller(paths, "stop")
    if trial_id is None:
        command: dict[str, Any] = {"command": "stop", "reason": "stopped by `hpctune stop`"}
    else:
        command = {"command": "stop_trial", "trial": trial_id}
        problem = check_command(command, open_study(paths.root).record)
        if problem:
            raise UsageError(f"{paths.root}: {problem}")
    path = send_command(paths.inbox, command)
    what = f"trial {trial_id}" if trial_id is not None else "the study"
    click.echo(f"asked the controller to stop {what} ({path})")
    return EXIT_OK


def _require_controller(paths: StudyPaths, what: str) -> None:
    """Refuse a command only a running (or queued) controller can carry out."""
    from hpctune.api import open_study
    from hpctune.plugins import backend, backend_names
    from hpctune.wire.lease import controller_alive

    if controller_alive(paths) is not None:
        return
    if any(backend(name).controller_queued(paths) is not None for name in backend_names()):
        return
    state = open_study(paths.root).record.state
    raise UsageError(
        f"no controller is running on {paths.root} (study {state.value}), so there is "
        f"nothing to {what}; a command left in its inbox would act on the next "
        f"`hpctune resume {paths.root}`"
    )


@click.command()
@study_dir_argument
@click.option(
    "--trial", "trials", type=int, multiple=True, help="A failed trial to retry; repeatable."
)
@click.option("--failed", is_flag=True, help="Retry every failed trial.")
def retry(study_dir: Path, trials: tuple[int, ...], failed: bool) -> int:
    """Queue failed (or ended-early) trials of STUDY_DIR again, from their last good checkpoint.

    The command goes through the study's inbox and is journaled by the controller: a running
    controller picks it up at once; otherwise it is carried out by the next `hpctune resume`
    (also of a finished or failed study). A checkpoint whose file is missing or corrupt is
    skipped: the trial goes on from its previous checkpoint, or from its start.
    """
    from hpctune.api import open_study
    from hpctune.controller.launch import prepare_study_dir
    from hpctune.study.states import TrialStatus
    from hpctune.wire.inbox import check_command, send_command
    from hpctune.wire.lease import controller_alive

    paths = study_paths(study_dir)
    prepare_study_dir(paths)
    record = open_study(paths.root).record
    command: dict[str, Any] = {"command": "retry", "trials": list(trials), "failed": failed}
    problem = check_command(command, record)
    statuses = [t.status for t in record.trials.values()]
    if not problem and not trials and TrialStatus.FAILED not in statuses:
        problem = "no trial has failed"
    if problem:
        raise UsageError(f"{paths.root}: {problem}")
    path = send_command(paths.inbox, command)
    parts = [f"trial {t}" for t in trials] + (["every failed trial"] if failed else [])
    click.echo(f"asked the controller to retry {', '.join(parts)} ({path})")
    if controller_alive(paths) is None:
        click.echo(f"no controller is running: carry it out with `hpctune resume {paths.root}`")
    return EXIT_OK


@click.command("add-trials")
@study_dir_argument
@click.option(
    "--params",
    "params_texts",
    multiple=True,
    required=True,
    help='A configuration as JSON, e.g. \'{"lr": 0.01, "hidden": 64}\' (repeatable).',
)
def add_trials(study_dir: Path, params_texts: tuple[str, ...]) -> int:
    """Enqueue hand-picked configurations into a running or finished study.

    Each --params becomes a new trial, queued before the generator's next ones; parameters left
    out are drawn at random. A running controller picks them up at its next iteration; a
    finished or stopped study runs again with `hpctune resume STUDY_DIR`.
    """
    from hpctune.api import open_study
    from hpctune.controller.launch import prepare_study_dir
    from hpctune.study.space import SearchSpace
    from hpctune.wire.asktell import params_problem
    from hpctune.wire.inbox import send_command
    from hpctune.wire.lease import controller_alive

    paths = study_paths(study_dir)
    prepare_study_dir(paths)
    study = open_study(paths.root)
    space = SearchSpace.from_dict(study.spec["space"])
    configs = []
    for i, text in enumerate(params_texts, 1):
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--params #{i} is not JSON ({exc}): {text}") from None
        problem = params_problem(space, config)
        if problem:
            raise UsageError(f"--params #{i}: {problem}")
        configs.append(config)
    path = send_command(paths.inbox, {"command": "add_trials", "params": configs})
    click.echo(f"asked the controller to add {len(configs)} trial(s) ({path})")
    if controller_alive(paths) is None:
        click.echo(
            f"the study's controller is not running ({study.record.state.value}): "
            f"`hpctune resume {paths.root}` trains them"
        )
    return EXIT_OK


COMMANDS = [stop, retry, add_trials]
