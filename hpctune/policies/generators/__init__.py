"""Configuration generators: what the next new trial's hyperparameters are.

Generators are separate from policies (HyperDrive's Hyperparameter Generator). Each is a
:class:`Generator` with a ``name``, options (an ``Options`` dataclass, parsed by
:meth:`Generator.parse`) and the constructor ``(space, seed, options)``; :func:`make_generator`
builds one from the ``[generator]`` table. ``random`` and ``grid`` are hpctune's own; ``tpe``,
``cmaes``, ``gp``, ``qmc``, ``nsga2`` and ``optuna`` (any of them, or Optuna's random sampler,
with ``sampler = ...``) are Optuna's samplers fed from the journal (:mod:`.optuna_sampler`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hpctune.policies._base import OptionError
from hpctune.policies.generators._base import Generator, Proposal
from hpctune.policies.generators.grid import GridGenerator, GridOptions
from hpctune.policies.generators.optuna_sampler import NAMED, OptunaGenerator, OptunaOptions
from hpctune.policies.generators.random import RandomGenerator, RandomOptions
from hpctune.study.states import Mode

if TYPE_CHECKING:
    from hpctune.study.space import SearchSpace

GENERATORS: Mapping[str, type[Generator]] = {
    RandomGenerator.name: RandomGenerator,
    GridGenerator.name: GridGenerator,
    **NAMED,
    OptunaGenerator.name: OptunaGenerator,
}


def make_generator(
    name: str, options: Mapping[str, Any], space: SearchSpace, seed: int
) -> Generator:
    """Build the generator ``name`` with ``options`` (the ``[generator]`` table without ``name``).

    Args:
        name: A key of :data:`GENERATORS`.
        options: The generator's options.
        space: The study's search space.
        seed: The generator's seed, ``component_seed(study_seed, "generator")`` in a study.

    Raises:
        OptionError: The name is unknown (``key`` is ``"name"``) or an option is invalid.
        NoGridError: The grid generator was asked for a space with a range without a grid.
    """
    if name not in GENERATORS:
        raise OptionError(
            "name", f"unknown generator {name!r}; known generators: {', '.join(GENERATORS)}"
        )
    cls = GENERATORS[name]
    return cls(space, seed, cls.parse(options))


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
    from hpctune.policies._base import StudyView, TrialView
    from hpctune.study.states import TrialStatus

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
    "make_generator",
]
