"""One epoch, then the best few to the end: the baseline of Egele et al. (arXiv 2307.15422).

"Is One Epoch All You Need For Multi-Fidelity Hyperparameter Optimization?" (Egele,
Guyon, Wu, Balaprakash, 2023) found that training every configuration for one epoch and then
only the top-k to the full budget matched multi-fidelity methods on classic benchmarks at a
tenth of their compute. Here a round screens ``screened`` configurations for ``screen`` steps
(each a segment ending there, suspended with its checkpoint), and once every one of them has
reached it the top ``top_k`` by their value at that step resume and train to ``max_steps``;
the others are terminated. The next round starts as soon as slots are free, so slots do not
wait for a round's stragglers. It is synchronous successive halving with one rung
(:mod:`._halving`), a bracket of ``screened`` trials keeping ``top_k``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpctune.policies._base import PolicyTraits, StudyContext
from hpctune.policies._common import require
from hpctune.policies._halving import BracketShape, SyncHalvingPolicy
from hpctune.policies._options import OptionError


@dataclass(frozen=True)
class OneEpochOptions:
    """Options of :class:`OneEpochPolicy`.

    Attributes:
        screen: Steps every configuration trains before the cut (the paper's one epoch).
        screened: Configurations per round.
        top_k: Configurations of a round that train to the end.
    """

    screen: int = 1
    screened: int = 32
    top_k: int = 4


class OneEpochPolicy(SyncHalvingPolicy):
    """Screen each round's configurations for ``screen`` steps, train the top ``top_k``."""

    name: ClassVar[str] = "one-epoch"
    # not over stage trees (not measured there): SHA's traits otherwise
    traits: ClassVar[PolicyTraits] = PolicyTraits(boundary_decisions=False)
    Options = OneEpochOptions

    def __init__(self, context: StudyContext, options: OneEpochOptions | None = None) -> None:
        self.options = options or OneEpochOptions()
        o = self.options
        require("screen", o.screen, 1)
        require("top_k", o.top_k, 1)
        if o.screened < 2 * o.top_k:
            raise OptionError(
                "screened", f"must be >= 2 * top_k ({2 * o.top_k}), but got {o.screened}"
            )
        if o.screen >= context.max_steps:
            raise OptionError(
                "screen", f"must be < max_steps ({context.max_steps}), but got {o.screen}"
            )
        super().__init__(context, None, o.screened // o.top_k)

    def shapes(self, max_t: int) -> list[BracketShape]:
        """One shape: ``screened`` trials, rungs at ``screen`` and ``max_t``."""
        o = self.options
        return [BracketShape(0, o.screened, (o.screen, max_t))]
