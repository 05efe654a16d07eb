"""The generator interface: configurations proposed for new trials, separate from scheduling.

As HyperDrive separates its Hyperparameter Generator from its scheduling policy, a generator only
answers "what is the configuration of the ``index``-th new trial". It is pure and deterministic in
``(seed, index)`` (and, for model-based generators, the view), so a restarted controller proposes
exactly what the killed one would have. Generators whose proposals depend on the trials so far
(:attr:`Generator.predictable` false: the Optuna samplers) get the view; the others ignore it.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from hpctune.policies._base import OptionError, parse_options

if TYPE_CHECKING:
    from hpctune.policies._base import StudyView
    from hpctune.study.space import SearchSpace


@dataclass(frozen=True)
class Proposal:
    """A generator's answer: the configuration and what to journal with the trial.

    Attributes:
        params: The configuration (JSON-able).
        info: JSON-able data journaled with the trial (``TrialRecord.info``) and given back in
            the view (``TrialView.info``): a model-based generator's sampler state.
    """

    params: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)


class Generator(abc.ABC):
    """Base class of configuration generators.

    Args:
        space: The study's search space.
        seed: The generator's seed (derived from the study's master seed).
        options: The parsed options dataclass of the subclass.
    """

    name: ClassVar[str] = ""
    predictable: ClassVar[bool] = True  # proposals depend on (seed, index) only, not the view

    def __init__(self, space: SearchSpace, seed: int, options: Any = None) -> None:
        self.space = space
        self.seed = seed
        self.options = options

    @abc.abstractmethod
    def suggest(self, index: int, view: StudyView | None = None) -> dict[str, Any]:
        """Return the hyperparameters of the ``index``-th new trial (0-based), JSON-able."""

    def propose(self, index: int, view: StudyView | None = None) -> Proposal:
        """Return the ``index``-th proposal with what to journal (default: no info)."""
        return Proposal(self.suggest(index, view))

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> Any:
        """Parse the ``[generator]`` table without ``name`` into the options object: its
        ``Options`` dataclass (:func:`~hpctune.policies.parse_options`), or ``None`` for a
        generator without one (which takes no options).

        Raises:
            OptionError: An option is unknown or invalid (``key`` names which).
        """
        options_type = getattr(cls, "Options", None)
        if options_type is None:
            for key in options:
                raise OptionError(
                    key, f"unknown option; {cls.__name__} has no Options dataclass, so no options"
                )
            return None
        return parse_options(options_type, options)

    def objectives_problem(self, count: int) -> str:
        """Why the generator cannot serve a study of ``count`` objectives ("" if it can)."""
        return ""

    def size(self) -> int | None:
        """Return how many distinct configurations there are, ``None`` if unbounded."""
        return None
