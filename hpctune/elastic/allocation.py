"""Allocations: how many devices each stage gets, and the fair split among its trials.

An elastic allocation is RubberBand's vector ``a`` (§4: ``a_i`` devices for stage ``i``, shared
fairly by its trials). Fair means every trial gets the same devices and every worker the same
number of trials: ``a_i`` is a multiple of the stage's trial count (``a_i / n`` devices each,
all trials at once) or a factor of it (``a_i`` one-device workers, ``n / a_i`` trials each, one
after another) — the values the planner's step sizes keep (§4.3). A static allocation holds
``A`` devices for the whole study and divides them among each stage's trials as well as it can
(the baseline of §3.2).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hpctune.elastic.experiment import ExperimentSpec, PlanningError


@dataclass(frozen=True)
class StageShape:
    """How one stage runs: ``workers`` workers of ``devices`` devices, one trial at a time each.

    Attributes:
        devices: Devices per trial (and per worker).
        workers: Workers at once; each runs ``ceil(trials / workers)`` trials or fewer in turn.
    """

    devices: int
    workers: int

    @property
    def pool(self) -> int:
        """Devices the stage's workers hold."""
        return self.devices * self.workers


@dataclass(frozen=True)
class Allocation:
    """The shape of every stage, and for a static plan the pool held throughout.

    Attributes:
        shapes: One per stage of the experiment.
        static_pool: Devices held from the start to the end (a static plan); ``None``: an
            elastic plan, whose workers come and go with the stages.
    """

    shapes: tuple[StageShape, ...]
    static_pool: int | None = None

    @property
    def vector(self) -> tuple[int, ...]:
        """Devices held in each stage (the paper's allocation vector)."""
        if self.static_pool is not None:
            return tuple(self.static_pool for _ in self.shapes)
        return tuple(s.pool for s in self.shapes)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "shapes": [[s.devices, s.workers] for s in self.shapes],
            "static_pool": self.static_pool,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Allocation:
        """Rebuild from :meth:`to_dict`."""
        pool = data.get("static_pool")
        return cls(
            tuple(StageShape(int(d), int(w)) for d, w in data["shapes"]),
            None if pool is None else int(pool),
        )


def device_sizes(max_devices: int, node_devices: int | None = None) -> tuple[int, ...]:
    """The devices a trial may get: ``1..max_devices``; with ``node_devices``, sizes above a
    node's only in whole nodes (a trial larger than a node takes whole nodes, §4.4)."""
    if max_devices < 1:
        raise PlanningError(f"max devices per trial must be >= 1, but got {max_devices}")
    sizes = range(1, max_devices + 1)
    if node_devices is None:
        return tuple(sizes)
    return tuple(g for g in sizes if g <= node_devices or g % node_devices == 0)


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def fair_values(trials: int, sizes: Sequence[int], max_pool: int | None = None) -> list[int]:
    """The fair stage allocations for ``trials`` trials, ascending: the factors of ``trials``
    and ``trials * g`` for every allowed size ``g``, up to ``max_pool``."""
    values = {*divisors(trials), *(trials * g for g in sizes)}
    return sorted(v for v in values if max_pool is None or v <= max_pool)


def step_down(trials: int, current: int, sizes: Sequence[int]) -> int | None:
    """The next fair allocation below ``current`` (the planner's step), or ``None`` at one."""
    lower = [v for v in fair_values(trials, sizes) if v < current]
    return lower[-1] if lower else None


def round_down(trials: int, devices: int, sizes: Sequence[int]) -> int:
    """The largest fair allocation at most ``devices`` (at least 1)."""
    lower = [v for v in fair_values(trials, sizes) if v <= devices]
    return lower[-1] if lower else 1


def elastic_shape(trials: int, devices: int, sizes: Sequence[int]) -> StageShape:
    """The shape of a stage given ``devices`` (rounded down to a fair value)."""
    a = round_down(trials, devices, sizes)
    if a >= trials:
        return StageShape(a // trials, trials)
    return StageShape(1, a)


def static_shape(trials: int, pool: int, sizes: Sequence[int]) -> StageShape:
    """How a static pool of ``pool`` devices runs a stage: every trial at once with the most
    allowed devices that fit (the rest of the pool idles), or one device per trial in waves."""
    if pool >= trials:
        fit = [g for g in sizes if g * trials <= pool]
        return StageShape(max(fit) if fit else 1, trials)
    return StageShape(1, pool)


def elastic_allocation(
    spec: ExperimentSpec, vector: Iterable[int], sizes: Sequence[int]
) -> Allocation:
    """The elastic allocation of ``vector`` (each entry rounded down to a fair value)."""
    values = list(vector)
    if len(values) != spec.num_stages():
        raise PlanningError(
            f"an allocation needs one value per stage ({spec.num_stages()}), got {len(values)}"
        )
    return Allocation(
        tuple(
            elastic_shape(st.trials, a, sizes) for st, a in zip(spec.stages, values, strict=True)
        )
    )


def static_allocation(spec: ExperimentSpec, pool: int, sizes: Sequence[int]) -> Allocation:
    """The static allocation of ``pool`` devices."""
    return Allocation(tuple(static_shape(st.trials, pool, sizes) for st in spec.stages), pool)


def static_pools(spec: ExperimentSpec, sizes: Sequence[int], max_pool: int) -> list[int]:
    """The pool sizes worth trying for a static plan, ascending: those where some stage's shape
    changes (between two of them the time is the same and the cost higher)."""
    candidates = {1}
    for st in spec.stages:
        candidates.update(range(1, min(st.trials, max_pool) + 1))
        candidates.update(st.trials * g for g in sizes)
    return sorted(p for p in candidates if p <= max_pool)


__all__ = [
    "Allocation",
    "StageShape",
    "device_sizes",
    "divisors",
    "elastic_allocation",
    "elastic_shape",
    "fair_values",
    "round_down",
    "static_allocation",
    "static_pools",
    "static_shape",
    "step_down",
]
