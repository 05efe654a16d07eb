"""Synchronous successive halving (SHA): brackets of the most exploratory Hyperband shape.

Jamieson & Talwalkar, "Non-stochastic Best Arm Identification and Hyperparameter Optimization"
(AISTATS 2016), as the bracket ``s = s_max`` of Li et al., "Hyperband" (JMLR 2018, Algorithm 1):
``eta**s_max`` trials train to ``max_t * eta**-s_max`` steps, the top ``1/eta`` go on to ``eta``
times more, and so on up to ``max_t``. Defaults follow Syne Tune's synchronous successive
halving (``SynchronousHyperbandScheduler`` with one bracket: ``grace_period=1``,
``reduction_factor=3``) and Ray's ``HyperBandScheduler`` (``reduction_factor=3``).
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
class ShaOptions:
    """Options of :class:`ShaPolicy`.

    Attributes:
        reduction_factor: η: each rung keeps the top ``floor(n / η)`` (Syne Tune, Ray: 3).
        grace_period: The least steps of the first rung (Li et al.'s ``r``; Syne Tune: 1).
        max_t: Steps of the last rung; ``None``: the study's ``max_steps``.
        bracket_size: Trials per bracket; ``None``: ``η**s_max`` (Li et al.'s largest bracket).
    """

    reduction_factor: int = 3
    grace_period: int = 1
    max_t: int | None = None
    bracket_size: int | None = None


class ShaPolicy(SyncHalvingPolicy):
    """Synchronous successive halving, one bracket after another (see :mod:`._halving`).

    Rungs at ``max_t // η**(s_max - i)`` steps; a rung is evaluated when all its trials have
    reached it, promoting exactly the top ``floor(n / η)``. Trials of the next bracket start as
    soon as slots are free, so slots do not wait for a bracket's stragglers. Use it when
    configurations are only comparable at equal training length, or to reproduce SHA results.
    """

    name: ClassVar[str] = "sha"
    Options = ShaOptions

    def __init__(self, context: StudyContext, options: ShaOptions | None = None) -> None:
        self.options = options or ShaOptions()
        o = self.options
        require("reduction_factor", o.reduction_factor, 2)
        require("grace_period", o.grace_period, 1)
        if o.max_t is not None:
            require("max_t", o.max_t, o.grace_period, f" (grace_period {o.grace_period})")
        if o.bracket_size is not None:
            require("bracket_size", o.bracket_size, 1)
        super().__init__(context, o.max_t, o.reduction_factor)

    def shapes(self, max_t: int) -> list[BracketShape]:
        """One shape: ``s = s_max``, ``η**s_max`` trials (or ``bracket_size``)."""
        o = self.options
        s = max_bracket(o.grace_period, o.reduction_factor, max_t)
        size = o.bracket_size or o.reduction_factor**s
        return [
            BracketShape(s, size, bracket_milestones(s, o.reduction_factor, max_t, o.grace_period))
        ]
