"""The ``hpctune`` command line: thin click commands that parse, call the library and print.

One module per group of commands: :mod:`.run` (launch, resume, replay, the controller's job),
:mod:`.show` (status, best, lineage, stagetree, compare), :mod:`.steer` (stop, retry,
add-trials), :mod:`.report` (report, export), :mod:`.simulate` (simulate, export-trace),
:mod:`.curves` (fit-curves), :mod:`.plan` (plan, plan-elastic, profile), :mod:`.policies`
(check-policy); :mod:`.common` holds what they share. The library is imported inside the
commands: every command pays for what is imported here before it runs.

Exit codes: 0 success, 2 bad input (a malformed study.toml, a missing study, a busy one),
1 a failure at run time (the study failed, workers could not start).
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from hpctune.cli import curves, plan, policies, report, run, show, simulate, steer
from hpctune.cli.common import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK
from hpctune.cli.show import STATUS_ROWS
from hpctune.errors import HpctuneError, Interrupted


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


for _module in (run, plan, show, steer, simulate, report, curves, policies):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


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


__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILURE", "EXIT_OK", "STATUS_ROWS", "cli", "main"]
