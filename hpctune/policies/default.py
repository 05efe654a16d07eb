"""HyperDrive's Default policy: fill every free slot, run every trial to its last step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hpctune.policies._base import (
    Event,
    EventKind,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
)


@dataclass(frozen=True)
class DefaultOptions:
    """The Default policy has no options."""


class DefaultPolicy(Policy):
    """Start trials greedily on idle workers and run each to its maximum (HyperDrive §4.2).

    It ignores reports and boundaries ("Default SAP"), so workers never wait for a decision.
    """

    name: ClassVar[str] = "default"
    traits: ClassVar[PolicyTraits] = PolicyTraits(
        boundary_decisions=False,
        wants_boundaries=False,
        admits_every_trial=True,
        runs_on_stage_trees=True,
    )
    Options = DefaultOptions

    def __init__(self, context: StudyContext, options: DefaultOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or DefaultOptions()

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill free slots on SLOT_FREE; let everything else run."""
        if event.kind is EventKind.SLOT_FREE:
            return PolicyDecision.of(self.fill_slots(view, event.free_slots))
        return PolicyDecision()
