"""Grid search: the cartesian product of the parameters' grids, in order or shuffled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hpctune.policies.generators._base import Generator

if TYPE_CHECKING:
    from hpctune.policies._base import StudyView
    from hpctune.study.space import SearchSpace


@dataclass(frozen=True)
class GridOptions:
    """Options of the grid generator.

    Attributes:
        shuffle: Visit the grid in a random order (seeded), so that a study stopped early has
            covered the grid evenly rather than its first rows.
    """

    shuffle: bool = False


class GridGenerator(Generator):
    """Trial ``index`` gets grid point ``perm[index]`` (``perm`` the identity unless shuffled).

    Raises:
        NoGridError: (from the constructor) a parameter is a range without ``grid_points``.
    """

    name: ClassVar[str] = "grid"
    Options = GridOptions

    def __init__(self, space: SearchSpace, seed: int, options: GridOptions | None = None) -> None:
        super().__init__(space, seed, options or GridOptions())
        self._size = space.require_grid()
        self._perm: np.ndarray | None = None
        if self.options.shuffle:
            self._perm = np.random.default_rng(np.random.SeedSequence(seed)).permutation(
                self._size
            )

    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        """Return grid point ``perm[index]``.

        Raises:
            IndexError: ``index`` is not below :meth:`size`.
        """
        if not 0 <= index < self._size:
            raise IndexError(f"the grid has {self._size} points, but trial index {index} asked")
        position = index if self._perm is None else int(self._perm[index])
        return self.space.grid_point(position)

    def size(self) -> int:
        """Return the number of grid points."""
        return self._size
