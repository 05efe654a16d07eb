"""The optional ``[curves]`` section of study.toml: where and how learning-curve fits run.

Only policies that want predictions (POP, EarlyTerm) cause fits; for the others the section is
checked and otherwise ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from hpctune.errors import StudySpecError, check_table_keys

Backend = Literal["auto", "pool", "slurm"]
BACKENDS: tuple[Backend, ...] = ("auto", "pool", "slurm")
BUDGET_NAMES = ("hyperdrive", "domhan")
CurveModelName = Literal["amortised", "domhan"]
#: The curve models: the amortised network (default) and Domhan et al.'s MCMC (the paper's).
MODEL_NAMES: tuple[CurveModelName, ...] = ("amortised", "domhan")
CURVES_KEYS = ("model", "backend", "workers", "budget", "task_seconds")


@dataclass(frozen=True)
class CurvesSpec:
    """How a study fits learning curves.

    Attributes:
        model: The curve model: ``"amortised"`` (a network trained on curves from a prior, one
            pass per batch of curves; the default) or ``"domhan"`` (Domhan et al.'s model
            sampled by MCMC, as HyperDrive; ``budget`` applies to it only).
        backend: ``"pool"``: a process pool in the controller's process; ``"slurm"``: Slurm job
            arrays (submitit ``map_array``, several curves per task); ``"auto"``: Slurm arrays
            when the controller runs in a Slurm job and the backlog of pending fits would keep
            the pool busy longer than ``task_seconds``, the pool otherwise.
        workers: Processes of the pool (spawned on first use).
        budget: MCMC budget of the ``domhan`` model: ``"hyperdrive"`` (100 walkers x 700
            steps) or ``"domhan"`` (100 x 3600).
        task_seconds: Wall-clock seconds one Slurm array task should run; the number of curves
            per task is this divided by the measured seconds per fit.
    """

    model: CurveModelName = "amortised"
    backend: Backend = "auto"
    workers: int = 1
    budget: str = "hyperdrive"
    task_seconds: float = 60.0

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
        )


def parse_curves(table: Mapping[str, Any], path: Path) -> CurvesSpec:
    """Check the ``[curves]`` table.

    Raises:
        StudySpecError: naming ``curves.<key>``, with what must hold and what was given.
    """
    check_table_keys(table, CURVES_KEYS, "curves", path)
    default = CurvesSpec()
    model = table.get("model", default.model)
    if model not in MODEL_NAMES:
        raise StudySpecError(
            path,
            "curves.model",
            f"`curves.model` must be one of {', '.join(repr(m) for m in MODEL_NAMES)} (the "
            f"amortised network or Domhan et al.'s MCMC), but got {model!r}",
        )
    backend = table.get("backend", default.backend)
    if backend not in BACKENDS:
        raise StudySpecError(
            path,
            "curves.backend",
            f"`curves.backend` must be one of {', '.join(repr(b) for b in BACKENDS)}, "
            f"but got {backend!r}",
        )
    workers = table.get("workers", default.workers)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise StudySpecError(
            path,
            "curves.workers",
            f"`curves.workers` must be an integer >= 1 (processes of the controller's fit pool), "
            f"but got {workers!r}",
        )
    budget = table.get("budget", default.budget)
    if budget not in BUDGET_NAMES:
        raise StudySpecError(
            path,
            "curves.budget",
            f"`curves.budget` must be one of {', '.join(repr(b) for b in BUDGET_NAMES)} "
            f"(100 x 700 or 100 x 3600 MCMC steps), but got {budget!r}",
        )
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
    return CurvesSpec(
        model=model,
        backend=backend,
        workers=workers,
        budget=budget,
        task_seconds=float(task_seconds),
    )
