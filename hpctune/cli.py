"""The ``hpctune`` command line: thin click commands that parse, call the library and print.

Exit codes: 0 success, 2 bad input (a malformed study.toml, a missing study, a busy one),
1 a failure at run time (the study failed, workers could not start).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from hpctune.curves.registry import check_curve_model
from hpctune.errors import AccessError, HpctuneError, Interrupted, UsageError
from hpctune.study.states import StudyState, TrialStatus
from hpctune.wire.layout import StudyPaths

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2
STATUS_ROWS = 50  # trials `hpctune status` lists by default (the last ones; --all for every one)


def _study_paths(directory: str) -> StudyPaths:
    paths = StudyPaths.of(directory)
    try:
        os.listdir(paths.root)
    except PermissionError as exc:
        raise AccessError(
            paths.root,
            f"{paths.root} cannot be read: {exc.strerror}; it belongs to "
            f"{_owner(paths.root)}, who must share it (`[study] share_with_group = true`) or "
            "give you a copy",
        ) from exc
    except OSError:
        pass  # missing: said below
    if not paths.journal.exists():
        raise UsageError(
            f"{paths.root} is not a study directory (no journal.zarr in it); give the directory "
            "that `hpctune launch` printed"
        )
    return paths


def _owner(path: Path) -> str:
    from hpctune.wire.permissions import user_name

    try:
        return user_name(path.stat().st_uid)
    except OSError:
        return "another user"


def _plot_option(help_text: str) -> Callable[[Any], Any]:
    """The ``--plot OUT.png`` option (drawn with matplotlib; exit 2 without it)."""
    return click.option(
        "--plot",
        "plot_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=help_text,
    )


def _backend_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--backend NAME`` option: where the workers run (a registered backend or an
    importable MODULE:CLASS; default: Slurm where sbatch is on PATH, else local processes)."""
    return click.option(
        "--backend",
        "backend_name",
        default=None,
        metavar="NAME",
        help="Run on this backend (slurm, local, or another package's; default: slurm when "
        "sbatch is on PATH, else local).",
    )(command)


def _exit_code(state: StudyState) -> int:
    return EXIT_FAILURE if state is StudyState.FAILED else EXIT_OK


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Print tracebacks of errors.")
@click.option(
    "--log-level",
    default=None,
    metavar="LEVEL",
    help="Log level of the controller and workers (also HPCTUNE_LOG_LEVEL).",
)
@click.version_option(package_name="hpctune")
@click.pass_context
def cli(ctx: click.Context, debug: bool, log_level: str | None) -> None:
    """Tune hyperparameters on a Slurm cluster (or this machine), coordinated through files.

    \b
    Start:   hpctune launch study.toml --local
    Watch:   hpctune status <study-dir>
    Stop:    hpctune stop <study-dir>      then  hpctune resume <study-dir> --local
    """
    ctx.obj = {"debug": debug}
    if log_level:
        os.environ["HPCTUNE_LOG_LEVEL"] = log_level.upper()


@cli.command()
@click.argument("study_toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--local",
    is_flag=True,
    help="Run the controller here, in the foreground, with workers as local "
    "processes (the default when sbatch is not on PATH).",
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
@click.option(
    "--params", "show_params", is_flag=True, help="Print each ended trial's parameters too."
)
@click.option(
    "--deadline",
    default=None,
    help="Finish by this long after the start (2h, 1h30m, 90m): sets [resources] deadline; "
    "the controller follows the elastic plan (docs/elastic.md).",
)
@_backend_option
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
        _print_plan(spec, backend)
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
        _print_submitted(paths, job)
        return EXIT_OK
    click.echo(f"study directory: {paths.root}")
    click.echo(f"watch it from another shell with: hpctune status {paths.root} --watch")
    return _exit_code(run_here(paths, backend, show_params=show_params))


def _check_backend(backend: Any, spec: Any, dry_run: bool, source: Path | None = None) -> None:
    """Before anything is created: would the backend take the controller and the workers?"""
    from hpctune.errors import SubmissionError

    try:
        backend.check(spec, source)
    except SubmissionError as exc:  # the cluster does not answer
        if not dry_run:
            raise
        click.echo(f"note: not checked against the cluster: {exc}")


def _print_elastic_plan(spec: Any, backend: Any) -> dict[str, Any]:
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


def _print_submitted(paths: StudyPaths, job: str) -> None:
    click.echo(f"controller job: {job} (log: {paths.logs}/controller-{job}.out)")
    click.echo(f"watch:  hpctune status {paths.root}")
    click.echo(f"stop:   hpctune stop {paths.root}")
    click.echo(f"resume: hpctune resume {paths.root}")


def _print_plan(spec: Any, backend: Any) -> None:
    from hpctune.policies.generators import first_proposals, make_generator
    from hpctune.study.formatting import format_params
    from hpctune.study.seeding import component_seed

    generator = make_generator(
        spec.generator.name,
        spec.generator.options,
        spec.space,
        component_seed(spec.seed, "generator"),
    )
    click.echo(f"spec {spec.source} is valid")
    click.echo(f"study directory: {spec.directory}")
    click.echo(f"entry point: {spec.entry.describe()}")
    click.echo(
        f"metric: {spec.metric} ({spec.mode}), max_steps {spec.max_steps}, "
        f"{spec.num_trials} trials, generator {spec.generator.name}, "
        f"policy {spec.policy.name}, {spec.resources.slots} slots"
    )
    first = first_proposals(
        generator,
        min(spec.num_trials, 5),
        metric=spec.metric,
        mode=spec.mode,
        max_steps=spec.max_steps,
        objectives=spec.objectives,
    )
    if not generator.predictable:
        click.echo(f"first proposals of {spec.generator.name} (no results yet; later ones learn):")
    for index, params in enumerate(first):
        click.echo(f"  trial {index}: {format_params(params)}")
    if spec.num_trials > 5:
        click.echo(f"  ... {spec.num_trials - 5} more")
    for line in backend.describe(spec):
        click.echo(line)


@cli.command("plan")
@click.argument(
    "study_tomls", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path)
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/cli.md).")
@click.option(
    "--max-lines",
    type=int,
    default=60,
    show_default=True,
    help="Stage lines to print (0: all).",
)
@_plot_option("Also draw the stage tree to this file (PNG).")
def plan_command(
    study_tomls: tuple[Path, ...], as_json: bool, max_lines: int, plot_path: Path | None
) -> int:
    """Show the trials of STUDY_TOMLS as a stage tree before anything runs.

    Draws each study's trials with its generator, cuts each configuration into stages where a
    hyperparameter's function changes and merges shared prefixes (Hippo's search plan): prints
    the number of trials, total (trial-based) and unique (stage-based) training steps, the merge
    rate p = total / unique and the stage tree. With several studies (of the same model, data
    and code: equal training files, metrics and `stages.fingerprint`, else refused) their
    trials share one plan and the k-wise merge rate is shown. Creates nothing.
    """
    from hpctune.policies.generators import first_proposals, make_generator
    from hpctune.spec import load_spec
    from hpctune.stagetree import Scheduler, SearchPlan, build_stage_tree, simulate, trial_makespan
    from hpctune.stagetree.options import share_digest
    from hpctune.stagetree.preview import format_stage_tree, plan_configs, plan_summary
    from hpctune.study.seeding import component_seed

    plan = SearchPlan()
    studies: list[dict[str, Any]] = []
    specs = [load_spec(path) for path in study_tomls]
    keys = [share_digest(s.stages.fingerprint, s.entry.code(), s.metric) for s in specs]
    for other, key in zip(specs[1:], keys[1:], strict=True):
        if key != keys[0]:
            raise UsageError(
                f"{other.source} cannot share stages with {specs[0].source}: their training "
                "files, metrics or `stages.fingerprint` differ (studies share stages only when "
                "all three are equal); plan them separately"
            )
    for spec in specs:
        generator = make_generator(
            spec.generator.name,
            spec.generator.options,
            spec.space,
            component_seed(spec.seed, "generator"),
        )
        configs = first_proposals(
            generator,
            spec.num_trials,
            metric=spec.metric,
            mode=spec.mode,
            max_steps=spec.max_steps,
            objectives=spec.objectives,
        )
        try:
            alone = plan_configs(configs, spec.max_steps)
            plan_configs(configs, spec.max_steps, plan, first_id=len(plan.trials))
        except ValueError as exc:  # pragma: no cover - the spec checks schedules already
            raise UsageError(f"{spec.source}: {exc}") from None
        studies.append(
            {
                "name": spec.name,
                "generator": spec.generator.name,
                "max_steps": spec.max_steps,
                "step_unit": spec.step_unit,
                "first_trial": len(plan.trials) - len(configs),
                "trials": len(configs),
                "total_steps": alone.total_steps(),
                "unique_steps": alone.unique_steps(),
                "merge_rate": alone.merge_rate(),
            }
        )
    spec = specs[0]
    tree = build_stage_tree(plan)
    summary = plan_summary(plan, tree)
    slots = spec.resources.slots
    stage_time = simulate(tree, Scheduler.CRITICAL_PATH, slots).makespan
    trial_steps = [float(s["max_steps"]) for s in studies for _ in range(s["trials"])]
    trial_time = trial_makespan(trial_steps, slots)
    estimate = {"slots": slots, "trial_based_steps": trial_time, "critical_path_steps": stage_time}
    if plot_path is not None:
        from hpctune.stagetree.plots import plot_stage_tree

        names = ", ".join(st["name"] for st in studies)
        title = f"{names}: {len(tree.stages)} stages, merge rate {summary['merge_rate']:.2f}"
        plot_stage_tree(tree, plot_path, title=title, unit=spec.step_unit)
    if as_json:
        first = {k: studies[0][k] for k in ("name", "generator", "max_steps", "step_unit")}
        out = {"version": 1, "study": first, "studies": studies, **summary, "makespan": estimate}
        click.echo(json.dumps(out))
        return EXIT_OK
    unit = spec.step_unit
    for st in studies:
        line = (
            f"study {st['name']}: {st['trials']} trials ({st['generator']} generator), "
            f"max_steps {st['max_steps']} ({st['step_unit']}s)"
        )
        if len(studies) > 1:
            last = st["first_trial"] + st["trials"] - 1
            line += f"; trials {st['first_trial']}-{last} below"
            line += (
                f"\n  alone: total {st['total_steps']}, unique {st['unique_steps']}, "
                f"merge rate p = {st['merge_rate']:.2f}"
            )
        click.echo(line)
    k = len(studies)
    rate = (
        f"merge rate p = {summary['merge_rate']:.2f}"
        if k == 1
        else (f"{k}-wise merge rate m_{k} = {summary['merge_rate']:.2f}")
    )
    click.echo(
        f"training {unit}s: total {summary['total_steps']} (trial-based), unique "
        f"{summary['unique_steps']} (stage-based), {rate}"
    )
    trees = len(tree.roots)
    click.echo(
        f"search plan: {summary['nodes']} nodes; stage tree: {len(tree.stages)} stages in "
        f"{trees} tree{'s' if trees != 1 else ''}, longest path {summary['critical_path_steps']} "
        f"{unit}s"
    )
    click.echo(
        f"on {slots} slot{'s' if slots != 1 else ''} at equal time per {unit}: trial-based "
        f"{trial_time:g} {unit}s, stage-based (critical path) {stage_time:g} {unit}s"
    )
    click.echo("stage tree ([stage] steps (trials served below): pieces that change):")
    click.echo(format_stage_tree(tree, max_lines))
    if plot_path is not None:
        click.echo(f"plot: {plot_path}")
    return EXIT_OK


