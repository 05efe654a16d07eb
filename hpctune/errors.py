"""The exception tree of hpctune.

Every error a user can act on is an :class:`HpctuneError`. The CLI catches it, prints one line
(the traceback only with ``--debug``) and exits with the error's ``exit_code``: 2 for bad input,
1 for a failure at run time.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class HpctuneError(Exception):
    """Root of all hpctune errors."""

    exit_code: int = 1


class StudySpecError(HpctuneError):
    """A study.toml (or a value given on the command line) is invalid.

    Args:
        path: The file that holds the bad value.
        field: The dotted name of the field, e.g. ``search_space.lr.low``; empty for the file.
        message: What must hold, what was given and what to do.
    """

    exit_code = 2

    def __init__(self, path: Path | str | None, field: str, message: str) -> None:
        self.path = None if path is None else Path(path)
        self.field = field
        self.message = message
        where = str(self.path) if self.path is not None else "study spec"
        if field:
            where += f": field '{field}'"
        super().__init__(f"{where}: {message}")


def check_table_keys(
    table: Mapping[str, Any], valid: tuple[str, ...], name: str, path: Path | None
) -> None:
    """Reject a key of the study.toml table ``[name]`` that is not in ``valid``, naming the
    closest valid key and listing them all.

    Raises:
        StudySpecError: naming ``<name>.<key>``.
    """
    for key in table:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f"did you mean `{close[0]}`? " if close else ""
            raise StudySpecError(
                path,
                f"{name}.{key}",
                f"unknown key in [{name}]; {hint}valid keys: {', '.join(valid)}",
            )


class UsageError(HpctuneError):
    """A command was called with arguments that cannot work (a missing study, a busy one)."""

    exit_code = 2


class AccessError(UsageError):
    """A path cannot be used: permissions, owner or place (exit 2).

    Args:
        path: The path at fault.
        message: What is wrong with it and how to fix it.
    """

    def __init__(self, path: Path | str, message: str) -> None:
        self.path = Path(path)
        super().__init__(message)


class JournalError(HpctuneError):
    """The journal of a study is missing, damaged, of an unknown format, or cannot be read
    (exit 2: the user must restore or replace it)."""

    exit_code = 2


class CheckpointError(HpctuneError):
    """A checkpoint file is missing or its checksum does not match the journal."""


class SubmissionError(HpctuneError):
    """Workers could not be started (a process or a Slurm job failed to launch)."""


class StorageError(HpctuneError):
    """Writes to the study directory kept failing (a full disk, a quota, I/O errors)."""


class Interrupted(HpctuneError):
    """The controller in the foreground was interrupted (Ctrl-C: exit 130, SIGTERM: 143)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class CurveFitError(HpctuneError):
    """A learning-curve fit failed."""


class PlanningError(HpctuneError):
    """A plan was asked for with inputs that cannot work (exit 2): the message says the fix."""

    exit_code = 2


class UnknownNameError(HpctuneError, KeyError):
    """A trial id or metric name that the study does not have (the message lists what it has).

    A ``KeyError`` too, so ``except KeyError`` around a lookup keeps working.
    """

    exit_code = 2

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
