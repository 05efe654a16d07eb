"""What the commands share: exit codes, a study directory given on the command line, options.

Imports only click and the exception tree at the top: every ``hpctune`` command pays for what
the CLI imports before it runs (the library is imported inside the commands).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hpctune.errors import AccessError, UsageError

if TYPE_CHECKING:
    from hpctune.study.states import StudyState
    from hpctune.wire.layout import StudyPaths

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2


def study_paths(directory: str | Path) -> StudyPaths:
    """The paths of the study directory given on the command line.

    Raises:
        AccessError: It belongs to another user who did not share it.
        UsageError: It is not a study directory (no journal in it).
    """
    from hpctune.wire.layout import StudyPaths

    paths = StudyPaths.of(str(directory))
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


def exit_code(state: StudyState) -> int:
    """The exit code of a command that ran a study here: 1 when it failed, else 0."""
    from hpctune.study.states import StudyState

    return EXIT_FAILURE if state is StudyState.FAILED else EXIT_OK


def echo_lines(lines: Sequence[str]) -> None:
    """Print each line."""
    for line in lines:
        click.echo(line)


def plot_option(help_text: str) -> Callable[[Any], Any]:
    """The ``--plot OUT.png`` option (drawn with matplotlib; exit 2 without it)."""
    return click.option(
        "--plot",
        "plot_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=help_text,
    )


def json_option(help_text: str = "Print one JSON object (docs/cli.md).") -> Callable[[Any], Any]:
    """The ``--json`` flag (the command's documented JSON instead of text)."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def study_dir_argument(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``STUDY_DIR`` argument."""
    return click.argument("study_dir", type=click.Path(path_type=Path))(command)


def backend_option(command: Callable[..., Any]) -> Callable[..., Any]:
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


def local_option(help_text: str) -> Callable[[Any], Any]:
    """The ``--local`` flag: the controller here, the workers as local processes."""
    return click.option("--local", is_flag=True, help=help_text)


def print_submitted(paths: StudyPaths, job: str) -> None:
    """What a submitted controller job prints: its id and log, the commands to follow it."""
    click.echo(f"controller job: {job} (log: {paths.logs}/controller-{job}.out)")
    click.echo(f"watch:  hpctune status {paths.root}")
    click.echo(f"stop:   hpctune stop {paths.root}")
    click.echo(f"resume: hpctune resume {paths.root}")


class RegistryChoice(click.ParamType):
    """A name from a registry of plug-ins, checked when the command runs (not when the CLI
    starts: reading other packages' entry points costs every command start-up time).

    Args:
        kind: What the names are, for the metavar and messages (``"format"``).
        find: Looks a name up, raising :class:`~hpctune.plugins.PluginError` (with the known
            names and a close match) when it is unknown.
    """

    def __init__(self, kind: str, find: Callable[[str], Any]) -> None:
        self.name = kind
        self._find = find

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        """``NAME`` in the usage line."""
        return "NAME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """The name, once the registry knows it (else click's exit 2 with the message)."""
        from hpctune.plugins import PluginError

        try:
            self._find(str(value))
        except PluginError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILURE",
    "EXIT_OK",
    "RegistryChoice",
    "backend_option",
    "echo_lines",
    "exit_code",
    "json_option",
    "local_option",
    "plot_option",
    "print_submitted",
    "study_dir_argument",
    "study_paths",
]
