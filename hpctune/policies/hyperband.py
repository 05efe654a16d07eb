"""Hyperband, synchronous: brackets of successive halving with different aggressiveness.

Li et al., "Hyperband: A Novel Bandit-Based Approach to Hyperparameter Optimization" (JMLR 2018),
Algorithm 1: with ``R = max_t`` and ``s_max = floor(log_eta(R / r_min))``, bracket ``s`` (from
``s_max`` down to 0, then again) starts ``n = ceil((s_max + 1) / (s + 1) * eta**s)`` trials at
``R * eta**-s`` steps and runs successive halving inside. Synchronous as Ray Tune's
``HyperBandScheduler`` (``hyperband.py``, default ``reduction_factor=3``): a bracket's trials
pause (here: suspend with their checkpoint) at each milestone until all have arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpctune.policies._base import StudyContext
from hpctune.policies._common import require
from hpctune.policies._halving import (
    BracketShape,
    SyncHalvingPolicy,
    bracket_milestones,
    max_bracket,
)


@dataclass(frozen=True)
class HyperbandOptions:
    """Options of :class:`HyperbandPolicy`.

    Attributes:
        reduction_factor: η (Ray, Li et al.: 3).
        grace_period: Li et al.'s ``r_min``, the least steps of any rung (1).
        max_t: Li et al.'s ``R``; ``None``: the study's ``max_steps`` (Ray: 81).
    """

    reduction_factor: int = 3
    grace_period: int = 1
    max_t: int | None = None


class HyperbandPolicy(SyncHalvingPolicy):
    """Synchronous Hyperband (see :mod:`._halving` for the bracket mechanics).

    Brackets open in Li et al.'s order, the most exploratory (``s = s_max``) first; several
    run at once, new trials joining the newest. Use it when you do not know how early
    configurations can be judged: it hedges between aggressive and conservative halving.
    """

    name: ClassVar[str] = "hyperband"
    Options = HyperbandOptions

    def __init__(self, context: StudyContext, options: HyperbandOptions | None = None) -> None:
        self.options = options or HyperbandOptions()
        o = self.options
        require("reduction_factor", o.reduction_factor, 2)
        require("grace_period", o.grace_period, 1)
        if o.max_t is not None:
            require("max_t", o.max_t, o.grace_period, f" (grace_period {o.grace_period})")
        super().__init__(context, o.max_t, o.reduction_factor)

    def shapes(self, max_t: int) -> list[BracketShape]:
        """Brackets ``s = s_max .. 0`` with Li et al.'s sizes and resources."""
        o = self.options
        eta = o.reduction_factor
        s_max = max_bracket(o.grace_period, eta, max_t)
        return [
            BracketShape(
                s,
                -(-((s_max + 1) * eta**s) // (s + 1)),  # ceil((s_max + 1) / (s + 1) * eta**s)
                bracket_milestones(s, eta, max_t, o.grace_period),
            )
            for s in range(s_max, -1, -1)
        ]