@cli.command()
@click.argument("study_dir", type=click.Path(path_type=Path))
@click.option(
    "--local",
    is_flag=True,
    help="Run the controller here with local workers (the default without sbatch).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Take over even if another controller seems alive: it is fenced (it stops at its "
    "next commit without committing).",
)
@click.option(
    "--params", "show_params", is_flag=True, help="Print each ended trial's parameters too."
)
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
@_backend_option
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
    from hpctune.controller.launch import ensure_no_controller, prepare_study_dir
    from hpctune.spec import StudySpec, load_spec
    from hpctune.wire.inbox import send_command

    paths = _study_paths(str(study_dir))
    prepare_study_dir(paths)
    study = open_study(paths.root)
    spec = StudySpec.from_dict(study.spec)
    backend, _ = choose_backend(backend_name, local=local)
    commands = [] if deadline is None else _changed_deadline(spec, study.record, deadline, backend)
    other = None if spec_file is None else load_spec(spec_file, directory=paths.root)
    assignments = [*settings, *(f"slurm.{text}" for text in slurm_settings)]
    spec, changes = _changed_settings(spec, assignments, other)
    commands[:0] = changes
    source = (spec_file or Path("--set")) if changes else None
    if backend.runs_controller_here:
        for command in commands:
            send_command(paths.inbox, command)
        click.echo(f"resuming {paths.root}")
        return _exit_code(run_here(paths, backend, force=force, show_params=show_params))
    backend.check(spec, source)  # before fencing: a rejected change leaves the study as it was
    _take_over(paths, backend, force, ensure_no_controller)
    sent = [send_command(paths.inbox, c) for c in commands]  # the controller journals them
    try:
        job = backend.submit_controller(paths, spec)
    except HpctuneError:
        for inbox in sent:
            inbox.unlink(missing_ok=True)
        raise
    _print_submitted(paths, job)
    return EXIT_OK


def _changed_settings(
    spec: Any, assignments: list[str], other: Any
) -> tuple[Any, list[dict[str, Any]]]:
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
        for line in lines:
            click.echo(line)
        if command is not None:
            commands.append(command)
    return spec, commands


def _take_over(paths: StudyPaths, backend: Any, force: bool, ensure: Callable[..., None]) -> None:
    """Fence the study's controllers (``--force``), or refuse while one runs or is queued."""
    from hpctune.wire.lease import fence

    if force:
        epoch = fence(paths.root)
        click.echo(f"fenced the study's controllers (epoch {epoch}); submitting a new one")
        return
    ensure(paths)
    queued = backend.controller_queued(paths)
    if queued is not None:
        raise UsageError(
            f"the controller job {queued} of {paths.root} is still queued or "
            f"running; cancel it first (`scancel {queued}` on Slurm), or use --force"
        )


def _changed_deadline(spec: Any, record: Any, text: str, backend: Any) -> list[dict[str, Any]]:
    """The inbox command of ``resume --deadline text`` (none when the deadline stays).

    Raises:
        UsageError: ``text`` is not a duration, has passed already (it counts from the study's
            start), or the study cannot follow a deadline (its policy, a stage tree, no
            profile to plan from).
    """
    import math
    import time

    from hpctune.elastic.experiment import PlanningError
    from hpctune.elastic.follow import load_study_profile, study_cost_model
    from hpctune.elastic.report import parse_duration
    from hpctune.errors import StudySpecError
    from hpctune.spec import with_deadline
    from hpctune.study.formatting import format_duration

    try:
        seconds = parse_duration(text)
    except PlanningError as exc:
        raise UsageError(str(exc)) from None
    if not math.isfinite(seconds):
        raise UsageError(f"--deadline must be a finite duration such as 3h, not {text!r}")
    try:
        new = with_deadline(spec, seconds)
    except StudySpecError as exc:
        raise UsageError(
            f"--deadline {text}: this study cannot follow a deadline: {exc.message} (a study's "
            f"{exc.field or 'spec'} does not change at resume: resume it without --deadline, or "
            "launch a new study with the fix)"
        ) from None
    elapsed = time.time() - (record.started_time or record.created_time)
    if seconds <= elapsed:
        raise UsageError(
            f"--deadline {text} has passed already: a deadline counts from the study's start, "
            f"{format_duration(elapsed)} ago; give a longer one (e.g. --deadline "
            f"{format_duration(elapsed + 3600)})"
        )
    old = spec.resources.deadline
    if old == seconds:
        click.echo(f"deadline unchanged ({format_duration(seconds)} from the study's start)")
        return []
    plan = record.elastic_plan
    if plan is None or "profile_data" not in plan:  # planned by the controller: can it be?
        try:
            load_study_profile(new)
            study_cost_model(new, backend.billing_weight)
        except PlanningError as exc:
            raise UsageError(f"--deadline {text}: {exc}") from None
    was = "none" if old is None else format_duration(old)
    click.echo(
        f"deadline: {was} -> {format_duration(seconds)} from the study's start; the controller "
        "re-plans the stages not yet finished"
    )
    return [{"command": "deadline", "deadline": seconds, "source": f"--deadline {text}"}]


@cli.command(hidden=True)
@click.argument("study_dir", type=click.Path(path_type=Path))
@click.option("--backend", "backend_name", default="slurm", show_default=True)
def controller(study_dir: Path, backend_name: str) -> int:
    """Run the controller inside its batch job (what the backend's job script runs)."""
    from hpctune.plugins import backend

    return _exit_code(backend(backend_name).run_controller(_study_paths(str(study_dir))))


