"""Commands that run a study: ``launch``, ``resume``, ``replay``, and ``controller`` (what a
backend's controller job runs)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hpctune.cli.common import (
    EXIT_OK,
    backend_option,
    echo_lines,
    exit_code,
    local_option,
    print_submitted,
    study_dir_argument,
    study_paths,
)
from hpctune.errors import HpctuneError, UsageError

if TYPE_CHECKING:
    from hpctune.backends import Backend
    from hpctune.spec import StudySpec
    from hpctune.wire.layout import StudyPaths

_PARAMS_HELP = "Print each ended trial's parameters too."


@click.command()
@click.argument("study_toml", type=click.Path(dir_okay=False, path_type=Path))
@local_option(
    "Run the controller here, in the foreground, with workers as local "
    "processes (the default when sbatch is not on PATH)."
)
@click.option(
    "--study-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The study directory to create (default: [study].directory of the spec).",
)
@click.option(
    "--dry-run", is_flag=True, help="Validate the spec and print what would run; create nothing."
)
@click.option("--params", "show_params", is_flag=True, help=_PARAMS_HELP)
@click.option(
    "--deadline",
    default=None,
    help="Finish by this long after the start (2h, 1h30m, 90m): sets [resources] deadline; "
    "the controller follows the elastic plan (docs/elastic.md).",
)
@backend_option
def launch(
    study_toml: Path,
    local: bool,
    study_dir: Path | None,
    dry_run: bool,
    show_params: bool,
    deadline: str | None,
    backend_name: str | None,
) -> int:
    """Validate STUDY_TOML, create the study directory and run the study.

    With --local the study runs in the foreground and ends with a table of the trials and the
    best configuration; Ctrl-C stops it cleanly (resume it with `hpctune resume`).
    """
    from hpctune.api import run_here
    from hpctune.backends import choose_backend
    from hpctune.controller.launch import check_entry_point, create_study
    from hpctune.spec import load_spec, with_deadline

    spec = load_spec(study_toml, directory=study_dir)
    if deadline is not None:
        spec = with_deadline(spec, deadline)
    check_entry_point(spec)
    backend, note = choose_backend(backend_name, local=local)
    elastic_plan = None
    if spec.resources.deadline is not None:  # before anything is created: can it be planned?
        elastic_plan = _print_elastic_plan(spec, backend)
    _check_backend(backend, spec, dry_run)
    if dry_run:
        _print_dry_run(spec, backend)
        return EXIT_OK
    if note:
        click.echo(f"{note}: running the study locally (--local)")
    paths = create_study(spec, elastic_plan)  # the controller follows this plan
    if not backend.runs_controller_here:
        try:
            job = backend.submit_controller(paths, spec)
        except BaseException:
            shutil.rmtree(paths.root, ignore_errors=True)  # a failed launch leaves nothing
            raise
        click.echo(f"study directory: {paths.root}")
        print_submitted(paths, job)
        return EXIT_OK
    click.echo(f"study directory: {paths.root}")
    click.echo(f"watch it from another shell with: hpctune status {paths.root} --watch")
    return exit_code(run_here(paths, backend, show_params=show_params))


def _check_backend(backend: Backend, spec: StudySpec, dry_run: bool) -> None:
    """Before anything is created: would the backend take the controller and the workers?"""
    from hpctune.errors import SubmissionError

    try:
        backend.check(spec)
    except SubmissionError as exc:  # the cluster does not answer
        if not dry_run:
            raise
        click.echo(f"note: not checked against the cluster: {exc}")


def _print_elastic_plan(spec: StudySpec, backend: Backend) -> dict[str, Any]:
    """Plan a study with a deadline (refusing one that cannot be); print it and return the
    data of its ``elastic_plan`` record, which the study is created with."""
    from hpctune.elastic.follow import (
        PLAN_REASON_LAUNCH,
        load_study_profile,
        plan_record,
        plan_study,
        shapes_text,
    )
    from hpctune.study.formatting import format_duration

    profile = load_study_profile(spec)
    result = plan_study(spec, profile=profile, billing=backend.billing_weight)
    meets = "meets the deadline" if result.feasible else "NO plan is predicted to meet it"
    click.echo(
        f"elastic plan ({result.plan.kind}): {shapes_text(result)}; predicted "
        f"{format_duration(result.plan.prediction.time.mean)} for a deadline of "
        f"{format_duration(result.deadline)} ({meets}), "
        f"{result.cost.format(result.plan.prediction.cost.mean)}"
    )
    return plan_record(result, profile, PLAN_REASON_LAUNCH)


def _print_dry_run(spec: StudySpec, backend: Backend) -> None:
    """``launch --dry-run``: the spec, its first configurations and the backend's jobs."""
    from hpctune.spec.proposals import first_configs, study_generator
    from hpctune.study.formatting import format_params

    generator = study_generator(spec)
    click.echo(f"spec {spec.source} is valid")
    click.echo(f"study directory: {spec.directory}")
    click.echo(f"entry point: {spec.entry.describe()}")
    click.echo(
        f"metric: {spec.metric} ({spec.mode}), max_steps {spec.max_steps}, "
        f"{spec.num_trials} trials, generator {spec.generator.name}, "
        f"policy {spec.policy.name}, {spec.resources.slots} slots"
    )
    first = first_configs(spec, min(spec.num_trials, 5), generator)
    if not generator.predictable:
        click.echo(f"first proposals of {spec.generator.name} (no results yet; later ones learn):")
    for index, params in enumerate(first):
        click.echo(f"  trial {index}: {format_params(params)}")
    if spec.num_trials > 5:
        click.echo(f"  ... {spec.num_trials - 5} more")
    echo_lines(backend.describe(spec))


