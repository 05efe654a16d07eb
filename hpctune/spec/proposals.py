"""The configurations a study's generator proposes first, before any result (what ``hpctune
launch --dry-run`` shows and ``hpctune plan`` cuts into stages)."""

from __future__ import annotations

from typing import Any

from hpctune.policies.generators import Generator, first_proposals, make_generator
from hpctune.spec.model import StudySpec
from hpctune.study.seeding import component_seed


def study_generator(spec: StudySpec) -> Generator:
    """The study's generator, seeded from the study's seed as its controller seeds it.

    Raises:
        OptionError: The generator refuses the study's search space or options.
    """
    seed = component_seed(spec.seed, "generator")
    return make_generator(spec.generator.name, spec.generator.options, spec.space, seed)


def first_configs(
    spec: StudySpec, count: int, generator: Generator | None = None
) -> list[dict[str, Any]]:
    """The first ``count`` configurations of the study's generator (``generator``: one built
    with :func:`study_generator`), as a study with no results yet gets them."""
    return first_proposals(
        generator or study_generator(spec),
        count,
        metric=spec.metric,
        mode=spec.mode,
        max_steps=spec.max_steps,
        objectives=spec.objectives,
    )


__all__ = ["first_configs", "study_generator"]
