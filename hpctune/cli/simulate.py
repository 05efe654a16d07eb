"""Commands of the trace-driven simulator: ``simulate`` (policies compared on a trace) and
``export-trace`` (a finished study as a trace)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hpctune.cli.common import EXIT_OK, echo_lines, study_dir_argument, study_paths
from hpctune.curves.registry import check_curve_model
from hpctune.errors import UsageError

if TYPE_CHECKING:
    from hpctune.simulator import SimulationOptions

_SECONDS = "Seconds."
# the simulated study's costs and settings: SimulatorConfig's fields, one option each
_CONFIG_OPTIONS: list[Callable[[Any], Any]] = [
    click.option(
        "--target", type=float, default=None, help="Target value (default: the trace's)."
    ),
    click.option("--queue-wait", type=float, default=0.0, show_default=True, help=_SECONDS),
    click.option("--startup", type=float, default=0.0, show_default=True, help=_SECONDS),
    click.option("--suspend-cost", type=float, default=0.0, show_default=True, help=_SECONDS),
    click.option("--resume-cost", type=float, default=0.0, show_default=True, help=_SECONDS),
    click.option("--checkpoint-cost", type=float, default=0.0, show_default=True, help=_SECONDS),
    click.option(
        "--fit-seconds",
        type=float,
        default=0.0,
        show_default=True,
        help="Seconds from asking for a learning-curve fit to its answer (POP, EarlyTerm, "
        "hybrid).",
    ),
    click.option(
        "--segment-start",
        type=float,
        default=0.0,
        show_default=True,
        help="Seconds from an assignment to its segment's start on an idle worker.",
    ),
    click.option("--boundary", type=int, default=1, show_default=True, help="Study boundary."),
    click.option("--max-steps", type=int, default=None, help="Default: the trace's epochs."),
    click.option("--num-trials", type=int, default=None, help="Default: every configuration."),
    click.option(
        "--stages",
        is_flag=True,
        help="Run over a stage tree ([stages] enabled): shared sequence prefixes train once.",
    ),
    click.option(
        "--recalibrate",
        type=click.Choice(["none", "spread", "full"]),
        default="none",
        show_default=True,
        help="Recalibrate predictions from the study's own curves (as [curves] recalibrate).",
    ),
]


def _config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options of the simulated study's costs and settings (:data:`_CONFIG_OPTIONS`)."""
    for option in reversed(_CONFIG_OPTIONS):
        command = option(command)
    return command


@click.command()
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
@click.option(
    "--slots", type=click.IntRange(min=1), default=4, show_default=True, help="Workers at once."
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Configuration orders (runs).",
)
@click.option("--budget", type=float, default=None, help="Also report the best value by then (s).")
@_config_options
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
    "--fit-workers",
    type=click.IntRange(min=0),
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
def simulate(as_json: bool, timeline: bool, plot_split: Path | None, **values: Any) -> int:
    """Replay a trace under policies in simulated time; print medians and quartiles.

    Each of --seeds runs draws its own configuration order (the same for every policy), and
    reports the time to reach the target, GPU-hours, the best value and trial counts.
    """
    from hpctune.analysis.progress_bar import run_progress
    from hpctune.api import simulate as compare

    options = simulation_options(values)
    if plot_split is not None and all(name != "pop" for name, _ in options.policies):
        raise UsageError("--plot-split needs a POP run: add --policy pop")
    with run_progress(len(options.policies) * options.seeds) as on_run:
        comparison = compare(options, on_run=on_run)
    first_pop = comparison.first_run("pop")
    if plot_split is not None and first_pop is not None:
        from hpctune.simulator.plots import plot_split as draw_split

        draw_split(first_pop, plot_split)
    if as_json:
        click.echo(json.dumps(comparison.to_dict(timeline=timeline), indent=2))
    else:
        echo_lines(comparison.lines())
    return EXIT_OK


def simulation_options(values: dict[str, Any]) -> SimulationOptions:
    """The :class:`~hpctune.simulator.SimulationOptions` of ``simulate``'s option values
    (those of :data:`_CONFIG_OPTIONS` go into its :class:`~hpctune.simulator.SimulatorConfig`).

    Raises:
        UsageError: A ``--option`` or ``--generator-option`` is malformed, or names a policy
            not given with ``--policy``, or ``--generator-option`` comes without ``--generator``.
    """
    import dataclasses

    from hpctune.simulator import SimulationOptions, SimulatorConfig

    names = list(dict.fromkeys(values["policies"]))
    by_policy = _parse_options(values["option_texts"], names)
    generator_options = _parse_options(values["generator_texts"], ["generator"])["generator"]
    if values["generator_texts"] and values["generator_name"] is None:
        raise UsageError("--generator-option needs --generator")
    fields = {f.name for f in dataclasses.fields(SimulatorConfig)}
    return SimulationOptions(
        trace=values["trace_path"],
        policies=tuple((name, by_policy[name]) for name in names),
        slots=values["slots"],
        seeds=values["seeds"],
        budget=values["budget"],
        generator=values["generator_name"],
        generator_options=generator_options,
        config=SimulatorConfig(**{k: v for k, v in values.items() if k in fields}),
        curve_model=values["curve_model"],
        predictions=values["predictions_path"],
        fit_workers=values["fit_workers"],
    )


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


@click.command("export-trace")
@study_dir_argument
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

    from hpctune.journal.reader import read_study
    from hpctune.simulator.traces import Trace

    paths = study_paths(study_dir)
    forked = [
        t.trial_id
        for t in read_study(paths.root).trials
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
    level = math.nan if random_level is None else random_level
    trace = Trace.from_study(paths.root, random_level=level)
    trace.save(out)
    done = int((trace.lengths() == trace.num_epochs).sum())
    click.echo(
        f"wrote {out}: {trace.num_configs} configurations x {trace.num_epochs} epochs "
        f"({done} ran to the end), metric {trace.metric} ({trace.mode})"
    )
    return EXIT_OK


COMMANDS = [simulate, export_trace]