@cli.command()
@click.argument("study_dir", type=click.Path(path_type=Path))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object (format in docs/cli.md) instead of a table.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=STATUS_ROWS,
    show_default=True,
    help="Show only the last N trials (the counts and the best trial cover them all).",
)
@click.option("--all", "show_all", is_flag=True, help="Show every trial (no --limit).")
@click.option("--sacct", is_flag=True, help="Cross-check allocated time with Slurm's sacct.")
@click.option(
    "--watch",
    is_flag=True,
    help="Follow the study until it ends: a live display on a terminal, a line every "
    "--interval seconds otherwise.",
)
@click.option(
    "--interval",
    type=float,
    default=None,
    help="Seconds between updates of --watch (2; 10 when not a terminal).",
)
def status(
    study_dir: Path,
    as_json: bool,
    limit: int,
    show_all: bool,
    sacct: bool,
    watch: bool,
    interval: float | None,
) -> int:
    """Show a study's state and trials, from its journal (also while it runs)."""
    from hpctune.analysis.summary import (
        best_text,
        notices,
        pareto_text,
        policy_lines,
        status_json,
        study_line,
        trials_table,
        usage_line,
    )
    from hpctune.api import open_study
    from hpctune.wire.lease import controller_alive

    paths = _study_paths(str(study_dir))
    if watch:
        from hpctune.analysis.progress import watch as follow

        if as_json:
            raise UsageError("--watch and --json cannot be combined; poll `status --json`")
        if interval is not None and interval <= 0:
            raise UsageError(f"--interval must be > 0, but got {interval}")
        every = interval if interval is not None else (2.0 if sys.stdout.isatty() else 10.0)
        follow(paths.root, interval=every)
    study = open_study(paths.root)
    controller = controller_alive(paths)
    backends = _backend_status(paths, study.record, controller is not None)
    if as_json:
        data = status_json(study.record, str(paths.root))
        data["study"]["controller"] = controller
        for name, (_, info) in backends.items():
            data["study"][name] = info
        data["study"]["settings_changes"] = study.record.settings_changes
        if sacct:
            data["accounting"]["sacct_allocated_s"] = _allocated_seconds(study.record)
        click.echo(json.dumps(data, indent=2, default=str))
        return EXIT_OK
    click.echo(f"study {study.record.spec.get('name')} in {paths.root}")
    click.echo(study_line(study.record))
    click.echo(usage_line(study.record))
    if sacct:
        seconds = _allocated_seconds(study.record)
        shown = "sacct not available" if seconds is None else f"{seconds:.0f} s"
        click.echo(f"sacct: worker jobs held their allocation {shown}")
    if controller is not None:
        job = f"Slurm job {controller['job']}, " if controller.get("job") else ""
        click.echo(
            f"controller: {job}pid {controller.get('pid')} on {controller.get('host')} "
            f"(epoch {controller.get('epoch')})"
        )
    elif any(info.get("controller_job") for _, info in backends.values()):
        pass  # the controller job's state follows
    elif study.record.state in (StudyState.RUNNING, StudyState.STOPPING):
        click.echo(f"controller: not running (resume with `hpctune resume {paths.root}`)")
    for backend, info in backends.values():
        for line in backend.status_lines(info, str(paths.root)):
            click.echo(line)
    if study.record.reason:
        click.echo(f"reason: {study.record.reason}")
    for line in [*policy_lines(study.record), *notices(study.record)]:
        click.echo(line)
    plan = study.elastic_plan()
    if plan is not None:
        from hpctune.elastic.status import format_plan_status

        for line in format_plan_status(plan):
            click.echo(line)
    click.echo("")
    click.echo(trials_table(study.record, limit=None if show_all else limit))
    hidden = 0 if show_all else len(study.record.trials) - limit
    if hidden > 0:
        click.echo(
            f"({hidden} earlier trials not shown: `hpctune status {paths.root} --all`, or "
            "`--json`, or `hpctune export`)"
        )
    click.echo("")
    click.echo(best_text(study.record, paths.root))
    front = pareto_text(study.record)
    if front:
        click.echo(front)
    return EXIT_OK


@cli.command()
@click.argument("study_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/cli.md).")
def best(study_dir: Path, as_json: bool) -> int:
    """Print the best trial of STUDY_DIR: its configuration as TOML and its checkpoint.

    Only completed trials count. A trial's value follows the study's `[study] best` rule (its
    best step, or its last). Under PBT the best trial is the fittest final model, and its
    lineage's schedule is printed too. Exit 1 when no trial has completed yet.
    """
    from hpctune.analysis.summary import schedule_lines
    from hpctune.api import open_study
    from hpctune.journal.best import describe_best
    from hpctune.study.formatting import format_params_toml, format_value

    paths = _study_paths(str(study_dir))
    study = open_study(paths.root)
    found = describe_best(study.record, paths.root)
    if found is None:
        click.echo(
            f"no completed trial in {paths.root} yet: only a trial that completes can be the "
            "best (see `hpctune status`)",
            err=True,
        )
        return EXIT_FAILURE
    lineage = found.trial.generation is not None
    if as_json:
        out = {
            "version": 1,
            "trial": found.trial_id,
            "metric": study.metric,
            "mode": study.mode,
            "rule": found.mode,
            "value": found.value,
            "step": found.step,
            "checkpoint": None if found.checkpoint is None else str(found.checkpoint),
            "params": found.params,
        }
        if lineage:
            from hpctune.analysis.lineage import schedule

            out["schedule"] = [
                {"trial": s.trial_id, "start": s.start_step, "end": s.end_step, "params": s.params}
                for s in schedule(study.record, found.trial_id)
            ]
        click.echo(json.dumps(out, indent=1))
        return EXIT_OK
    rule = "its best step" if found.mode == "peak" else "its last step"
    click.echo(
        f"# best trial {found.trial_id} of {study.record.spec.get('name')}: {study.metric} = "
        f"{format_value(found.value)} at step {found.step} ({rule}, [study] best = "
        f'"{found.mode}")'
    )
    if found.checkpoint is not None:
        click.echo(f"# checkpoint: {found.checkpoint}")
        click.echo(f'#   state = torch.load("{found.checkpoint}", weights_only=True)')
    else:
        click.echo(f"# checkpoint: none kept at step {found.step}")
    if lineage:
        for line in schedule_lines(study.record, found.trial_id):
            click.echo(f"# {line}")
    click.echo("[search_space]")
    click.echo(format_params_toml(found.params))
    return EXIT_OK


@cli.command()
@click.argument("study_dir", type=click.Path(path_type=Path))
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

    paths = _study_paths(str(study_dir))
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


@cli.command("add-trials")
@click.argument("study_dir", type=click.Path(path_type=Path))
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

    paths = _study_paths(str(study_dir))
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


