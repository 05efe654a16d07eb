"""Typed access to the tables of a study.toml, with errors that name the field and the fix."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpctune.errors import StudySpecError

#: The default of a key that must be given.
REQUIRED = object()


class Section:
    """Typed access to one table of the spec, raising precise errors.

    Args:
        path: The study.toml (the errors name it).
        name: The table's dotted name (``study``, ``resources``, ``slurm.controller``).
        table: Its parsed TOML.
    """

    def __init__(self, path: Path, name: str, table: Mapping[str, Any]) -> None:
        self.path, self.name, self.table = path, name, table

    def error(self, key: str, message: str) -> StudySpecError:
        """The error of ``key`` of this table (its field: ``<table>.<key>``)."""
        return StudySpecError(self.path, f"{self.name}.{key}", message)

    def check_keys(self, valid: tuple[str, ...]) -> None:
        """Refuse a key not in ``valid``, with the closest valid one."""
        for key in self.table:
            if key not in valid:
                close = difflib.get_close_matches(key, valid, n=1)
                hint = f"did you mean `{close[0]}`? " if close else ""
                raise self.error(
                    key, f"unknown key in [{self.name}]; {hint}valid keys: {', '.join(valid)}"
                )

    def get(self, key: str, default: Any, what: str) -> Any:
        """The value of ``key``, or ``default`` (refused when :data:`REQUIRED`: ``what`` says
        what it is)."""
        if key in self.table:
            return self.table[key]
        if default is REQUIRED:
            raise self.error(key, f"`{self.name}.{key}` is required: {what}")
        return default

    def must(self, key: str, rule: str, value: Any, hint: str = "") -> StudySpecError:
        """The error of a ``value`` of ``key`` that breaks ``rule`` (and what to do: ``hint``)."""
        shown = f"{value!r} ({type(value).__name__})" if isinstance(value, str) else repr(value)
        return self.error(
            key,
            f"`{self.name}.{key}` must be {rule}, but got {shown}" + (f"; {hint}" if hint else ""),
        )

    def string(self, key: str, default: Any = REQUIRED, what: str = "") -> str:
        """A non-empty string."""
        value = self.get(key, default, what)
        if not isinstance(value, str) or not value.strip():
            raise self.must(key, "a non-empty string", value)
        return value

    def integer(
        self,
        key: str,
        default: Any = REQUIRED,
        *,
        low: int = 0,
        high: int | None = None,
        what: str = "",
        high_text: str = "",
        limit: int | None = None,
    ) -> int:
        """An integer >= ``low`` (and <= ``high``, named ``high_text``); ``limit``: hpctune's
        documented upper bound of the count (a typo such as 2**63-1 is refused)."""
        value = self.get(key, default, what)
        rule = f"an integer >= {low}" if high is None else f"between {low} and {high_text}"
        if not isinstance(value, int) or isinstance(value, bool):
            hint = "write it without quotes" if isinstance(value, str) else ""
            raise self.must(key, rule, value, hint)
        if value < low or (high is not None and value > high):
            raise self.must(key, rule, value)
        if limit is not None and value > limit:
            raise self.must(key, f"at most {limit} (hpctune's limit for it)", value)
        return value

    def boolean(self, key: str, default: bool) -> bool:
        """``true`` or ``false``."""
        value = self.get(key, default, "")
        if not isinstance(value, bool):
            raise self.must(key, "true or false", value)
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        """One of ``choices``."""
        value = self.get(key, default, "")
        if value not in choices:
            raise self.must(key, " or ".join(f'"{c}"' for c in choices), value)
        return str(value)

    def positive(self, key: str, rule: str) -> float | None:
        """An optional finite number > 0 (``None`` when the key is missing)."""
        value = self.get(key, None, "")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.must(key, rule, value)
        if not math.isfinite(value):
            raise self.must(key, rule, value)
        return float(value)


def table_of(data: Mapping[str, Any], key: str, path: Path, required: bool) -> Mapping[str, Any]:
    """The table ``[key]`` of the parsed study.toml ``data`` (``{}`` when missing and not
    ``required``).

    Raises:
        StudySpecError: It is missing and required, or it is not a table.
    """
    if key not in data:
        if required:
            raise StudySpecError(path, key, f"the [{key}] section is required")
        return {}
    value = data[key]
    if not isinstance(value, Mapping):
        raise StudySpecError(path, key, f"`{key}` must be a table ([{key}]), but got {value!r}")
    return value
