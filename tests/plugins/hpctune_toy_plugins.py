"""A third-party policy, generator and curve model for hpctune, as another package would ship
them (tests only).

Each is found by ``MODULE:CLASS`` (``hpctune_toy_plugins:ToyPolicy`` with this folder on the
path) or by the name its entry point registers (``toy``, ``backwards``, ``flat``); nothing
inside ``hpctune/`` names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hpctune.curves import LEVELS, CurvePrediction, CurveRequest, FitOptions, unknown_prediction
from hpctune.curves.fit import normalise
from hpctune.policies import (
    Action,
    ActionKind,
    Event,
    EventKind,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
)
from hpctune.policies.generators import Generator
from hpctune.study.space import SearchSpace


@dataclass(frozen=True)
class ToyOptions:
    """Options of :class:`ToyPolicy`.

    Attributes:
        priority: The priority of every trial it starts (journaled with the trial).
    """

    priority: float = 5.0


class ToyPolicy(Policy):
    """Default's rule (fill every free slot, run every trial to its end), starting trials with
    its own priority and counting them in its state."""

    name: ClassVar[str] = "toy"
    traits: ClassVar[PolicyTraits] = PolicyTraits(boundary_decisions=False, wants_boundaries=False)
    Options = ToyOptions

    def __init__(self, context: StudyContext, options: ToyOptions | None = None) -> None:
        super().__init__(context)
        self.options = options or ToyOptions()
        self.started = 0

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        """Fill free slots on SLOT_FREE, new trials with :attr:`ToyOptions.priority`."""
        if event.kind is not EventKind.SLOT_FREE:
            return PolicyDecision()
        actions = [
            Action.start(priority=self.options.priority) if a.kind is ActionKind.START else a
            for a in self.fill_slots(view, event.free_slots)
        ]
        self.started += sum(a.kind is ActionKind.START for a in actions)
        return PolicyDecision.of(actions)

    def state_dict(self) -> dict[str, Any]:
        """How many trials it started."""
        return {"started": self.started}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.started = int(state.get("started", 0))


class NotAPolicy:
    """A class that is no :class:`Policy`, generator or curve model."""


@dataclass(frozen=True)
class BackwardsOptions:
    """:class:`BackwardsGenerator` has no options."""


class BackwardsGenerator(Generator):
    """The grid, last point first."""

    name: ClassVar[str] = "backwards"
    Options = BackwardsOptions

    def __init__(
        self, space: SearchSpace, seed: int, options: BackwardsOptions | None = None
    ) -> None:
        super().__init__(space, seed, options or BackwardsOptions())
        self._size = space.require_grid()

    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        """The grid point ``size - 1 - index`` (wrapping around)."""
        return self.space.grid_point((self._size - 1 - index) % self._size)

    def size(self) -> int:
        """The grid's size."""
        return self._size


class FlatModel:
    """A curve model that predicts the last value forever, with no spread."""

    name: ClassVar[str] = "flat"
    min_points: ClassVar[int] = 1
    batched: ClassVar[bool] = True

    def predict(
        self, requests: Sequence[CurveRequest], options: FitOptions
    ) -> list[CurvePrediction]:
        """The last observed value at every epoch to come."""
        out = []
        for r in requests:
            n = len(r.y)
            if n < max(options.min_points, self.min_points) or n >= r.x_max:
                out.append(unknown_prediction(r, f"{n} points, horizon {r.x_max}"))
                continue
            u = float(np.clip(normalise(r.y[-1], r.bounds, r.mode), 0.0, 1.0))
            quantiles = np.full((r.x_max - n, len(LEVELS)), u)
            out.append(
                CurvePrediction(
                    n=n,
                    x_max=r.x_max,
                    bounds=r.bounds,
                    mode=r.mode,
                    u_quantiles=quantiles,
                    sigma=0.0,
                )
            )
        return out


class NoPredict:
    """A would-be curve model without ``predict``."""

    name = "nopredict"
    min_points = 3
    batched = True
