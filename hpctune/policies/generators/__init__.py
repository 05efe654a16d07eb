"""Configuration generators: what the next new trial's hyperparameters are.

Generators are separate from policies (HyperDrive's Hyperparameter Generator). Each is a
:class:`Generator` with a ``name``, options (an ``Options`` dataclass, parsed by
:meth:`Generator.parse`) and the constructor ``(space, seed, options)``; :func:`make_generator`
builds one from the ``[generator]`` table, by a name of :mod:`.registry` (hpctune's own, another
package's, or ``MODULE:CLASS``). ``random`` and ``grid`` are hpctune's own; ``tpe``,
``cmaes``, ``gp``, ``qmc``, ``nsga2`` and ``optuna`` (any of them, or Optuna's random sampler,
with ``sampler = ...``) are Optuna's samplers fed from the journal (:mod:`.optuna_sampler`).
"""

from __future__ import annotations

from typing import Any

from hpctune.policies._base import StudyView, TrialView
from hpctune.policies.generators._base import Generator, Proposal
from hpctune.policies.generators.grid import GridGenerator, GridOptions
from hpctune.policies.generators.optuna_sampler import OptunaGenerator, OptunaOptions
from hpctune.policies.generators.random import RandomGenerator, RandomOptions
from hpctune.policies.generators.registry import (
    GENERATORS,
    generator_class,
    generator_names,
    make_generator,
)
from hpctune.study.states import Mode, TrialStatus


def first_proposals(
    generator: Generator,
    count: int,
    *,
    metric: str,
    mode: Mode,
    max_steps: int,
    objectives: tuple[tuple[str, str], ...] = (),
) -> list[dict[str, Any]]:
    """The generator's first ``count`` configurations, as a study with no results makes them.

    A model-based generator sees each earlier proposal as a queued trial (as the controller
    filling ``count`` slots at once does); the others draw by index.
    """
    trials: dict[int, TrialView] = {}
    out = []
    for index in range(count):
        view = StudyView(
            metric=metric,
            mode=mode,
            max_steps=max_steps,
            boundary=1,
            now=0.0,
            trials=dict(trials),
            free_slots=count - index,
            total_slots=count,
            trials_remaining=None,
            objectives=objectives,
        )
        proposal = generator.propose(index, None if generator.predictable else view)
        trials[index] = TrialView(index, TrialStatus.QUEUED, proposal.params, info=proposal.info)
        out.append(proposal.params)
    return out


__all__ = [
    "GENERATORS",
    "Generator",
    "GridGenerator",
    "GridOptions",
    "OptunaGenerator",
    "OptunaOptions",
    "Proposal",
    "RandomGenerator",
    "RandomOptions",
    "first_proposals",
    "generator_class",
    "generator_names",
    "make_generator",
]