def _backend_status(
    paths: StudyPaths, record: Any, alive: bool
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """What each backend the study ran on adds to its status (name -> backend, its JSON)."""
    from hpctune.plugins import backend, backend_names

    out = {}
    for name in backend_names():
        found = backend(name)
        info = found.status(paths, record, alive)
        if info is not None:
            out[name] = (found, info)
    return out


def _allocated_seconds(record: Any) -> float | None:
    """Seconds the worker jobs held their allocation as a backend accounts them (sacct)."""
    from hpctune.plugins import backend, backend_names

    for name in backend_names():
        seconds = backend(name).allocated_seconds(record)
        if seconds is not None:
            return float(seconds)
    return None


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


@cli.command()
@click.argument("study_dir", type=click.Path(path_type=Path))
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
    from hpctune.wire.inbox import check_command, send_command
    from hpctune.wire.lease import controller_alive

    paths = _study_paths(str(study_dir))
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
    click.echo(f"asked the controller to retry {_retry_text(trials, failed)} ({path})")
    if controller_alive(paths) is None:
        click.echo(f"no controller is running: carry it out with `hpctune resume {paths.root}`")
    return EXIT_OK


def _retry_text(trials: tuple[int, ...], failed: bool) -> str:
    parts = [f"trial {t}" for t in trials] + (["every failed trial"] if failed else [])
    return ", ".join(parts)


def _parse_options(texts: tuple[str, ...], names: list[str]) -> dict[str, dict[str, Any]]:
    """``[POLICY.]KEY=VALUE`` texts -> options by policy name (values read as JSON if they are)."""
    options: dict[str, dict[str, Any]] = {name: {} for name in names}
    for text in texts:
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--option {text!r} must be KEY=VALUE or POLICY.KEY=VALUE")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        target, dot, option = key.strip().rpartition(".")
        if dot:
            if target not in options:
                raise UsageError(
                    f"--option {text!r} names policy {target!r}, which is not among the "
                    f"--policy values ({', '.join(names)})"
                )
            options[target][option] = value
        else:
            for name in names:
                options[name][option] = value
    return options


def _fmt(value: float | None, digits: int = 3) -> str:
    return "never" if value is None else f"{value:.{digits}g}"


def _fmt_q(q: dict[str, float | None], digits: int = 3) -> str:
    return f"{_fmt(q['median'], digits)} ({_fmt(q['q25'], digits)}-{_fmt(q['q75'], digits)})"


@cli.command()
@click.option(
    "--trace",
    "trace_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The trace file (HDF5, docs/traces.md).",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    required=True,
    help="A policy name; repeat it to compare several.",
)
@click.option(
    "--option",
    "option_texts",
    multiple=True,
    metavar="[POLICY.]KEY=VALUE",
    help="A policy option (value read as JSON if it parses); POLICY. limits it to one policy.",
)
@click.option(
    "--generator",
    "generator_name",
    default=None,
    help="A generator proposing configurations (tpe, gp, cmaes, qmc, ...), each answered with "
    "the nearest unused configuration of the trace; default: a random order.",
)
@click.option(
    "--generator-option",
    "generator_texts",
    multiple=True,
    help="KEY=VALUE: an option of --generator (value read as JSON if it parses).",
)
@click.option("--slots", type=int, default=4, show_default=True, help="Workers at once.")
@click.option(
    "--seeds", type=int, default=8, show_default=True, help="Configuration orders (runs)."
)
@click.option("--target", type=float, default=None, help="Target value (default: the trace's).")
@click.option("--budget", type=float, default=None, help="Also report the best value by then (s).")
@click.option("--queue-wait", type=float, default=0.0, show_default=True, help="Seconds.")
@click.option("--startup", type=float, default=0.0, show_default=True, help="Seconds.")
@click.option("--suspend-cost", type=float, default=0.0, show_default=True, help="Seconds.")
@click.option("--resume-cost", type=float, default=0.0, show_default=True, help="Seconds.")
@click.option("--checkpoint-cost", type=float, default=0.0, show_default=True, help="Seconds.")
@click.option(
    "--fit-seconds",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds from asking for a learning-curve fit to its answer (POP, EarlyTerm, hybrid).",
)
@click.option(
    "--segment-start",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds from an assignment to its segment's start on an idle worker.",
)
@click.option("--boundary", type=int, default=1, show_default=True, help="Study boundary.")
@click.option("--max-steps", type=int, default=None, help="Default: the trace's epochs.")
@click.option("--num-trials", type=int, default=None, help="Default: every configuration.")
@click.option(
    "--stages",
    is_flag=True,
    help="Run over a stage tree ([stages] enabled): shared sequence prefixes train once.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/traces.md).")
@click.option("--timeline", is_flag=True, help="With --json: add each run's timeline.")
@click.option(
    "--predictions",
    "predictions_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A JSON-lines file keeping learning-curve fits between runs (POP, EarlyTerm).",
)
@click.option(
    "--curve-model",
    default="amortised",
    show_default=True,
    metavar="NAME",
    callback=lambda _ctx, _param, name: check_curve_model(name),
    help="Learning-curve model for POP and EarlyTerm (as [curves] model): amortised, domhan, "
    "another package's, or MODULE:CLASS.",
)
@click.option(
    "--recalibrate",
    type=click.Choice(["none", "spread", "full"]),
    default="none",
    show_default=True,
    help="Recalibrate predictions from the study's own curves (as [curves] recalibrate).",
)
@click.option(
    "--fit-workers",
    type=int,
    default=2,
    show_default=True,
    help="Processes fitting learning curves before the runs (domhan).",
)
@click.option(
    "--plot-split",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Draw POP's promising/opportunistic split over time (first POP run).",
)
def simulate(
    trace_path: Path,
    policies: tuple[str, ...],
    option_texts: tuple[str, ...],
    generator_name: str | None,
    generator_texts: tuple[str, ...],
    slots: int,
    seeds: int,
    target: float | None,
    budget: float | None,
    queue_wait: float,
    startup: float,
    suspend_cost: float,
    resume_cost: float,
    checkpoint_cost: float,
    fit_seconds: float,
    segment_start: float,
    boundary: int,
    max_steps: int | None,
    num_trials: int | None,
    stages: bool,
    as_json: bool,
    timeline: bool,
    predictions_path: Path | None,
    curve_model: str,
    recalibrate: str,
    fit_workers: int,
    plot_split: Path | None,
) -> int:
    """Replay a trace under policies in simulated time; print medians and quartiles.

    Each of --seeds runs draws its own configuration order (the same for every policy), and
    reports the time to reach the target, GPU-hours, the best value and trial counts.
    """
    import math

    from hpctune.simulator import SimulatorConfig, run_many
    from hpctune.simulator.traces import Trace

    if slots < 1:
        raise UsageError(f"--slots must be >= 1, but got {slots}")
    if seeds < 1:
        raise UsageError(f"--seeds must be >= 1, but got {seeds}")
    names = list(dict.fromkeys(policies))
    options = _parse_options(option_texts, names)
    generator_options = _parse_options(generator_texts, ["generator"])["generator"]
    if generator_texts and generator_name is None:
        raise UsageError("--generator-option needs --generator")
    trace = Trace.load(trace_path)
    config = SimulatorConfig(
        queue_wait=queue_wait,
        startup=startup,
        suspend_cost=suspend_cost,
        resume_cost=resume_cost,
        checkpoint_cost=checkpoint_cost,
        fit_seconds=fit_seconds,
        segment_start=segment_start,
        boundary=boundary,
        max_steps=max_steps,
        num_trials=num_trials,
        target=target,
        stages=stages,
        recalibrate=recalibrate,
    )
    from hpctune.curves import FitOptions
    from hpctune.simulator import PredictionCache, build_policy, simulation_context
    from hpctune.simulator._predictions import prefetch_for

    cache = PredictionCache(
        trace,
        bounds=config.metric_bounds(trace),
        options=FitOptions(model=curve_model),  # type: ignore[arg-type]
        path=predictions_path,
    )
    context = simulation_context(trace, config)
    built = [build_policy(name, options[name], context) for name in names]
    prefetch_for(cache, built, max_steps or trace.num_epochs, workers=max(fit_workers, 0))
    from hpctune.analysis.progress_bar import run_progress

    with run_progress(len(names) * seeds) as on_run:
        many = run_many(
            trace,
            [(name, options[name]) for name in names],
            slots,
            seeds,
            config=config,
            budget=budget,
            predictions=cache,
            generator=generator_name,
            generator_options=generator_options,
            on_run=on_run,
        )
    if plot_split is not None:
        from hpctune.simulator.plots import plot_split as draw_split

        pop_runs = [r for runs in many.runs.values() for r in runs if r.policy == "pop"]
        if not pop_runs:
            raise UsageError("--plot-split needs a POP run: add --policy pop")
        draw_split(pop_runs[0], plot_split)
    if as_json:
        doc = {
            "format": "hpctune.simulate/1",
            "trace": {
                "path": str(trace_path),
                "configs": trace.num_configs,
                "epochs": trace.num_epochs,
                "metric": trace.metric,
                "mode": trace.mode,
                "random_level": None if math.isnan(trace.random_level) else trace.random_level,
            },
            "target": many.target,
            "generator": None
            if generator_name is None
            else {"name": generator_name, "options": generator_options},
            "slots": slots,
            "seeds": list(range(seeds)),
            "budget": budget,
            "config": {
                k: v
                for k, v in vars(config).items()
                if k not in ("target", "stop_at_target", "max_time", "faults")
            },
            "policies": [
                {
                    "label": key,
                    "policy": runs[0].policy,
                    "options": dict(runs[0].options),
                    "summary": many.summary[key],
                    "runs": [r.to_dict(timeline=timeline, budget=budget) for r in runs],
                }
                for key, runs in many.runs.items()
            ],
        }
        click.echo(json.dumps(doc, indent=2))
        return EXIT_OK
    click.echo(
        f"trace {trace_path}: {trace.num_configs} configurations x {trace.num_epochs} epochs, "
        f"{trace.metric} ({trace.mode}), target {many.target:.6g}"
    )
    if generator_name is not None:
        click.echo(
            f"generator {generator_name}: each proposal answered with the nearest unused "
            "configuration of the trace (docs/traces.md)"
        )
    click.echo(
        f"{slots} slots, {seeds} configuration orders; costs (s): queue {queue_wait:g}, "
        f"start-up {startup:g}, suspend {suspend_cost:g}, resume {resume_cost:g}, "
        f"checkpoint {checkpoint_cost:g}, curve fit {fit_seconds:g}"
    )
    click.echo("medians (quartiles q25-q75):")
    header = ["policy", "reached", "time to target s", "GPU-h to target", "GPU-h", "best"]
    header += ["started", "terminated", "suspended"]
    if budget is not None:
        header.append(f"best by {budget:g} s")
    rows = [header]
    for key, summary in many.summary.items():
        row = [
            key,
            f"{summary['reached']}/{summary['runs']}",
            _fmt_q(summary["time_to_target"]),
            _fmt_q(summary["gpu_hours_to_target"]),
            _fmt_q(summary["gpu_hours"]),
            _fmt(summary["best_value"]["median"], 4),
            _fmt(summary["trials_started"]["median"]),
            _fmt(summary["trials_terminated"]["median"]),
            _fmt(summary["trials_suspended"]["median"]),
        ]
        if budget is not None:
            row.append(_fmt(summary["best_value_at_budget"]["median"], 4))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return EXIT_OK


@cli.command("export-trace")
@click.argument("study_dir", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--random-level",
    type=float,
    default=None,
    help="The metric's value for a random model (e.g. 0.1 for ten classes).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Write the trace of a study whose trials were forked from others (PBT) anyway.",
)
def export_trace(study_dir: Path, out: Path, random_level: float | None, force: bool) -> int:
    """Write a finished study's curves and step times as a trace file (HDF5) OUT.

    A trace holds one fixed configuration per curve, trained from step 0; the trials of a
    study that forks (PBT) are short sessions that go on from other trials' checkpoints with
    changed hyperparameters, so their curves do not fit that form: refused without --force.
    """
    import math

    from hpctune.api import open_study
    from hpctune.simulator.traces import Trace

    paths = _study_paths(str(study_dir))
    forked = [
        t.trial_id
        for t in open_study(paths.root).trials
        if t.parent_trial is not None and not t.shares_prefix
    ]
    if forked and not force:
        raise UsageError(
            f"{paths.root}: {len(forked)} trials were forked from other trials' checkpoints "
            "(PBT), so their curves are sessions of lineages, not whole runs of fixed "
            "configurations, and a trace of them would mislead the simulator; use "
            "`hpctune export --format hdf5` for analysis, or --force to write it anyway"
        )
    if forked:
        click.echo(
            f"warning: {len(forked)} trials were forked (PBT): their curves start at their "
            "parents' fork steps; the trace does not replay PBT",
            err=True,
        )
    trace = Trace.from_study(
        paths.root, random_level=math.nan if random_level is None else random_level
    )
    trace.save(out)
    done = int((trace.lengths() == trace.num_epochs).sum())
    click.echo(
        f"wrote {out}: {trace.num_configs} configurations x {trace.num_epochs} epochs "
        f"({done} ran to the end), metric {trace.metric} ({trace.mode})"
    )
    return EXIT_OK


@cli.command("report")
@click.argument("study_dir", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The report folder to write (default: STUDY_DIR/report).",
)
@click.option("--no-png", is_flag=True, help="Skip the static PNGs (faster).")
def report_command(study_dir: Path, out: Path | None, no_png: bool) -> int:
    """Write a study report: one folder with index.html (open it from disk; no server, no
    network), its plotting library and a PNG per plot. Works on a running study."""
    from hpctune.api import open_study
    from hpctune.report.html import write_report

    paths = _study_paths(str(study_dir))
    target = out if out is not None else paths.root / "report"
    page = write_report(open_study(paths.root), target, pngs=not no_png)
    click.echo(f"wrote {page}")
    click.echo(f"open it with a browser (file://{page.resolve()}); copy the folder to share it")
    return EXIT_OK


EXPORT_FORMATS = ("csv", "hdf5", "optuna", "tensorboard", "mlflow")


@cli.command("export")
@click.argument("study_dir", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    required=True,
    help="csv (trials.csv, metrics.csv), hdf5 (one file), optuna (a journal file), "
    "tensorboard (event files per trial), mlflow (a file store).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write (default: STUDY_DIR/export/<name>.<format>).",
)
def export_command(study_dir: Path, fmt: str, out: Path | None) -> int:
    """Export a study for the tools you already use (read from the journal; also while it
    runs). Each export is written under a temporary name and renamed: nothing half-written."""
    from hpctune.api import open_study

    paths = _study_paths(str(study_dir))
    study = open_study(paths.root)
    name = str(study.spec.get("name", "study"))
    suffix = {"csv": "csv", "hdf5": "h5", "optuna": "optuna.log", "tensorboard": "tb",
              "mlflow": "mlruns"}[fmt]  # fmt: skip
    target = out if out is not None else paths.root / "export" / f"{name}.{suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        from hpctune.export.csv_files import write_csv

        for path in write_csv(study, target):
            click.echo(f"wrote {path}")
    elif fmt == "hdf5":
        from hpctune.export.hdf5 import write_hdf5

        click.echo(f"wrote {write_hdf5(study, target)}")
        click.echo(f'read it with hpctune.open_study("{target}") or h5py (docs/journal.md)')
    elif fmt == "optuna":
        try:
            import optuna  # noqa: F401
        except ImportError:
            raise UsageError(
                "--format optuna needs optuna, which is not installed: pip install "
                "'hpctune[report]'"
            ) from None
        from hpctune.export.optuna_journal import write_optuna_journal

        if target.exists():
            raise UsageError(f"{target} exists already; remove it or give another --out")
        click.echo(f"wrote {write_optuna_journal(study, target)}")
        click.echo(f"open it with: optuna-dashboard {target}")
    elif fmt == "tensorboard":
        from hpctune.export.tensorboard import write_tensorboard

        folders = write_tensorboard(study, target)
        click.echo(f"wrote {len(folders)} trial folders under {target}")
        click.echo(f"open them with: tensorboard --logdir {target}")
    else:
        from hpctune.export.mlflow_store import write_mlflow

        click.echo(f"wrote {write_mlflow(study, target)}")
        click.echo(
            f"open it with: MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri "
            f"{target.resolve().as_uri()}"
        )
    return EXIT_OK


@cli.command("compare")
@click.argument("study_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@_plot_option("Also draw the best-so-far curves against time and GPU-hours (PNG).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list (docs/cli.md).")
def compare_command(study_dirs: tuple[Path, ...], plot_path: Path | None, as_json: bool) -> int:
    """Compare studies side by side: best value, when it was reached, trials, GPU-hours."""
    from hpctune.analysis.compare import compare_rows, compare_table, plot_compare
    from hpctune.api import open_study

    studies = [open_study(_study_paths(str(d)).root) for d in study_dirs]
    rows = compare_rows(studies)
    if plot_path is not None:
        plot_compare(studies, plot_path)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return EXIT_OK
    click.echo(compare_table(rows))
    if plot_path is not None:
        click.echo(f"plot: {plot_path}")
    return EXIT_OK


@cli.command("fit-curves")
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "--trial", "trials", type=int, multiple=True, help="A trial (configuration) id; repeatable."
)
@click.option(
    "--at-epoch", type=int, default=None, help="Fit the first N points (default: all observed)."
)
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="Report P(final at least as good); default: what the best 10% of curves reach.",
)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list (docs/cli.md).")
@click.option("--workers", type=int, default=0, show_default=True, help="Processes (0: this one).")
@click.option(
    "--budget",
    type=click.Choice(["hyperdrive", "domhan"]),
    default="hyperdrive",
    show_default=True,
    help="MCMC budget.",
)
@click.option(
    "--model",
    default="amortised",
    show_default=True,
    metavar="NAME",
    callback=lambda _ctx, _param, name: check_curve_model(name),
    help="Curve model: the amortised network, Domhan et al.'s MCMC (--budget), another "
    "package's, or MODULE:CLASS.",
)
@click.option(
    "--bounds",
    nargs=2,
    type=float,
    default=None,
    help="LOW HIGH of the metric (default: the study's or trace's metric_bounds, else 0 1).",
)
@click.option("--seed", type=int, default=None, help="Seed base (default: the study's, or 0).")
def fit_curves(
    source: Path,
    trials: tuple[int, ...],
    at_epoch: int | None,
    threshold: float | None,
    plot_path: Path | None,
    as_json: bool,
    workers: int,
    budget: str,
    model: str,
    bounds: tuple[float, float] | None,
    seed: int | None,
) -> int:
    """Fit learning curves of a trace file or a study directory SOURCE; predict the final value.

    Per curve: the median and 5/25/75/95% quantiles of the metric at the last step, and the
    probability that it ends at least as good as the threshold (>= for max, <= for min).
    """
    from hpctune.analysis.curve_fits import fit_curves as run
    from hpctune.analysis.curve_fits import format_table, load_curves, plot_curves
    from hpctune.analysis.progress_bar import progress_bar

    if seed is not None and seed < 0:
        raise UsageError(f"--seed must be >= 0, but got {seed}")
    curves = load_curves(source, bounds=bounds, seed=seed)
    with progress_bar(len(set(trials)) or len(curves.ids), "fitting") as advance:
        rows, predictions = run(
            curves,
            trials=trials,
            at_epoch=at_epoch,
            threshold=threshold,
            workers=workers,
            budget=budget,
            model=model,  # type: ignore[arg-type]
            on_fitted=lambda n: advance(f"{model} curves", n),
        )
    if plot_path is not None:
        plot_curves(curves, rows, predictions, plot_path)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    else:
        click.echo(format_table(curves, rows))
        if plot_path is not None:
            click.echo(f"plot: {plot_path}")
    return EXIT_OK


