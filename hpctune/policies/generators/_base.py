"""The generator interface: configurations proposed for new trials, separate from scheduling.

As HyperDrive separates its Hyperparameter Generator from its scheduling policy, a generator only
answers "what is the configuration of the ``index``-th new trial". It is pure and deterministic in
``(seed, index)`` (and, for model-based generators, the view), so a restarted controller proposes
exactly what the killed one would have.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from hpctune.policies._base import StudyView
    from hpctune.space import SearchSpace


class Generator(abc.ABC):
    """Base class of configuration generators.

    Args:
        space: The study's search space.
        seed: The generator's seed (derived from the study's master seed).
        options: The parsed options dataclass of the subclass.
    """

    name: ClassVar[str] = ""

    def __init__(self, space: SearchSpace, seed: int, options: Any = None) -> None:
        self.space = space
        self.seed = seed
        self.options = options

    @abc.abstractmethod
    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        """Return the hyperparameters of the ``index``-th new trial (0-based), JSON-able."""

    def size(self) -> int | None:
        """Return how many distinct configurations there are, ``None`` if unbounded."""
        return None