@click.command()
@study_dir_argument
@local_option("Run the controller here with local workers (the default without sbatch).")
@click.option(
    "--force",
    is_flag=True,
    help="Take over even if another controller seems alive: it is fenced (it stops at its "
    "next commit without committing).",
)
@click.option("--params", "show_params", is_flag=True, help=_PARAMS_HELP)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="Change a setting of a backend's section (slurm.partition=gpu, "
    "slurm.controller.time=12:00:00); repeatable.",
)
@click.option(
    "--slurm",
    "slurm_settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change a [slurm] setting (controller.KEY for [slurm.controller]); the same as "
    "--set slurm.KEY=VALUE.",
)
@click.option(
    "--spec",
    "spec_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Take the backends' sections ([slurm] and [slurm.controller]) from this study.toml "
    "(nothing else).",
)
@click.option(
    "--deadline",
    default=None,
    metavar="DURATION",
    help="Set or change the deadline (3h, 1h30m, 90m), counted from the study's start, not "
    "from now: the controller re-plans the stages not yet finished to it (journaled; "
    "policies sha, hyperband and asha; docs/elastic.md).",
)
@backend_option
def resume(
    study_dir: Path,
    local: bool,
    force: bool,
    show_params: bool,
    settings: tuple[str, ...],
    slurm_settings: tuple[str, ...],
    spec_file: Path | None,
    deadline: str | None,
    backend_name: str | None,
) -> int:
    """Carry on a stopped, interrupted or killed study from its journal.

    Trials lost with their workers restart from their last checkpoint; live workers of a killed
    controller are adopted. Refused while another controller holds the study's lease (the
    message names it); --force takes the study over from it. --set and --spec change the
    settings of the study's backend ([slurm], journaled); --deadline sets its deadline
    (journaled, with the new elastic plan); its search space and policy stay as they are.
    """
    from hpctune.api import open_study, run_here
    from hpctune.backends import choose_backend
    from hpctune.controller.launch import prepare_study_dir
    from hpctune.spec import StudySpec, load_spec
    from hpctune.wire.inbox import send_command

    paths = study_paths(study_dir)
    prepare_study_dir(paths)
    study = open_study(paths.root)
    spec = StudySpec.from_dict(study.spec)
    backend, _ = choose_backend(backend_name, local=local)
    commands = [] if deadline is None else _changed_deadline(spec, study.record, deadline, backend)
    other = None if spec_file is None else load_spec(spec_file, directory=paths.root)
    assignments = [*settings, *(f"slurm.{text}" for text in slurm_settings)]
    spec, changes = _changed_settings(spec, assignments, other)
    commands[:0] = changes
    if backend.runs_controller_here:
        for command in commands:
            send_command(paths.inbox, command)
        click.echo(f"resuming {paths.root}")
        return exit_code(run_here(paths, backend, force=force, show_params=show_params))
    source = (spec_file or Path("--set")) if changes else None
    backend.check(spec, source)  # before fencing: a rejected change leaves the study as it was
    _take_over(paths, backend, force)
    sent = [send_command(paths.inbox, c) for c in commands]  # the controller journals them
    try:
        job = backend.submit_controller(paths, spec)
    except HpctuneError:
        for inbox in sent:
            inbox.unlink(missing_ok=True)
        raise
    print_submitted(paths, job)
    return EXIT_OK


