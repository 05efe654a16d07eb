"""Changing the ``[slurm]`` settings of an existing study (``hpctune resume --set``/``--spec``).

The search space, the policy and everything else stay as the journal has them; only
``[slurm]`` and ``[slurm.controller]`` change. ``resume`` checks the new settings like
``launch`` does, submits the controller with them and leaves a ``settings`` command in the
inbox: the controller journals the change (a ``settings_changed`` record) and submits its
workers with it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpctune.errors import StudySpecError
from hpctune.slurm.options import (
    CONTROLLER_KEYS,
    SECTION,
    SLURM_KEYS,
    SlurmSpec,
    parse_slurm,
    slurm_table,
)

#: The name the errors give as the source of ``--slurm`` values.
COMMAND_LINE = Path("--slurm")

#: The inbox command kind that carries new settings to the controller.
COMMAND = "settings"


def parse_assignments(texts: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` texts -> ``{key: value}``; ``controller.KEY`` for ``[slurm.controller]``.

    Values are read as TOML values when they parse (``30``, ``["module load x"]``,
    ``{exclude = "n1"}``) and as plain strings otherwise; an empty value (``account=``)
    removes the key (back to its default).

    Raises:
        StudySpecError: A text is not ``KEY=VALUE`` or names no ``[slurm]`` key.
    """
    out: dict[str, Any] = {}
    for text in texts:
        key, sep, raw = text.partition("=")
        key = key.strip().removeprefix("slurm.")
        if not sep or not key:
            raise StudySpecError(
                COMMAND_LINE,
                "",
                f"{text!r} must be KEY=VALUE, e.g. partition=gpu or controller.time=12:00:00",
            )
        section, dot, name = key.rpartition(".")
        valid = CONTROLLER_KEYS if dot else SLURM_KEYS
        if (dot and section != "controller") or name not in valid or name == "controller":
            where = "slurm.controller" if dot else "slurm"
            raise StudySpecError(
                COMMAND_LINE,
                f"slurm.{key}",
                f"not a key of [{where}]; valid keys: "
                f"{', '.join(k for k in valid if k != 'controller')}",
            )
        out[key] = _value(raw.strip())
    return out


def _value(raw: str) -> Any:
    if raw == "":
        return None
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
    # TOML reads 12:00:00 as a time of day and 2024-01-01 as a date: Slurm means text
    return value if isinstance(value, str | int | float | bool | list | dict) else raw


def apply_assignments(slurm: SlurmSpec, changes: Mapping[str, Any]) -> SlurmSpec:
    """``slurm`` with ``changes`` (from :func:`parse_assignments`) applied and checked.

    Raises:
        StudySpecError: A new value is invalid (naming ``slurm.<key>``).
    """
    table = slurm_table(slurm)
    for key, value in changes.items():
        _, dot, name = key.rpartition(".")
        target = table["controller"] if dot else table
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value
    return parse_slurm(table, COMMAND_LINE)


def differences(old: SlurmSpec, new: SlurmSpec) -> dict[str, list[Any]]:
    """``{"worker.partition": [old, new], ...}`` for every setting that differs."""
    out: dict[str, list[Any]] = {}
    before, after = old.to_dict(), new.to_dict()
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if a.get(sub) != b.get(sub):
                    out[f"{key}.{sub}"] = [a.get(sub), b.get(sub)]
        elif a != b:
            out[key] = [a, b]
    return out


def command(new: SlurmSpec, old: SlurmSpec, source: str) -> dict[str, Any]:
    """The inbox command that makes the next controller use (and journal) ``new``."""
    return {
        "command": COMMAND,
        "section": SECTION,
        "settings": new.to_dict(),
        "changes": differences(old, new),
        "source": source,
    }
