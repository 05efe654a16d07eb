"""The ``[study]`` table: the study's name, training function, metric, steps and seeds."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hpctune.spec.entry_point import EntryPoint
from hpctune.spec.model import DEFAULT_REPORT_TIMEOUT
from hpctune.spec.sections import REQUIRED, Section
from hpctune.study.metric_names import metric_name_problem
from hpctune.study.states import Mode

STUDY_KEYS = (
    "name",
    "directory",
    "entry_point",
    "metric",
    "mode",
    "max_steps",
    "step_unit",
    "boundary",
    "num_trials",
    "seed",
    "fail_fast",
    "max_retries",
    "metric_bounds",
    "random_level",
    "share_with_group",
    "objectives",
    "report_timeout",
    "best",
    "keep_checkpoints",
)
DEFAULT_DIRECTORY = "runs/{name}-{timestamp}"
# Upper bounds of counts (a typo like 1e23 or 2**63-1 is refused, not run).
MAX_STEPS = 10**9
MAX_TRIALS = 10**6
MAX_RETRIES = 1000
MAX_SEED = 2**63 - 1
MAX_REPORT_TIMEOUT = 30 * 86400.0
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_DOTTED_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class StudyTable:
    """The keys of ``[study]`` that need nothing but the table (see
    :class:`~hpctune.spec.model.StudySpec` for each); ``num_trials``, ``best`` and
    ``keep_checkpoints`` also need the generator and the policy."""

    name: str
    directory: Path
    entry: EntryPoint
    metric: str
    mode: Mode
    objectives: tuple[tuple[str, str], ...]
    max_steps: int
    step_unit: str
    boundary: int
    seed: int
    fail_fast: bool
    share_with_group: bool
    max_retries: int
    report_timeout: float
    metric_bounds: tuple[float, float]
    random_level: float | None


def parse_study_table(
    study: Section, directory: str | Path | None, now: datetime | None
) -> StudyTable:
    """Check the ``[study]`` table; ``directory`` overrides its ``directory`` (relative to the
    current directory), ``now`` is the time of ``{timestamp}``.

    Raises:
        StudySpecError: Naming ``study.<key>``.
    """
    study.check_keys(STUDY_KEYS)
    name = study.string("name", what='a short name for the study, e.g. name = "resnet-lr"')
    if not _NAME_RE.fullmatch(name):
        raise study.must(
            "name", "letters, digits, '_', '.' and '-', starting with a letter or digit", name
        )
    entry_text = study.string(
        "entry_point", what='the training function, e.g. entry_point = "train.py:train"'
    )
    metric, mode, objectives = _metric(study)
    max_steps = study.integer(
        "max_steps", low=1, limit=MAX_STEPS, what="the number of steps of a full trial"
    )
    metric_bounds = _metric_bounds(study)
    return StudyTable(
        name=name,
        directory=_directory(study, name, directory, now),
        entry=_entry_point(entry_text, study),
        metric=metric,
        mode=mode,
        objectives=objectives,
        max_steps=max_steps,
        step_unit=study.string("step_unit", "epoch"),
        boundary=study.integer(
            "boundary", 1, low=1, high=max_steps, high_text=f"max_steps ({max_steps})"
        ),
        seed=study.integer("seed", 0, low=0, limit=MAX_SEED),
        fail_fast=study.boolean("fail_fast", False),
        share_with_group=study.boolean("share_with_group", False),
        max_retries=study.integer("max_retries", 2, low=0, limit=MAX_RETRIES),
        report_timeout=_report_timeout(study),
        metric_bounds=metric_bounds,
        random_level=_random_level(study, metric_bounds),
    )


def _metric(study: Section) -> tuple[str, Mode, tuple[tuple[str, str], ...]]:
    """``metric``, ``mode`` and ``objectives`` (the first objective is the default metric)."""
    objectives = _objectives(study)
    first = objectives[0] if objectives else (REQUIRED, REQUIRED)
    metric = study.string(
        "metric",
        first[0],
        what='the metric the training function reports, e.g. metric = "val_loss"',
    )
    if metric_name_problem(metric):
        raise study.error("metric", metric_name_problem(metric))
    mode = study.get("mode", first[1], 'whether larger metric values are better: "max" or "min"')
    if mode not in ("max", "min"):
        raise study.must("mode", '"max" or "min"', mode)
    if objectives and (metric, mode) not in objectives:
        raise study.error(
            "metric",
            f"`study.metric` ({metric!r}, {mode}) must be one of the objectives "
            f"{dict(objectives)} with the same mode: the policies judge trials by it; leave "
            "`metric` and `mode` out to use the first objective",
        )
    return metric, mode, objectives


def _objectives(study: Section) -> tuple[tuple[str, str], ...]:
    """``objectives = { metric = "max" | "min", ... }``: two or more, in order."""
    value = study.get("objectives", None, "")
    if value is None:
        return ()
    example = 'e.g. objectives = { val_accuracy = "max", num_params = "min" }'
    if not isinstance(value, Mapping) or len(value) < 2:
        raise study.must("objectives", f"a table of two or more metrics ({example})", value)
    for name, mode in value.items():
        if metric_name_problem(str(name)):
            raise study.error("objectives", metric_name_problem(str(name)))
        if mode not in ("max", "min"):
            raise study.error(
                "objectives",
                f'objective {name!r} must be "max" or "min", but got {mode!r} ({example})',
            )
    return tuple((str(k), str(v)) for k, v in value.items())


def _report_timeout(study: Section) -> float:
    value = study.get("report_timeout", DEFAULT_REPORT_TIMEOUT, "")
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 <= value <= MAX_REPORT_TIMEOUT:
        raise study.must(
            "report_timeout",
            f"seconds between 0 (no limit) and {MAX_REPORT_TIMEOUT:.0f} (30 days)",
            value,
            "set it above your longest step plus its checkpoint, e.g. report_timeout = 7200",
        )
    return float(value)


def _metric_bounds(study: Section) -> tuple[float, float]:
    value = study.get("metric_bounds", [0.0, 1.0], "")
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        and math.isfinite(value[0])
        and math.isfinite(value[1])
        and value[0] < value[1]
    )
    if not ok:
        raise study.must(
            "metric_bounds",
            "two finite numbers [low, high] with low < high",
            value,
            "e.g. metric_bounds = [0.0, 1.0] for an accuracy",
        )
    return float(value[0]), float(value[1])


def _random_level(study: Section, bounds: tuple[float, float]) -> float | None:
    value = study.get("random_level", None, "")
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not bounds[0] <= value <= bounds[1]
    ):
        raise study.must("random_level", f"a number within metric_bounds {list(bounds)}", value)
    return float(value)


def _entry_point(text: str, study: Section) -> EntryPoint:
    target, sep, function = text.rpartition(":")
    form = 'write "train.py:train" (a file next to study.toml) or "package.module:train"'
    if not sep or not target or not _DOTTED_RE.fullmatch(function):
        raise study.must("entry_point", "of the form <file.py or module>:<function>", text, form)
    if target.endswith(".py"):
        file = Path(target).expanduser()
        if not file.is_absolute():
            file = study.path.parent / file
        file = Path(os.path.abspath(file))
        if not file.is_file():
            raise study.error(
                "entry_point",
                f"the file {file} named by `study.entry_point` ({text!r}) does not exist; "
                "relative paths are relative to the study.toml's folder",
            )
        return EntryPoint(file=file, module=None, function=function)
    if not _DOTTED_RE.fullmatch(target):
        raise study.must("entry_point", "of the form <file.py or module>:<function>", text, form)
    return EntryPoint(file=None, module=target, function=function)


def _directory(
    study: Section, name: str, override: str | Path | None, now: datetime | None
) -> Path:
    if override is not None:
        template, base = str(override), Path.cwd()
    else:
        template = study.string("directory", DEFAULT_DIRECTORY)
        base = study.path.parent
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    values = {"name": name, "timestamp": stamp}

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise study.error(
                "directory",
                f"unknown placeholder {{{key}}} in {template!r}; valid placeholders: "
                "{name}, {timestamp}",
            )
        return values[key]

    path = Path(re.sub(r"\{([^{}]*)\}", fill, template)).expanduser()
    if not path.is_absolute():
        path = base / path
    return Path(os.path.abspath(path))