@cli.command("stagetree")
@click.argument("study_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/cli.md).")
@click.option(
    "--max-lines", type=int, default=60, show_default=True, help="Stage lines to print (0: all)."
)
@_plot_option("Also draw the stage tree, coloured by status, to this file (PNG).")
def stagetree_command(
    study_dir: Path, as_json: bool, max_lines: int, plot_path: Path | None
) -> int:
    """Show the stage tree of STUDY_DIR (running or finished) with each stage's status: done,
    running, pending or released (every trial through it ended first). Reads the journal only."""
    from hpctune.api import open_study
    from hpctune.stagetree.preview import format_stage_tree
    from hpctune.stagetree.status import status_counts, study_stage_tree

    study = open_study(_study_paths(str(study_dir)).root)
    max_steps = int(study.record.spec.get("max_steps", 0))
    try:
        tree, statuses = study_stage_tree(study.record, max_steps)
    except ValueError as exc:  # pragma: no cover - the spec checked the schedules
        raise UsageError(f"{study_dir}: {exc}") from None
    counts = status_counts(statuses)
    if plot_path is not None:
        from hpctune.stagetree.plots import plot_stage_tree

        done = f"{counts['done']}/{len(statuses)} done"
        unit = str(study.record.spec.get("step_unit", "step"))
        title = f"{study.record.spec.get('name', '')}: {len(statuses)} stages, {done}"
        plot_stage_tree(tree, plot_path, title=title, unit=unit, statuses=statuses)
    if as_json:
        stages = [
            {
                "id": s.id,
                "node": s.node,
                "start": s.start,
                "end": s.end,
                "parent": s.parent,
                "trials": list(s.trials),
                "status": statuses[s.id],
            }
            for s in tree.stages
        ]
        click.echo(json.dumps({"version": 1, "counts": counts, "stages": stages}))
        return EXIT_OK
    click.echo(
        f"{len(statuses)} stages: "
        + ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    )
    labels = [f"{s}" for s in statuses]
    click.echo(format_stage_tree(tree, max_lines, labels=labels))
    if plot_path is not None:
        click.echo(f"plot: {plot_path}")
    return EXIT_OK


