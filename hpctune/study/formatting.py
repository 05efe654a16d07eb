"""The one text form of values, hyperparameters, schedules and durations, for every command.

``hpctune status``, ``launch``, ``plan``, ``stagetree``, ``lineage``, ``best``, ``report`` and the
progress display print parameters through :func:`format_params` and schedules through
:func:`format_schedule`, so a schedule reads the same everywhere:
``cosine(base=0.1, total_steps=20)`` (arguments at their defaults left out, numbers to 4
significant digits, nested schedules in the same form).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields
from typing import Any

from hpctune.errors import PlanningError
from hpctune.study.schedules import SHAPES, is_schedule_dict, schedule_from_dict

NUMBER_DIGITS = 4


def format_number(value: float | int) -> str:
    """``0.1234``, ``1.235e-05``, ``20``; NaN as ``-``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "-"
    return f"{value:.{NUMBER_DIGITS}g}"


def format_value(value: Any) -> str:
    """Short text for a hyperparameter or metric value (a schedule dict as a schedule)."""
    if isinstance(value, float | int) and not isinstance(value, bool):
        return format_number(value)
    if is_schedule_dict(value):
        return format_schedule(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def format_schedule(value: Mapping[str, Any]) -> str:
    """``shape(arg=value, ...)``: the arguments that differ from their defaults.

    A dict that is not a valid schedule (e.g. from a newer version) is shown with all its keys.
    """
    shape = value.get("schedule")
    try:
        canonical = schedule_from_dict(value).to_dict()
    except ValueError:
        canonical = dict(value)
    defaults: dict[str, Any] = {}
    cls = SHAPES.get(str(shape))
    if cls is not None:
        for f in fields(cls):
            if f.default is not MISSING:
                defaults[f.name.rstrip("_")] = f.default
    args = [
        f"{k}={format_value(v)}"
        for k, v in canonical.items()
        if k != "schedule" and not (k in defaults and v == defaults[k])
    ]
    return f"{shape}({', '.join(args)})"


def format_params(params: Mapping[str, Any], *, width: int | None = None) -> str:
    """``name=value`` pairs; with ``width``, cut to that many characters (ending in ``...``)."""
    text = " ".join(f"{k}={format_value(v)}" for k, v in params.items())
    if width is not None and len(text) > width:
        return text[: max(width - 3, 0)].rstrip() + "..."
    return text


def format_params_toml(params: Mapping[str, Any]) -> str:
    """The parameters as a TOML table body (``name = value`` lines, schedules as inline tables),
    ready to paste into a ``[search_space]`` section."""
    return "\n".join(f"{k} = {toml_value(v)}" for k, v in params.items())


def toml_value(value: Any) -> str:
    """A Python value as TOML (scalars, lists, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else "inf")
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, Sequence):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return toml_value(str(value))


def format_sessions(sessions: Sequence[tuple[int, int, Mapping[str, Any]]]) -> list[str]:
    """A PBT schedule (``(start, end, params)`` per session) as one line per parameter:
    ``lr: 0.1 (steps 0-3), 0.12 (3-9), ...``, neighbouring sessions with equal values joined."""
    names: list[str] = []
    for _, _, params in sessions:
        names.extend(n for n in params if n not in names)
    lines = []
    for name in names:
        runs: list[list[Any]] = []  # [start, end, value]
        for start, end, params in sessions:
            value = params.get(name)
            if runs and runs[-1][2] == value and runs[-1][1] == start:
                runs[-1][1] = end
            else:
                runs.append([start, end, value])
        parts = [f"{format_value(v)} ({a}-{b})" for a, b, v in runs]
        lines.append(f"{name}: " + ", ".join(parts))
    return lines


def format_duration(seconds: float) -> str:
    """``1h02m03s`` style."""
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


__all__ = [
    "format_duration",
    "format_number",
    "format_params",
    "format_params_toml",
    "format_schedule",
    "format_sessions",
    "format_value",
    "toml_value",
]


_DURATION_RE = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(text: str, what: str = "--deadline") -> float:
    """Seconds of ``"2h"``, ``"1h30m"``, ``"90m"``, ``"45s"`` or a plain number of seconds.

    Raises:
        PlanningError: Not a positive duration (the message names ``what``).
    """
    value = text.strip().lower()
    seconds: float | None = None
    try:
        seconds = float(value)
    except ValueError:
        match = _DURATION_RE.fullmatch(value)
        if match is not None and any(match.groups()):
            h, m, s = (float(g) if g else 0.0 for g in match.groups())
            seconds = h * 3600 + m * 60 + s
    if seconds is None or not seconds > 0:
        raise PlanningError(
            f"{what} must be a positive duration such as 2h, 1h30m, 90m, 45s or seconds, "
            f"not {text!r}"
        )
    return seconds
