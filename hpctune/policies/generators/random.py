"""Random search: every trial's configuration drawn independently from the search space."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from hpctune.policies.generators._base import Generator
from hpctune.study.seeding import index_rng

if TYPE_CHECKING:
    from hpctune.policies._base import StudyView
    from hpctune.study.space import SearchSpace


@dataclass(frozen=True)
class RandomOptions:
    """The random generator has no options."""


class RandomGenerator(Generator):
    """Trial ``index`` gets ``space.sample(index_rng(seed, index))``; unbounded."""

    name: ClassVar[str] = "random"
    Options = RandomOptions

    def __init__(
        self, space: SearchSpace, seed: int, options: RandomOptions | None = None
    ) -> None:
        super().__init__(space, seed, options or RandomOptions())

    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        """Return the ``index``-th random configuration (a function of seed and index only)."""
        return self.space.sample(index_rng(self.seed, index))
