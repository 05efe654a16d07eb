"""Options of policies and generators: their ``Options`` dataclasses built from the ``[policy]``
and ``[generator]`` tables, with errors that name the key and the fix."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from hpctune.errors import HpctuneError


class OptionError(HpctuneError, ValueError):
    """An option of a policy or generator is invalid (bad input: exit code 2).

    Args:
        key: The option's name (as written under ``[policy]`` or ``[generator]``).
        message: What must hold and what was given.
    """

    exit_code = 2

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


_O = TypeVar("_O")


def parse_options(options_type: type[_O], options: Mapping[str, Any]) -> _O:
    """Build the options dataclass ``options_type`` from a mapping, with precise errors.

    Unknown keys raise :class:`OptionError` listing the valid ones with their defaults; a value of
    the wrong type raises :class:`OptionError` naming the expected type.
    """
    fields = {f.name: f for f in dataclasses.fields(options_type)}  # type: ignore[arg-type]
    for key in options:
        if key not in fields:
            valid = (
                ", ".join(f"{name} (default {_default_repr(f)})" for name, f in fields.items())
                or "none"
            )
            raise OptionError(key, f"unknown option; valid options: {valid}")
    values: dict[str, Any] = {}
    for key, value in options.items():
        expected = fields[key].type
        values[key] = _check_type(key, value, expected if isinstance(expected, str) else "")
    return options_type(**values)


def _default_repr(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    return "required"


def _check_type(key: str, value: Any, type_name: str) -> Any:
    """Check ``value`` against the annotation text ``type_name`` (float, int, bool, str)."""
    kinds = {part.strip() for part in type_name.split("|")}
    if value is None and "None" in kinds:
        return None
    if "bool" in kinds and isinstance(value, bool):
        return value
    if "int" in kinds and isinstance(value, int) and not isinstance(value, bool):
        return value
    if "float" in kinds and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if "str" in kinds and isinstance(value, str):
        return value
    if not kinds & {"bool", "int", "float", "str"}:
        return value
    raise OptionError(key, f"must be of type {type_name}, but got {value!r}")
