"""Pure policies (schedulers) and configuration generators.

Policies decide what runs; generators propose hyperparameter configurations. Both are pure: no
I/O, no Slurm, no clock. See :mod:`hpctune.policies._base` for the interface.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpctune.policies._base import (
    Action,
    ActionKind,
    Decision,
    Event,
    EventKind,
    OptionError,
    Policy,
    PolicyTraits,
    StudyContext,
    StudyView,
    TrialView,
    parse_options,
)
from hpctune.policies.asha import AshaPolicy
from hpctune.policies.bandit import BanditPolicy
from hpctune.policies.default import DefaultPolicy
from hpctune.policies.earlyterm import EarlyTermPolicy
from hpctune.policies.freeze_thaw import FreezeThawPolicy
from hpctune.policies.hybrid import HybridPolicy
from hpctune.policies.hyperband import HyperbandPolicy
from hpctune.policies.median import MedianStoppingPolicy
from hpctune.policies.one_epoch import OneEpochPolicy
from hpctune.policies.pbt import PbtPolicy
from hpctune.policies.pbt_truncation import TruncationPbtPolicy
from hpctune.policies.pop import PopPolicy
from hpctune.policies.replay import ReplayPolicy
from hpctune.policies.sha import ShaPolicy

POLICIES: Mapping[str, type[Policy]] = {
    DefaultPolicy.name: DefaultPolicy,
    BanditPolicy.name: BanditPolicy,
    ShaPolicy.name: ShaPolicy,
    AshaPolicy.name: AshaPolicy,
    HyperbandPolicy.name: HyperbandPolicy,
    MedianStoppingPolicy.name: MedianStoppingPolicy,
    PopPolicy.name: PopPolicy,
    EarlyTermPolicy.name: EarlyTermPolicy,
    HybridPolicy.name: HybridPolicy,
    FreezeThawPolicy.name: FreezeThawPolicy,
    OneEpochPolicy.name: OneEpochPolicy,
    PbtPolicy.name: PbtPolicy,
    TruncationPbtPolicy.name: TruncationPbtPolicy,
    ReplayPolicy.name: ReplayPolicy,
}


def make_policy(name: str, options: Mapping[str, Any], context: StudyContext) -> Policy:
    """Build the policy ``name`` with ``options`` (the ``[policy]`` table without ``name``)
    for the study ``context`` (:func:`hpctune.study.spec.study_context`).

    Raises:
        OptionError: The name is unknown or an option is invalid (``key`` names which).
    """
    if name not in POLICIES:
        raise OptionError(
            "name", f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}"
        )
    cls = POLICIES[name]
    parsed = parse_options(cls.Options, options)  # type: ignore[attr-defined]
    return cls(context, parsed)  # type: ignore[call-arg]


__all__ = [
    "POLICIES",
    "Action",
    "ActionKind",
    "AshaPolicy",
    "BanditPolicy",
    "Decision",
    "DefaultPolicy",
    "EarlyTermPolicy",
    "Event",
    "EventKind",
    "FreezeThawPolicy",
    "HybridPolicy",
    "HyperbandPolicy",
    "MedianStoppingPolicy",
    "OneEpochPolicy",
    "OptionError",
    "PbtPolicy",
    "Policy",
    "PolicyTraits",
    "PopPolicy",
    "ReplayPolicy",
    "ShaPolicy",
    "StudyContext",
    "StudyView",
    "TrialView",
    "TruncationPbtPolicy",
    "make_policy",
    "parse_options",
]