@cli.command()
@click.argument("study_dir", type=click.Path(path_type=Path))
@click.option("--trial", "trials", type=int, multiple=True, help="Only these trials' lineages.")
@_plot_option("Also draw the tree and the learning-rate schedule into this PNG.")
@click.option(
    "--param", default="lr", show_default=True, help="Parameter whose schedule is plotted."
)
def lineage(study_dir: Path, trials: tuple[int, ...], plot_path: Path | None, param: str) -> int:
    """Print the population tree of STUDY_DIR (PBT): each trial under its parent, with its
    generation, steps, last metric value and hyperparameters."""
    from hpctune.analysis.lineage import plot_lineage, tree_text
    from hpctune.api import open_study

    record = open_study(_study_paths(str(study_dir)).root).record
    click.echo(tree_text(record, list(trials) or None))
    if plot_path is not None:
        highlight = trials[0] if trials else None
        plot_lineage(record, plot_path, highlight=highlight, param=param)
        click.echo(f"plot: {plot_path}")
    return EXIT_OK


@cli.command()
@click.argument("study_dir", type=click.Path(path_type=Path))
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
@click.option("--local", is_flag=True, help="Run it here (the default without sbatch).")
@_backend_option
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

    paths, plan = replay_study(_study_paths(str(study_dir)).root, list(trials), out)
    chain = " -> ".join(str(entry["trial"]) for entry in plan)
    click.echo(f"replay of {len(plan)} trials (topological order: {chain})")
    click.echo(f"study directory: {paths.root}")
    backend, _ = choose_backend(backend_name, local=local)
    if not backend.runs_controller_here:
        spec = StudySpec.from_dict(open_study(paths.root).spec)
        _print_submitted(paths, backend.submit_controller(paths, spec))
        return EXIT_OK
    return _exit_code(run_here(paths, backend))


