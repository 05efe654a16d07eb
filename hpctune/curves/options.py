"""The optional ``[curves]`` section of study.toml: where and how learning-curve fits run.

Only policies that want predictions (POP, EarlyTerm, hybrid) cause fits; for the others the
section is checked and otherwise ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from hpctune.curves.registry import check_curve_model
from hpctune.errors import StudySpecError, check_table_keys
from hpctune.plugins import PluginError

Backend = Literal["auto", "pool", "jobs", "slurm"]
BACKENDS: tuple[Backend, ...] = ("auto", "pool", "jobs", "slurm")
#: The values of ``backend`` that send fits to the study's backend's jobs (``slurm``: the name
#: from before backends were plug-ins).
JOB_BACKENDS = ("jobs", "slurm")
BUDGET_NAMES = ("hyperdrive", "domhan")
CURVES_KEYS = ("model", "backend", "workers", "budget", "task_seconds", "recalibrate")
#: ``recalibrate``: none, the spread only (symmetric), the full map (spread and median).
RECALIBRATIONS = ("none", "spread", "full")


@dataclass(frozen=True)
class CurvesSpec:
    """How a study fits learning curves.

    Attributes:
        model: The curve model (:mod:`hpctune.curves.registry`): ``"amortised"`` (a network
            trained on curves from a prior, one pass per batch of curves; the default),
            ``"domhan"`` (Domhan et al.'s model sampled by MCMC, as HyperDrive; ``budget``
            applies to it only), another package's, or an importable ``MODULE:CLASS``.
        backend: ``"pool"``: a process pool in the controller's process; ``"jobs"`` (or
            ``"slurm"``): job arrays of the study's backend (on Slurm: submitit ``map_array``,
            several curves per task); ``"auto"``: job arrays when the controller runs in a job
            of its backend and the backlog of pending fits would keep the pool busy longer than
            ``task_seconds``, the pool otherwise.
        workers: Processes of the pool (spawned on first use).
        budget: MCMC budget of the ``domhan`` model: ``"hyperdrive"`` (100 walkers x 700
            steps) or ``"domhan"`` (100 x 3600).
        task_seconds: Wall-clock seconds one Slurm array task should run; the number of curves
            per task is this divided by the measured seconds per fit.
        recalibrate: Recalibrate the predictions the policy gets with the PITs of the study's
            earlier predictions at the values their trials reached later
            (:class:`~hpctune.curves.calibration.StudyCalibration`): ``"none"``, ``"spread"``
            (the intervals' width only) or ``"full"`` (width and median).
    """

    model: str = "amortised"
    backend: Backend = "auto"
    workers: int = 1
    budget: str = "hyperdrive"
    task_seconds: float = 60.0
    recalibrate: str = "none"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CurvesSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(
            # a journaled spec without it predates the option: it used Domhan's model
            model=data.get("model", "domhan"),
            backend=data.get("backend", "auto"),
            workers=int(data.get("workers", 1)),
            budget=str(data.get("budget", "hyperdrive")),
            task_seconds=float(data.get("task_seconds", 60.0)),
            recalibrate=str(data.get("recalibrate", "none")),
        )


def _one_of(
    table: Mapping[str, Any], key: str, choices: tuple[str, ...], why: str, path: Path
) -> Any:
    """``table[key]`` (the default if absent), which must be one of ``choices``.

    Raises:
        StudySpecError: naming ``curves.<key>``, the choices, ``why`` and what was given.
    """
    value = table.get(key, getattr(CurvesSpec(), key))
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise StudySpecError(
            path,
            f"curves.{key}",
            f"`curves.{key}` must be one of {listed}{f' ({why})' if why else ''}, "
            f"but got {value!r}",
        )
    return value


def _curve_model(model: Any, path: Path) -> str:
    """``[curves] model``: a registered curve model or an importable ``MODULE:CLASS``.

    Raises:
        StudySpecError: naming ``curves.model``, with a close match and the known names.
    """
    if not isinstance(model, str):
        raise StudySpecError(
            path,
            "curves.model",
            f'`curves.model` must be a curve model\'s name (e.g. "amortised"), but got {model!r}',
        )
    try:
        return check_curve_model(model)
    except PluginError as exc:
        raise StudySpecError(path, "curves.model", str(exc)) from None


def parse_curves(table: Mapping[str, Any], path: Path) -> CurvesSpec:
    """Check the ``[curves]`` table.

    Raises:
        StudySpecError: naming ``curves.<key>``, with what must hold and what was given.
    """
    check_table_keys(table, CURVES_KEYS, "curves", path)
    default = CurvesSpec()
    model = _curve_model(table.get("model", default.model), path)
    backend = _one_of(table, "backend", BACKENDS, "", path)
    workers = table.get("workers", default.workers)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise StudySpecError(
            path,
            "curves.workers",
            f"`curves.workers` must be an integer >= 1 (processes of the controller's fit pool), "
            f"but got {workers!r}",
        )
    budget = _one_of(table, "budget", BUDGET_NAMES, "100 x 700 or 100 x 3600 MCMC steps", path)
    task_seconds = table.get("task_seconds", default.task_seconds)
    if (
        not isinstance(task_seconds, int | float)
        or isinstance(task_seconds, bool)
        or not math.isfinite(task_seconds)
        or task_seconds < 1
    ):
        raise StudySpecError(
            path,
            "curves.task_seconds",
            "`curves.task_seconds` must be a number of seconds >= 1 (how long one Slurm array "
            f"task of curve fits should run, e.g. 60), but got {task_seconds!r}",
        )
    recalibrate = _one_of(
        table,
        "recalibrate",
        RECALIBRATIONS,
        "recalibrate the policy's predictions with the study's own curves: not at all, the "
        "intervals' width only, or width and median",
        path,
    )
    return CurvesSpec(
        model=model,
        backend=backend,
        workers=workers,
        budget=budget,
        task_seconds=float(task_seconds),
        recalibrate=recalibrate,
    )
