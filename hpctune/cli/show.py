"""Commands that show studies, from their journals (also while they run): ``status``,
``best``, ``lineage``, ``stagetree``, ``compare``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hpctune.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    echo_lines,
    json_option,
    plot_option,
    study_dir_argument,
    study_paths,
)
from hpctune.errors import UsageError

STATUS_ROWS = 50  # trials `hpctune status` lists by default (the last ones; --all for every one)


@click.command()
@study_dir_argument
@json_option("Print one JSON object (format in docs/cli.md) instead of a table.")
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
    from hpctune.analysis.status import StudyStatus
    from hpctune.journal.reader import read_study

    paths = study_paths(study_dir)
    if watch:
        from hpctune.analysis.progress import watch as follow

        if as_json:
            raise UsageError("--watch and --json cannot be combined; poll `status --json`")
        if interval is not None and interval <= 0:
            raise UsageError(f"--interval must be > 0, but got {interval}")
        every = interval if interval is not None else (2.0 if sys.stdout.isatty() else 10.0)
        follow(paths.root, interval=every)
    shown = StudyStatus.read(paths, read_study(paths.root).record)
    if as_json:
        click.echo(json.dumps(shown.to_dict(sacct=sacct), indent=2, default=str))
    else:
        echo_lines(shown.lines(limit=None if show_all else limit, sacct=sacct))
    return EXIT_OK


@click.command()
@study_dir_argument
@json_option()
def best(study_dir: Path, as_json: bool) -> int:
    """Print the best trial of STUDY_DIR: its configuration as TOML and its checkpoint.

    Only completed trials count. A trial's value follows the study's `[study] best` rule (its
    best step, or its last). Under PBT the best trial is the fittest final model, and its
    lineage's schedule is printed too. Exit 1 when no trial has completed yet.
    """
    from hpctune.analysis.summary import best_json, best_toml_lines
    from hpctune.journal.best import describe_best
    from hpctune.journal.reader import read_study

    paths = study_paths(study_dir)
    record = read_study(paths.root).record
    found = describe_best(record, paths.root)
    if found is None:
        click.echo(
            f"no completed trial in {paths.root} yet: only a trial that completes can be the "
            "best (see `hpctune status`)",
            err=True,
        )
        return EXIT_FAILURE
    if as_json:
        click.echo(json.dumps(best_json(record, found), indent=1))
    else:
        echo_lines(best_toml_lines(record, found))
    return EXIT_OK


@click.command()
@study_dir_argument
@click.option("--trial", "trials", type=int, multiple=True, help="Only these trials' lineages.")
@plot_option("Also draw the tree and the learning-rate schedule into this PNG.")
@click.option(
    "--param", default="lr", show_default=True, help="Parameter whose schedule is plotted."
)
def lineage(study_dir: Path, trials: tuple[int, ...], plot_path: Path | None, param: str) -> int:
    """Print the population tree of STUDY_DIR (PBT): each trial under its parent, with its
    generation, steps, last metric value and hyperparameters."""
    from hpctune.analysis.lineage import plot_lineage, tree_text
    from hpctune.journal.reader import read_study

    record = read_study(study_paths(study_dir).root).record
    click.echo(tree_text(record, list(trials) or None))
    if plot_path is not None:
        highlight = trials[0] if trials else None
        plot_lineage(record, plot_path, highlight=highlight, param=param)
        click.echo(f"plot: {plot_path}")
    return EXIT_OK


@click.command("stagetree")
@study_dir_argument
@json_option()
@click.option(
    "--max-lines", type=int, default=60, show_default=True, help="Stage lines to print (0: all)."
)
@plot_option("Also draw the stage tree, coloured by status, to this file (PNG).")
def stagetree_command(
    study_dir: Path, as_json: bool, max_lines: int, plot_path: Path | None
) -> int:
    """Show the stage tree of STUDY_DIR (running or finished) with each stage's status: done,
    running, pending or released (every trial through it ended first). Reads the journal only."""
    from hpctune.journal.reader import read_study
    from hpctune.stagetree.preview import format_stage_tree
    from hpctune.stagetree.status import stage_tree_json, status_counts, study_stage_tree

    record = read_study(study_paths(study_dir).root).record
    try:
        tree, statuses = study_stage_tree(record, int(record.spec.get("max_steps", 0)))
    except ValueError as exc:  # pragma: no cover - the spec checked the schedules
        raise UsageError(f"{study_dir}: {exc}") from None
    counts = status_counts(statuses)
    if plot_path is not None:
        from hpctune.stagetree.plots import plot_stage_tree

        done = f"{counts['done']}/{len(statuses)} done"
        unit = str(record.spec.get("step_unit", "step"))
        title = f"{record.spec.get('name', '')}: {len(statuses)} stages, {done}"
        plot_stage_tree(tree, plot_path, title=title, unit=unit, statuses=statuses)
    if as_json:
        click.echo(json.dumps(stage_tree_json(tree, statuses)))
        return EXIT_OK
    shown = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    click.echo(f"{len(statuses)} stages: {shown}")
    click.echo(format_stage_tree(tree, max_lines, labels=list(statuses)))
    if plot_path is not None:
        click.echo(f"plot: {plot_path}")
    return EXIT_OK


@click.command("compare")
@click.argument("study_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@plot_option("Also draw the best-so-far curves against time and GPU-hours (PNG).")
@json_option("Print a JSON list (docs/cli.md).")
def compare_command(study_dirs: tuple[Path, ...], plot_path: Path | None, as_json: bool) -> int:
    """Compare studies side by side: best value, when it was reached, trials, GPU-hours."""
    from hpctune.analysis.compare import compare_rows, compare_table, plot_compare
    from hpctune.journal.reader import read_study

    studies = [read_study(study_paths(d).root) for d in study_dirs]
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


COMMANDS = [status, best, lineage, stagetree_command, compare_command]
