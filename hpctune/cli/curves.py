"""``fit-curves``: learning curves of a trace or a study fitted with the curve model the
controller uses, and their predicted final values."""

from __future__ import annotations

import json
from pathlib import Path

import click

from hpctune.cli.common import EXIT_OK
from hpctune.curves.registry import check_curve_model
from hpctune.errors import UsageError


@click.command("fit-curves")
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


COMMANDS = [fit_curves]
