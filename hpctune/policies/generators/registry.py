"""The generator registry: a generator found by its name, hpctune's own or another package's.

``[generator] name`` (and ``hpctune simulate --generator``) is one of :data:`GENERATORS`, a
name another package registers in the entry-point group ``hpctune.generators``, or an
importable ``MODULE:CLASS`` (a :class:`Generator` subclass); see :mod:`hpctune.plugins` and
docs/policies.md "Bring your own policy, generator or curve model".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hpctune.plugins import PluginError, find_class, registered
from hpctune.policies._base import OptionError
from hpctune.policies.generators._base import Generator
from hpctune.policies.generators.grid import GridGenerator
from hpctune.policies.generators.optuna_sampler import NAMED, OptunaGenerator
from hpctune.policies.generators.random import RandomGenerator

if TYPE_CHECKING:
    from hpctune.study.space import SearchSpace

#: hpctune's own generators, by name.
GENERATORS: Mapping[str, type[Generator]] = {
    RandomGenerator.name: RandomGenerator,
    GridGenerator.name: GridGenerator,
    **NAMED,
    OptunaGenerator.name: OptunaGenerator,
}


def generator_class(name: str) -> type[Generator]:
    """The generator class ``name``: one of :data:`GENERATORS`, another package's (entry point
    ``hpctune.generators``) or an importable ``MODULE:CLASS``.

    Raises:
        PluginError: Unknown (with a close match and the known names), it fails to load, or it
            is not a :class:`Generator` subclass.
    """
    found: type[Generator] = find_class("generator", name, GENERATORS, Generator)
    return found


def generator_names() -> list[str]:
    """Every registered generator: hpctune's own, then other packages'."""
    return registered("generator", GENERATORS)


def make_generator(
    name: str, options: Mapping[str, Any], space: SearchSpace, seed: int
) -> Generator:
    """Build the generator ``name`` with ``options`` (the ``[generator]`` table without ``name``).

    Args:
        name: A name of :func:`generator_names`, or an importable ``MODULE:CLASS``.
        options: The generator's options.
        space: The study's search space.
        seed: The generator's seed, ``component_seed(study_seed, "generator")`` in a study.

    Raises:
        OptionError: The name is unknown or not a generator (``key`` is ``"name"``), or an
            option is invalid.
        NoGridError: The grid generator was asked for a space with a range without a grid.
    """
    try:
        cls = generator_class(name)
    except PluginError as exc:
        raise OptionError("name", str(exc)) from exc
    return cls(space, seed, cls.parse(options))


__all__ = ["GENERATORS", "generator_class", "generator_names", "make_generator"]