def _changed_settings(
    spec: StudySpec, assignments: list[str], other: StudySpec | None
) -> tuple[StudySpec, list[dict[str, Any]]]:
    """``resume --set SECTION.KEY=VALUE`` and ``--spec FILE``: the spec with the backends'
    sections changed, and the inbox commands that carry them to the controller."""
    from hpctune.plugins import backend_sections

    owners = backend_sections()
    by_section: dict[str, list[str]] = {}
    for text in assignments:
        section, dot, rest = text.partition(".")
        if not dot or section not in owners:
            known = ", ".join(owners) or "none"
            raise UsageError(
                f"--set {text}: give SECTION.KEY=VALUE, SECTION being a backend's section "
                f"({known}), e.g. --set slurm.partition=gpu"
            )
        by_section.setdefault(section, []).append(rest)
    sections = set(by_section)
    if other is not None:
        sections |= set(other.backend_options) | set(spec.backend_options)
    commands = []
    for section in sorted(sections & set(owners)):
        changed = owners[section].change_settings(spec, by_section.get(section, []), other)
        if changed is None:
            continue
        spec, command, lines = changed
        echo_lines(lines)
        if command is not None:
            commands.append(command)
    return spec, commands


def _take_over(paths: StudyPaths, backend: Backend, force: bool) -> None:
    """Fence the study's controllers (``--force``), or refuse while one runs or is queued."""
    from hpctune.controller.launch import ensure_no_controller
    from hpctune.wire.lease import fence

    if force:
        epoch = fence(paths.root)
        click.echo(f"fenced the study's controllers (epoch {epoch}); submitting a new one")
        return
    ensure_no_controller(paths)
    queued = backend.controller_queued(paths)
    if queued is not None:
        raise UsageError(
            f"the controller job {queued} of {paths.root} is still queued or "
            f"running; cancel it first (`scancel {queued}` on Slurm), or use --force"
        )


def _changed_deadline(
    spec: StudySpec, record: Any, text: str, backend: Backend
) -> list[dict[str, Any]]:
    """The inbox command of ``resume --deadline text`` (none when the deadline stays)."""
    from hpctune.elastic.deadline import change_deadline

    change = change_deadline(spec, record, text, backend.billing_weight)
    click.echo(change.message)
    return [] if change.command is None else [change.command]


@click.command(hidden=True)
@study_dir_argument
@click.option("--backend", "backend_name", default="slurm", show_default=True)
def controller(study_dir: Path, backend_name: str) -> int:
    """Run the controller inside its batch job (what the backend's job script runs)."""
    from hpctune.plugins import backend

    return exit_code(backend(backend_name).run_controller(study_paths(study_dir)))


@click.command()
@study_dir_argument
@click.option(
    "--trial",
    "trials",
    type=int,
    multiple=True,
    required=True,
    help="A trial to replay (repeat for a subset replay).",
)
@click.option(
    "--study-dir",
    "out",
    type=click.Path(path_type=Path),
    default=None,
    help="The new study's directory (default: next to STUDY_DIR).",
)
@local_option("Run it here (the default without sbatch).")
@backend_option
def replay(
    study_dir: Path,
    trials: tuple[int, ...],
    out: Path | None,
    local: bool,
    backend_name: str | None,
) -> int:
    """Re-run the training of TRIAL of STUDY_DIR as a new study: its lineage to the roots in
    topological order, with the recorded hyperparameters, seeds and warm starts."""
    from hpctune.api import open_study, replay_study, run_here
    from hpctune.backends import choose_backend
    from hpctune.spec import StudySpec

    paths, plan = replay_study(study_paths(study_dir).root, list(trials), out)
    chain = " -> ".join(str(entry["trial"]) for entry in plan)
    click.echo(f"replay of {len(plan)} trials (topological order: {chain})")
    click.echo(f"study directory: {paths.root}")
    backend, _ = choose_backend(backend_name, local=local)
    if not backend.runs_controller_here:
        spec = StudySpec.from_dict(open_study(paths.root).spec)
        print_submitted(paths, backend.submit_controller(paths, spec))
        return EXIT_OK
    return exit_code(run_here(paths, backend))


COMMANDS = [launch, resume, replay, controller]