@cli.command("check-policy")
@click.argument("target")
@click.option(
    "--options",
    "options_text",
    default="{}",
    metavar="JSON",
    help="The policy's options as a JSON object, e.g. '{\"reduction_factor\": 3}'.",
)
@click.option(
    "--views",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Decisions to check (a view and an event each).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The first study's seed.")
@click.option(
    "--space",
    "space_text",
    default=None,
    metavar="JSON",
    help="The studies' search space as a JSON [search_space] table (default: the kit's).",
)
def check_policy_command(
    target: str, options_text: str, views: int, seed: int, space_text: str | None
) -> int:
    """Check a policy against the policy contract on random studies (the conformance kit).

    TARGET is a registered policy (asha) or MODULE:CLASS_OR_FACTORY (a Policy subclass, or a
    function returning a policy, called with the options as keyword arguments). Checked at every
    decision: no exception, no I/O, no clock, the view left alone, a JSON state that round-trips,
    determinism, restart from the journaled state equals no restart, no more placements than
    free slots, only legal actions. Exit 0 if it passes, 1 with the failing check, 2 for a bad
    argument.
    """
    from hpctune.policies import OptionError
    from hpctune.study.space import parse_space
    from hpctune.testing import ConformanceError, check_policy
    from hpctune.testing.policy_conformance import policy_factory

    try:
        options = json.loads(options_text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--options {options_text!r} is not JSON: {exc}") from exc
    if not isinstance(options, dict):
        raise UsageError(f"--options must be a JSON object, not {options_text!r}")
    space = None
    if space_text is not None:
        try:
            table = json.loads(space_text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--space {space_text!r} is not JSON: {exc}") from exc
        space = parse_space(table, path=None)
    make = policy_factory(target, options)
    try:
        report = check_policy(make, seed=seed, n_views=views, space=space)
    except OptionError as exc:
        raise UsageError(f"{target} refuses the search space: {exc}") from exc
    except ConformanceError as exc:
        again = ["hpctune", "check-policy", target, "--seed", str(exc.seed)]
        again += ["--views", str(exc.views)]
        if options:
            again += ["--options", options_text]
        if space_text is not None:
            again += ["--space", space_text]
        click.echo(f"FAILED: {exc.headline}")
        click.echo(f"reproduce: {shlex.join(again)}")
        return EXIT_FAILURE
    click.echo(report.summary())
    return EXIT_OK


def _size_pairs(texts: tuple[str, ...], option: str) -> list[tuple[int, str]]:
    """``SIZE=VALUE`` options as ``(size, value)`` pairs (exit 2 on a malformed one)."""
    pairs = []
    for text in texts:
        size, sep, value = text.partition("=")
        if not sep or not size.strip().isdigit() or int(size) < 1 or not value.strip():
            raise UsageError(f"{option} {text!r}: expected SIZE=VALUE with SIZE >= 1 devices")
        pairs.append((int(size), value.strip()))
    return pairs


@cli.command("profile")
@click.argument("study_toml", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--sizes",
    default=None,
    metavar="1,2,4",
    help="With STUDY_TOML: the devices per trial to measure [default: 1,2,4].",
)
@click.option(
    "--steps",
    "step_texts",
    multiple=True,
    metavar="N | DEVICES=SOURCE",
    help="With STUDY_TOML: the steps to time at each size [default: 5]. Without it: seconds "
    "per step at DEVICES devices per trial, from a trace file or a finished study directory; "
    "repeatable.",
)
@click.option(
    "--local",
    is_flag=True,
    help="With STUDY_TOML: run the short studies here (the default when sbatch is not on PATH).",
)
@click.option(
    "--speedup",
    "speedup_texts",
    multiple=True,
    metavar="DEVICES=X",
    help="Throughput at DEVICES over one device, for a size not measured; repeatable.",
)
@click.option("--queue-wait", type=float, default=None, help="SCALE (s) [default: 0].")
@click.option("--startup", type=float, default=None, help="INIT (s) [default: 0].")
@click.option(
    "--latencies-from",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A study directory whose workers' queue waits and start-ups replace --queue-wait and "
    "--startup, and whose rung decisions (sha, hyperband, asha: a finished rung's last segment "
    "end to the next rung's first segment start) replace --decision.",
)
@click.option(
    "--decision",
    type=float,
    default=None,
    help="SYNC (s): a rung's decision [default: 0]. With STUDY_TOML: measured by one more "
    "short study under the sha policy (two rung decisions, six steps); giving --decision "
    "skips it and keeps this value.",
)
@click.option(
    "--together",
    default=None,
    metavar="2,4",
    help="With STUDY_TOML: for each count N, one more short study of N workers starting and "
    "training at once (INIT, warm-up and steps with them together; 0: none) [default: the "
    "spec's slots].",
)
@click.option(
    "--segment-start",
    type=float,
    default=None,
    help="Seconds a segment takes to begin (checkpoint load) [default: 0].",
)
@click.option("--device", type=click.Choice(["gpu", "cpu"]), default=None, help="[default: gpu]")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the profile (JSON, for plan-elastic --profile); with STUDY_TOML "
    "default: profile.json in its study directory.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
@_backend_option
def profile_command(
    study_toml: Path | None,
    sizes: str | None,
    step_texts: tuple[str, ...],
    local: bool,
    speedup_texts: tuple[str, ...],
    queue_wait: float | None,
    startup: float | None,
    latencies_from: Path | None,
    decision: float | None,
    together: str | None,
    segment_start: float | None,
    device: str | None,
    out: Path | None,
    as_json: bool,
    backend_name: str | None,
) -> int:
    """Write a workload's profile for the elastic planner (docs/elastic.md).

    \b
    hpctune profile study.toml [--sizes 1,2,4] [--steps 5] [--together N] [--local]
      runs a short study of STUDY_TOML's training function per size (one worker of that many
      devices, ctx.devices; CPUs locally; three trials one after the other), and measures
      steady seconds per step, the segment start, the gap between segments, the first
      segment's warm-up, checkpoint save and load, and the queue wait (SCALE) and start-up
      (INIT) of a worker; then one of N workers at once (start-up, warm-up and steps
      together); then one under the sha policy (4 trials, rungs at 1 and 2 steps, one
      worker of the smallest size) for the rung decision (SYNC), unless --decision is given.
    hpctune profile --steps 1=TRACE [--steps 2=STUDY_DIR ...] [--speedup 4=3.5] --out PATH
      takes seconds per step from traces or finished studies.

    Prints the mean seconds per step and the speed-up at each size.
    """
    speedups: dict[int, float] = {}
    for size, text in _size_pairs(speedup_texts, "--speedup"):
        try:
            speedups[size] = float(text)
        except ValueError:
            raise UsageError(f"--speedup {size}={text}: the speed-up must be a number") from None
    if study_toml is not None:
        given = [
            name
            for name, value in (
                ("--queue-wait", queue_wait),
                ("--startup", startup),
                ("--latencies-from", latencies_from),
                ("--segment-start", segment_start),
                ("--device", device),
            )
            if value is not None
        ]
        if given:
            raise UsageError(
                f"{', '.join(given)}: measured by `hpctune profile STUDY_TOML`; leave "
                f"{'them' if len(given) > 1 else 'it'} out, or give the step times with "
                "--steps DEVICES=SOURCE and no STUDY_TOML"
            )
        return _profile_study(
            study_toml,
            sizes,
            step_texts,
            local,
            speedups,
            decision,
            together,
            out,
            as_json,
            backend_name,
        )
    if sizes is not None or local or together is not None:
        first = "--sizes" if sizes is not None else "--local" if local else "--together"
        raise UsageError(
            f"{first} needs a STUDY_TOML to run: `hpctune profile study.toml --sizes 1,2,4`"
        )
    if not step_texts:
        raise UsageError(
            "give a STUDY_TOML to measure (`hpctune profile study.toml`), or measured step "
            "times with --steps DEVICES=SOURCE (a trace file or a finished study directory)"
        )
    if out is None:
        raise UsageError("--out: where to write the profile, e.g. --out profile.json")
    from hpctune.elastic.measured import study_decisions, study_latencies, study_stages
    from hpctune.profiler.from_traces import profile_from_steps, read_steps

    steps: dict[int, tuple[float, ...]] = {}
    sources = []
    for size, text in _size_pairs(step_texts, "--steps"):
        steps[size], where = read_steps(Path(text))
        sources.append(f"{size}={where}")
    queue_samples: tuple[float, ...] = (queue_wait or 0.0,)
    startup_samples: tuple[float, ...] = (startup or 0.0,)
    decision_samples: tuple[float, ...] = (0.0 if decision is None else decision,)
    if latencies_from is not None:
        from hpctune.api import open_study

        record = open_study(latencies_from).record
        queue_samples, startup_samples = study_latencies(record)
        stages = study_stages(record)
        measured = study_decisions(record, stages) if stages is not None else ()
        decision_samples = measured or decision_samples
        sources.append(f"latencies={latencies_from}")
    profile = profile_from_steps(
        steps,
        speedups,
        queue_wait=queue_samples or (0.0,),
        startup=startup_samples or (0.0,),
        decision=decision_samples,
        segment_start=segment_start or 0.0,
        device=device or "gpu",
        source=", ".join(sources),
    )
    profile.save(out)
    if as_json:
        click.echo(json.dumps(profile.to_dict()))
        return EXIT_OK
    _print_profile(profile, out, set(steps), "from --speedup")
    return EXIT_OK


def _profile_study(
    study_toml: Path,
    sizes_text: str | None,
    step_texts: tuple[str, ...],
    local: bool,
    speedups: dict[int, float],
    decision: float | None,
    together_text: str | None,
    out: Path | None,
    as_json: bool,
    backend_name: str | None,
) -> int:
    """``hpctune profile STUDY_TOML``: measure the profile with short studies, one per size."""
    from hpctune.backends import choose_backend
    from hpctune.controller.launch import check_entry_point
    from hpctune.profiler.from_traces import with_speedups
    from hpctune.profiler.measure import (
        DEFAULT_SIZES,
        DEFAULT_STEPS,
        measure_profile,
        parse_sizes,
        size_spec,
        sync_spec,
    )
    from hpctune.spec import load_spec

    steps = DEFAULT_STEPS
    if len(step_texts) > 1 or any("=" in text for text in step_texts):
        raise UsageError(
            f"--steps {' --steps '.join(step_texts)}: with STUDY_TOML, --steps is the number of "
            "steps to time at each size (e.g. --steps 5); DEVICES=SOURCE step times go "
            "without STUDY_TOML"
        )
    if step_texts:
        text = step_texts[0].strip()
        if not text.isdigit() or int(text) < 1:
            raise UsageError(
                f"--steps {step_texts[0]!r}: the steps to time at each size must be a whole "
                "number >= 1, e.g. --steps 5"
            )
        steps = int(text)
    sizes = DEFAULT_SIZES if sizes_text is None else parse_sizes(sizes_text)
    if speedups:
        with_speedups({size: (1.0,) for size in sizes}, speedups)  # refused before anything runs
    spec = load_spec(study_toml)
    check_entry_point(spec)
    backend, _ = choose_backend(backend_name, local=local)
    cluster = backend.cluster
    together: tuple[int, ...] = ()
    if together_text is None:
        together = (spec.resources.slots,) if spec.resources.slots >= 2 else ()
    elif together_text.strip() == "0":
        together = ()
    else:
        together = parse_sizes(together_text, "--together")
        if min(together) < 2:
            raise UsageError(
                f"--together {together_text!r}: counts of workers at once are >= 2 (or 0 for "
                "none), e.g. --together 2,4"
            )
    short_sync = None if decision is not None else sync_spec(spec, min(sizes), cluster=cluster)
    for short in [
        *(size_spec(spec, size, steps, cluster=cluster) for size in sizes),
        *(size_spec(spec, min(sizes), steps, cluster=cluster, together=n) for n in together),
        *([] if short_sync is None else [short_sync]),
    ]:
        backend.check(short)
    say = (lambda line: None) if as_json else click.echo
    if not as_json:
        where = f"as {backend.name} jobs" if cluster else "here"
        counts = " and ".join(map(str, together))
        also = f", then {counts} workers at once" if together else ""
        also += ", then rung decisions (SYNC)" if short_sync is not None else ""
        click.echo(
            f"profiling {spec.name}: {steps} step(s) at {', '.join(map(str, sizes))} "
            f"device(s) per trial, one short study each{also}, {where}"
        )
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    profile, runs, sync = measure_profile(
        spec, sizes, steps, backend=backend, decision=decision, together=together, say=say
    )
    if speedups:
        import dataclasses

        profile = dataclasses.replace(
            profile, step_seconds=with_speedups(profile.step_seconds, speedups)
        )
    target = out or StudyPaths(spec.directory).profile
    profile.save(target)
    if as_json:
        click.echo(json.dumps(profile.to_dict()))
        return EXIT_OK
    _print_profile(profile, target, {run.devices for run in runs}, "from --speedup")
    for run in runs[: len(sizes)]:
        click.echo(
            f"  {run.devices:>3}: SCALE {_mean_text(run.queue_wait)}, INIT "
            f"{_mean_text(run.startup)} ({run.directory})"
        )
    click.echo(
        f"  checkpoint save {_mean_text(profile.checkpoint_save)}, load "
        f"{_mean_text(profile.checkpoint_load)} (means of {len(profile.checkpoint_save)} and "
        f"{len(profile.checkpoint_load)}); segment start {_mean_text(profile.segment_start)}, "
        f"gap between segments {_mean_text(profile.segment_gap)}, first segment's warm-up "
        f"{_mean_text(profile.warmup)}"
    )
    for n, run in zip(together, runs[len(sizes) :], strict=True):
        click.echo(
            f"  {n} workers at once: INIT {_mean_text(profile.startup_at(n))}, warm-up "
            f"{_mean_text(profile.warmup_at(n))}, steps {profile.crowding_at(n):.3g}x as long "
            f"({run.directory})"
        )
    if sync is not None:
        click.echo(
            f"  SYNC {_mean_text(sync.decision)} over {len(sync.decision)} rung decision(s) "
            f"of the sha policy ({sync.directory})"
        )
    elif decision is not None:
        click.echo(f"  SYNC {decision:.3g} s: given with --decision, not measured")
    else:
        click.echo(
            f"  SYNC not measured: max_steps {spec.max_steps} leaves no rung to decide; 0 s "
            "(give it with --decision SECONDS)"
        )
    if not cluster and cpus is not None and max(sizes) > cpus:
        click.echo(
            f"note: this machine gives this process {cpus} CPU(s); sizes above {cpus} share "
            "them, so their times show oversubscription, not scaling"
        )
    where = "" if out is None else f" --profile {target}"
    click.echo(f"plan with: hpctune plan-elastic {study_toml} --deadline 2h{where}")
    return EXIT_OK


def _mean_text(samples: tuple[float, ...]) -> str:
    import numpy as np

    return f"{np.mean(samples):.3g} s" if samples else "not measured"


def _print_profile(profile: Any, out: Path, measured: set[int], other: str) -> None:
    """The profile as text: seconds per step and speed-up per size, then the latencies."""
    import numpy as np

    click.echo(f"profile: {out} ({profile.source})")
    for size in profile.sizes:
        how = "measured" if size in measured else other
        click.echo(
            f"  {size:>3} {profile.device}s/trial: {profile.step_mean(size):.4g} s/step, "
            f"speed-up {profile.speedup(size):.3g} ({how}, {len(profile.step_seconds[size])} "
            "samples)"
        )
    queue = [v for samples in profile.queue_wait.values() for v in samples]
    click.echo(
        f"  SCALE {np.mean(queue):.3g} s, INIT {np.mean(profile.startup):.3g} s, SYNC "
        f"{np.mean(profile.decision):.3g} s (means of {len(queue)}, {len(profile.startup)} and "
        f"{len(profile.decision)} samples)"
    )


@cli.command("plan-elastic")
@click.argument("study_toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--deadline", required=True, help="From the study's start: 2h, 1h30m, 90m, 45s.")
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(path_type=Path),
    default=None,
    help="The profile (hpctune profile --out); default: profile.json in the study directory.",
)
@click.option("--price", type=float, default=None, help="Money per GPU-hour (billed hour).")
@click.option(
    "--billing-weight",
    type=float,
    default=None,
    help="Billed units per device-hour (default 1, or from --partition).",
)
@click.option(
    "--partition",
    default=None,
    help="Read the billing weight from this partition's TRESBillingWeights (scontrol).",
)
@click.option(
    "--basis",
    type=click.Choice(["held", "used"]),
    default="held",
    show_default=True,
    help="Cost of devices held (start to end, idle included) or used (in segments).",
)
@click.option("--max-pool", type=int, default=None, help="Most devices held at once.")
@click.option("--node-devices", type=int, default=None, help="Devices of a node (whole nodes).")
@click.option(
    "--quantile",
    type=float,
    default=None,
    help="Judge the deadline on this quantile of the completion time (default: its mean).",
)
@click.option("--samples", type=int, default=64, show_default=True, help="Per simulation.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the simulator.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/cli.md).")
@_plot_option("Also draw the devices held per stage, plan against static, to this PNG.")
def plan_elastic_command(
    study_toml: Path,
    deadline: str,
    profile_path: Path | None,
    price: float | None,
    billing_weight: float | None,
    partition: str | None,
    basis: str,
    max_pool: int | None,
    node_devices: int | None,
    quantile: float | None,
    samples: int,
    seed: int,
    as_json: bool,
    plot_path: Path | None,
) -> int:
    """Plan the cheapest elastic allocation that finishes STUDY_TOML by --deadline.

    RubberBand's planner (docs/elastic.md): the study's rungs (SHA, Hyperband, ASHA) as stages,
    simulated from the profile; prints per stage the trials, devices per trial and pool of the
    plan and of the best static plan, with their predicted completion time and cost. Exit 1
    when no plan is predicted to meet the deadline. Creates nothing.
    """
    from hpctune.elastic import (
        CostModel,
        PlanOptions,
        Profile,
        experiment_from_study,
        plan_elastic,
    )
    from hpctune.elastic.profile import PROFILE_FILE
    from hpctune.elastic.report import format_plan, plot_plan
    from hpctune.spec import load_spec
    from hpctune.study.formatting import parse_duration

    seconds = parse_duration(deadline)
    spec = load_spec(study_toml)
    experiment = experiment_from_study(spec)
    profile = Profile.load(profile_path or spec.directory / PROFILE_FILE)
    device = "CPU" if profile.device == "cpu" else "GPU"
    billing_source = "--billing-weight" if billing_weight is not None else ""
    if billing_weight is None and partition is not None:
        from hpctune.backends import choose_backend

        backend, _ = choose_backend()
        billing_weight, billing_source = backend.billing_weight(
            spec, partition, profile.device == "gpu"
        )
    cost = CostModel(
        basis=basis,
        billing_weight=1.0 if billing_weight is None else billing_weight,
        price=price,
        device=device,
        billing_source=billing_source,
    )
    options = PlanOptions(
        samples=samples, seed=seed, quantile=quantile, max_pool=max_pool, node_devices=node_devices
    )
    result = plan_elastic(experiment, profile, seconds, cost, options=options)
    if plot_path is not None:
        plot_plan(result, plot_path)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        click.echo(format_plan(result))
        if plot_path is not None:
            click.echo(f"plot: {plot_path}")
    return EXIT_OK if result.feasible else EXIT_FAILURE


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map errors to exit codes (2 bad input, 1 failure)."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        result = cli.main(args=args, prog_name="hpctune", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        return EXIT_FAILURE
    except click.ClickException as exc:
        exc.show()
        return EXIT_BAD_INPUT if isinstance(exc, click.UsageError) else exc.exit_code
    except HpctuneError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"{'' if isinstance(exc, Interrupted) else 'error: '}{exc}", err=True)
        return exc.exit_code
    except (PermissionError, NotADirectoryError, IsADirectoryError) as exc:
        if debug:
            traceback.print_exc()
        where = exc.filename if exc.filename is not None else "a file"
        click.echo(f"error: {where}: {exc.strerror}; check the path and its permissions", err=True)
        return EXIT_BAD_INPUT
    return int(result) if isinstance(result, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
