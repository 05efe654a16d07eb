"""Commands that write a study for people and other tools: ``report`` (an HTML folder) and
``export`` (a format of the registry in :mod:`hpctune.export`)."""

from __future__ import annotations

from pathlib import Path

import click

from hpctune.cli.common import EXIT_OK, RegistryChoice, echo_lines, study_dir_argument, study_paths
from hpctune.export import BUILTIN_FORMATS, find_format


@click.command("report")
@study_dir_argument
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
    from hpctune.journal.reader import read_study
    from hpctune.report.html import write_report

    paths = study_paths(study_dir)
    target = out if out is not None else paths.root / "report"
    page = write_report(read_study(paths.root), target, pngs=not no_png)
    click.echo(f"wrote {page}")
    click.echo(f"open it with a browser (file://{page.resolve()}); copy the folder to share it")
    return EXIT_OK


_FORMATS_HELP = ", ".join(f"{name} ({fmt.description})" for name, fmt in BUILTIN_FORMATS.items())


@click.command("export")
@study_dir_argument
@click.option(
    "--format",
    "fmt",
    type=RegistryChoice("format", find_format),
    required=True,
    help=f"{_FORMATS_HELP}; or another package's (entry points hpctune.exports).",
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
    from hpctune.export import export_study
    from hpctune.journal.reader import read_study

    echo_lines(export_study(read_study(study_paths(study_dir).root), fmt, out))
    return EXIT_OK


COMMANDS = [report_command, export_command]
